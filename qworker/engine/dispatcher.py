"""The producer's dispatcher thread: it creates, owns and closes the producer's socket.

It only moves frames and time: it decodes what arrives and hands it to the
``Scheduler`` (the logic), and sends what the scheduler asks.  Other threads
reach it in two ways only: ``submit`` (append tasks to the inbox and wake its
``Reactor``) and ``call`` (run a function on the dispatcher thread and wait for
its answer or exception, e.g. ``status``).  Futures carry results back.

Each turn of its reactor: take the submitted tasks, receive from workers (when
the socket is readable), housekeeping every ``HOUSEKEEPING_S``, dispatch, and
run the calls; it waits at most ``HOUSEKEEPING_S``, or until an admission policy's
next timer.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import deque
from typing import Any, Callable, Iterable, Optional, TypeVar

import zmq

from ..cache.identity import RunVersions
from ..config.options import ProducerOptions
from ..transport import client_wire, wire
from ..transport.endpoint import reachable
from ..transport.ration import PeerRation, RefusedStamps
from ..transport.reactor import Reactor
from ..transport.sockets import CURVE_FRAME_BYTES, bind_server, bound_endpoint, close_server, readable
from .pending import PendingTable
from .scheduler import Scheduler
from .status import ProducerStatus, Status
from .task import Pending

log = logging.getLogger("qworker")

__all__ = ["Dispatcher"]

HOUSEKEEPING_S = 0.25
_CLIENT_KINDS = frozenset((client_wire.SUBMIT, client_wire.PING, client_wire.ACK))  # what a ``Client`` sends a reward service
_T = TypeVar("_T")
POOL_ENDPOINT = "the producer's pool endpoint"  # what this socket is, as a peer it refuses is told (``Refused.by``)


class _Raised:
    """An exception a ``call`` raised on the dispatcher thread, to raise again in its caller's."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Dispatcher(threading.Thread):
    def __init__(self, *, bind: str, table: PendingTable, options: ProducerOptions, versions: Optional[RunVersions] = None) -> None:
        super().__init__(name="qworker-dispatcher", daemon=True)
        self.options = options
        self.table = table
        # Made here so the endpoint is known at once; used by the dispatcher thread only from start().
        curve = options.curve()
        self._ctx, self._sock = bind_server(bind, max_message_bytes=options.max_message_bytes, curve=curve,
                                            insecure=options.insecure)
        self.endpoint = bound_endpoint(self._sock)
        self.scheduler = Scheduler(
            send=self._send, table=table, max_attempts=options.max_attempts,
            heartbeat_timeout_s=3 * options.heartbeat_s, max_message_bytes=options.max_message_bytes,
            task_timeout_s=options.task_timeout_s, versions=versions, framing_bytes=CURVE_FRAME_BYTES if curve is not None else 0,
        )
        self.started = time.monotonic()
        self._inbox: deque[list[Pending]] = deque()  # batches of new tasks, appended by other threads
        self._calls: deque[Callable[[], None]] = deque()
        self.workers_seen = threading.Condition()  # notified when a new worker says READY
        self.workers_ready = 0  # workers currently known; written under workers_seen
        self._reactor = Reactor(name="dispatcher", max_wait_s=HOUSEKEEPING_S)
        self._reactor.each_turn(self._take_inbox, name="taking submitted tasks")
        self._reactor.on_readable(self._sock, self._receive, name="receiving from workers")
        self._reactor.every(HOUSEKEEPING_S, self.scheduler.housekeeping, name="housekeeping", first_in_s=HOUSEKEEPING_S)
        self._reactor.each_turn(self._dispatch, name="dispatching")
        self._reactor.each_turn(self._run_calls, name="calls from other threads")
        self._reactor.deadline(self._next_timer)
        self._wake = self._reactor.wake
        self._refused = RefusedStamps()  # the stamps of the peers refused, a line for each of the first
        self._clients_refused = PeerRation()  # Clients that connected here (``_refuse_client``): a line each
        # where a reward service serving this producer takes Clients (its bound endpoint), while it serves: named to
        # a Client that connected here instead; written by the service (attaching, on the dispatcher thread; leaving,
        # on the thread that stops it), read on the dispatcher thread
        self.clients_endpoint: Optional[str] = None

    # called from other threads ----------------------------------------------
    def submit(self, tasks: Iterable[Pending]) -> None:
        """Hand new tasks to the dispatcher thread (one batch: a list is handed over as it is)."""
        self._inbox.append(tasks if type(tasks) is list else list(tasks))
        self._wake()

    def call(self, fn: Callable[[], _T], timeout: float = 10.0) -> _T:
        """Run ``fn`` on the dispatcher thread and return its result (at once when called on that thread: a reward
        service's handlers run there)."""
        if threading.current_thread() is self:
            return fn()
        done = threading.Event()
        box: list[Any] = []

        def run() -> None:
            try:
                box.append(fn())
            except BaseException as exc:  # raised again in the caller's thread, not the dispatcher's
                box.append(_Raised(exc))
            done.set()

        self._calls.append(run)
        self._wake()
        if not done.wait(timeout):
            raise TimeoutError("the dispatcher did not answer")
        if isinstance(box[0], _Raised):
            raise box[0].exc
        return box[0]

    def status(self) -> Status:
        """This producer, its pools, their workers, and the judge endpoints (via ``call``)."""
        return self.call(self._status)

    def stop(self) -> None:
        """Stop the thread; it closes the socket on its way out."""
        self._reactor.stop()
        self.join(timeout=10.0)
        self._reactor.close()

    # dispatcher thread --------------------------------------------------------
    def dispatch_submitted(self) -> None:
        """From a handler on the dispatcher thread: take the tasks submitted so far and dispatch them now, not at
        the next turn (a reward service does after taking requests: their tasks leave in the turn they arrived)."""
        now = time.monotonic()
        self._take_inbox(now)
        self._dispatch(now)

    def _status(self) -> Status:
        now = time.monotonic()
        s, counts = self.scheduler, self.table.counts
        producer: ProducerStatus = {
            "endpoint": self.endpoint, "pid": os.getpid(), "host": socket.gethostname(), "uptime_s": round(now - self.started, 1),
            "queued": s.queued() + sum(map(len, list(self._inbox))) + s.waiting_for_admission(), "in_flight": s.in_flight(),
            "pending": len(self.table), "submitted": counts["submitted"], "rejected": counts["rejected"],
            "resolved": counts["resolved"], "failed": counts["failed"], "cache_hits": counts["cache_hits"],
            "deduplicated": counts["deduplicated"], "cache_entries": len(self.table.cache),
            "dropped_frames": s.stats["dropped_frames"], "dropped_results": s.stats["dropped_results"],
            "duplicate_results": s.stats["duplicate_results"], "redelivered": s.stats["redelivered"], **self.table.cache.health(),
        }
        return {"producer": producer, "pools": s.pools(), "judges": s.policy_status(now)}

    def run(self) -> None:
        try:
            self._loop()
        finally:
            close_server(self._ctx, self._sock)
            if not self._reactor.stopping:  # nothing would resolve what is pending: the table's invariant needs it closed
                self.table.close("the producer's dispatcher thread stopped unexpectedly")

    def _loop(self) -> None:
        self._reactor.run()

    def _next_timer(self, now: float) -> Optional[float]:
        s = self.scheduler
        return s.next_timer(now) if s.policies else None

    def _take_inbox(self, now: float) -> None:
        inbox = self._inbox
        if inbox:
            batch = inbox.popleft()
            if inbox:  # more batches: one for the scheduler (a copy: the first is its submitter's list)
                batch = list(batch)
                while inbox:
                    batch.extend(inbox.popleft())
            self.scheduler.add(batch)

    def _dispatch(self, now: float) -> None:
        self.scheduler.dispatch(now)
        self._count_workers()

    def _run_calls(self, now: float) -> None:
        while self._calls:
            self._calls.popleft()()

    def _count_workers(self) -> None:
        n = len(self.scheduler.fleet.workers)
        if n != self.workers_ready:
            with self.workers_seen:
                self.workers_ready = n
                self.workers_seen.notify_all()

    def _receive(self) -> None:
        sock, s = self._sock, self.scheduler
        for _ in range(10_000):  # bounded, so dispatch and housekeeping still run under load
            if not readable(sock):
                return
            frames = sock.recv_multipart(copy=True)
            if len(frames) != 3:
                s.drop(frames[0] if frames else b"?", f"expected 3 frames, got {len(frames)}")
                continue
            peer, kind, body = frames
            try:
                msg = wire.PRODUCER.decode(kind, body, max_bytes=self.options.max_message_bytes)
            except wire.ProtocolMismatch as exc:
                self._refuse(peer, exc)
                continue
            except wire.WireError as exc:
                if kind in _CLIENT_KINDS:
                    self._refuse_client(peer)
                else:
                    s.drop(peer, str(exc))
                continue
            if isinstance(msg, wire.StatusRequest):
                self._send(peer, wire.StatusReply(dict(self._status())))
            else:
                s.handle(peer, msg, time.monotonic())

    def _refuse(self, peer: bytes, exc: wire.ProtocolMismatch) -> None:
        """A worker or pool of another wire protocol: answer ``Refused`` (a pool stops on hearing it, and its workers with
        it; none of them is registered); count the frame as dropped, and log one line per version refused (the first ten
        versions).  (A Client's frame, of any protocol, is not a kind this endpoint decodes: ``_refuse_client``.)"""
        self.scheduler.stats["dropped_frames"] += 1
        if self._refused.first(exc):
            log.error("qworker: the producer at %s refused %r: %s; install the same qworker version on both",
                      self.endpoint, peer[:64].decode(errors="replace"), exc)
        self._send(peer, wire.refusal())

    def _refuse_client(self, peer: bytes) -> None:
        """A reward service's ``Client`` pointed at this endpoint (where pools connect): answer each of its frames
        ``Refused``, naming what this endpoint is and where Clients connect (the Client raises that line at once), count
        each as dropped, and log one line per Client (``PeerRation``: its submission and its ping are one line)."""
        self.scheduler.stats["dropped_frames"] += 1
        where = (f"Clients connect to {reachable(self.clients_endpoint)}" if self.clients_endpoint else
                 "this producer serves no Clients ('qworker serve' does: connect a Client to its --listen)")
        if self._clients_refused.tick(peer):
            log.error("qworker: the producer at %s refused %r: a Client at the pools' endpoint (%s)", self.endpoint,
                      peer[:32].decode(errors="replace"), where)
        self._send(peer, wire.Refused(*wire.STAMP, f"it is for pools and workers ('qworker-pool --connect'), not a reward "
                                                   f"service's Clients; {where}", POOL_ENDPOINT))

    def _send(self, peer: bytes, msg: wire.Message) -> bool:
        try:
            self._sock.send_multipart([peer, *wire.encode(msg)], flags=zmq.NOBLOCK)
            return True
        except zmq.ZMQError as exc:  # EHOSTUNREACH: the peer is gone
            log.debug("qworker: cannot send to %r: %s", peer[:32], exc)
            return False
