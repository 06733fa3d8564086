"""The producer's dispatcher thread: it creates, owns and closes the producer's socket.

It only moves frames and time: it decodes what arrives and hands it to the
``Scheduler`` (the logic), and sends what the scheduler asks.  Other threads
reach it in two ways only: ``submit`` (append tasks to the inbox and write a
byte to a wake pipe) and ``call`` (run a function on the dispatcher thread and
wait for its answer, e.g. ``status``).  Futures carry results back.
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

from ._identity import RunVersions
from ._options import ProducerOptions
from ._pending import PendingTable
from ._scheduler import Scheduler
from ._status import ProducerStatus, Status
from ._task import Pending
from .transport import wire
from .transport.sockets import WakePipe, bind_server, bound_endpoint, close_server, readable

log = logging.getLogger("qworker")

__all__ = ["Dispatcher"]

HOUSEKEEPING_S = 0.25
_T = TypeVar("_T")


class Dispatcher(threading.Thread):
    def __init__(self, *, bind: str, table: PendingTable, options: ProducerOptions, versions: Optional[RunVersions] = None) -> None:
        super().__init__(name="qworker-dispatcher", daemon=True)
        self.options = options
        self.table = table
        # Made here so the endpoint is known at once; used by the dispatcher thread only from start().
        self._ctx, self._sock = bind_server(bind, max_message_bytes=options.max_message_bytes, curve=options.curve(),
                                            insecure=options.insecure)
        self.endpoint = bound_endpoint(self._sock)
        self.scheduler = Scheduler(
            send=self._send, table=table, max_attempts=options.max_attempts,
            heartbeat_timeout_s=3 * options.heartbeat_s, max_message_bytes=options.max_message_bytes,
            task_timeout_s=options.task_timeout_s, versions=versions,
        )
        self.started = time.monotonic()
        self._inbox: deque[Pending] = deque()  # appended by other threads
        self._calls: deque[tuple[Callable[[], None], threading.Event]] = deque()
        self.workers_seen = threading.Condition()  # notified when a new worker says READY
        self.workers_ready = 0  # workers currently known; written under workers_seen
        self._waker = WakePipe()
        self._wake_flag = False
        self._stopping = False

    # called from other threads ----------------------------------------------
    def submit(self, tasks: Iterable[Pending]) -> None:
        """Hand new tasks to the dispatcher thread."""
        self._inbox.extend(tasks)
        self._wake()

    def _wake(self) -> None:
        if not self._wake_flag:
            self._wake_flag = True
            self._waker.wake()

    def call(self, fn: Callable[[], _T], timeout: float = 10.0) -> _T:
        """Run ``fn`` on the dispatcher thread and return its result."""
        done = threading.Event()
        box: list[Any] = []
        self._calls.append((lambda: box.append(fn()), done))
        self._wake()
        if not done.wait(timeout):
            raise TimeoutError("the dispatcher did not answer")
        return box[0]

    def status(self) -> Status:
        """This producer, its pools, their workers, and the judge endpoints (via ``call``)."""
        return self.call(self._status)

    def stop(self) -> None:
        """Stop the thread; it closes the socket on its way out."""
        self._stopping = True
        self._wake()
        self.join(timeout=10.0)
        self._waker.close()

    # dispatcher thread --------------------------------------------------------
    def _status(self) -> Status:
        now = time.monotonic()
        s, counts = self.scheduler, self.table.counts
        producer: ProducerStatus = {
            "endpoint": self.endpoint, "pid": os.getpid(), "host": socket.gethostname(), "uptime_s": round(now - self.started, 1),
            "queued": len(s.queue) + len(self._inbox) + s.waiting_for_admission(), "in_flight": s.in_flight(),
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
            if not self._stopping:  # nothing would resolve what is pending: the table's invariant needs it closed
                self.table.close("the producer's dispatcher thread stopped unexpectedly")

    def _loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._waker.fd, zmq.POLLIN)
        s = self.scheduler
        next_housekeeping = time.monotonic() + HOUSEKEEPING_S
        while not self._stopping:
            timer = s.next_timer(time.monotonic()) if s.policies else None
            poller.poll(int(1000 * (HOUSEKEEPING_S if timer is None else min(timer, HOUSEKEEPING_S))) + 1)
            self._waker.drain()  # drain first, then clear: a wake in between then writes a fresh byte
            self._wake_flag = False
            try:
                inbox = self._inbox
                if inbox:
                    s.add(inbox.popleft() for _ in range(len(inbox)))
                self._receive()
                now = time.monotonic()
                if now >= next_housekeeping:
                    s.housekeeping(now)
                    next_housekeeping = now + HOUSEKEEPING_S
                s.dispatch(now)
                self._count_workers()
                while self._calls:
                    fn, done = self._calls.popleft()
                    fn()
                    done.set()
            except Exception:  # a bug here must not silently stop every future
                log.exception("qworker dispatcher: unexpected error (continuing)")

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
            except wire.WireError as exc:
                s.drop(peer, str(exc))
                continue
            if isinstance(msg, wire.StatusRequest):
                self._send(peer, wire.StatusReply(dict(self._status())))
            else:
                s.handle(peer, msg, time.monotonic())

    def _send(self, peer: bytes, msg: wire.Message) -> bool:
        try:
            self._sock.send_multipart([peer, *wire.encode(msg)], flags=zmq.NOBLOCK)
            return True
        except zmq.ZMQError as exc:  # EHOSTUNREACH: the peer is gone
            log.debug("qworker: cannot send to %r: %s", peer[:32], exc)
            return False
