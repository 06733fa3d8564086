"""``RewardService``: one producer (its pools, cache and judge gates) behind a socket for ``Client``\\s.

``qworker serve`` runs one; every process of a distributed trainer connects a
``Client`` to it.  The service has no thread of its own: its handlers run on
the producer's dispatcher thread, on the dispatcher's ``Reactor``, after the
dispatcher's own steps.  Each turn it receives (when its socket is readable),
submits each request to the producer and has the dispatcher send their tasks at
once, in the same turn, with no hand-over between threads (and no contention
for the GIL between two threads of the service); each request's ``Accepted``
leaves at the end of that turn, after its tasks (it is not on the path of their
results), before any result of it.  Future callbacks run on the dispatcher
thread too, where results arrive, and only append to the service's outbox.

Results leave in batches: at the end of each turn the service sends a
client the results resolved for it when nothing else it asked for is still
in flight (a lone task's result leaves at once), when ``FLUSH_EVERY`` of them
are waiting, or, for every client, when the oldest result waiting has waited
``RESULTS_WAIT_S`` (one reactor deadline, however many clients wait);
otherwise they wait for company, so a client of many small tasks gets a few
large ``Resolved`` messages rather than one per worker message.  Every ``HOUSEKEEPING_EVERY_S`` it resends what is unacknowledged and
evicts what is too old or too much.

A request is refused with a clear reason, never held silently: a bad reward
name or params (the producer's own checks), or no worker connected after
``no_workers_grace_s``.

Results reach a client even across a broken link: each ``Resolved`` is kept in
the ``Ledger`` and resent until the client acknowledges it (bounded in bytes
and age; see ``_ledger``).  ``stop`` tells every client it is stopping
(``Closing``), so their waiting futures fail at once as ``service_lost``
instead of after their ``service_timeout_s``; so does the end of the
dispatcher's reactor (its producer closed, with or without ``stop``), which
then closes the service's socket.  ``stop`` never waits on a dispatcher that
has ended, whenever it ended.

Everything the service holds (its socket, the ledger, its counts) is used on
the dispatcher thread only, from ``start`` until it leaves the reactor (at
``stop`` or when the reactor ends); then ``stop``'s thread closes the socket
unless the dispatcher thread did.  The outbox may also be appended to by a
thread that closes the producer (it cancels what is pending).
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
import time
from collections import deque
from typing import Any, Optional, Union

import msgspec
import zmq

from .._exceptions import QworkerError
from ..engine.gc_pause import paused_gc
from ..engine.producer import Producer
from ..engine.result import Result, ResultFuture, add_done_callbacks
from ..engine.status import ServiceInfo, ServiceStatus
from ..transport import client_wire as cw
from ..transport.endpoint import reachable
from ..transport.ration import LogRation, PeerRation, RefusedStamps
from ..transport.reactor import Reactor, Step
from ..transport.sockets import bind_server, bound_endpoint, close_server
from ..transport.wire import (
    BYE,
    GIVEBACK,
    POOL,
    READY,
    RESULTS,
    STAMP,
    ProtocolMismatch,
    Refused,
    StatusReply,
    StatusRequest,
    WireError,
    refusal,
)
from .ledger import DEFAULT_MAX_AGE_S, DEFAULT_MAX_BYTES, FLUSH_EVERY, Ledger

log = logging.getLogger("qworker")

_POOL_KINDS = frozenset((READY, POOL, RESULTS, GIVEBACK, BYE))  # what pools and workers send a producer

__all__ = ["RewardService"]


class _Asked(msgspec.Struct, eq=False, gc=False):
    """One request of one client, while results of it are owed: those resolved and not yet sent, by position in it.

    Each future in flight names the request that asked for it (``ResultFuture.asker``, its position in
    ``asked_at``), so following a task makes no object and no table entry.  Not tracked by the cyclic GC (it refers
    to nothing that refers back to it, nor to any future): a future's note adds nothing the collector must follow,
    and an ``(asked, index)`` tuple (a future asked for more than once) is untracked at its first collection, as a
    tuple of a client's id and two numbers would be."""

    peer: bytes
    request: int
    by: int  # the service that took it (``RewardService._mark``): a future's note is another service's if it differs
    indexes: list[int] = msgspec.field(default_factory=list)  # positions (in the request) of the results waiting, in order
    results: list[Result] = msgspec.field(default_factory=list)  # those results


_Owner = tuple[_Asked, int]  # (the request, the index in it): one asker of a future
_marks = itertools.count(1)  # ``RewardService._mark``s

HOUSEKEEPING_EVERY_S = 0.25  # resends and evictions, at most this often
CLOSING_LINGER_MS = 2000  # how long a stopping service gives its last messages to leave
RECEIVE_PER_TURN = 64  # client messages read per turn (the workers' results are read on the same thread)
RESULTS_WAIT_S = 0.005  # the longest a resolved result waits for company while its client has others in flight
STOP_WAIT_S = 10.0  # how long ``stop`` waits for the dispatcher thread to send the last messages


class RewardService:
    http_url: Optional[str] = None  # the HTTP front's URL, set by 'qworker serve --http'; shown by 'qworker status'

    def __init__(self, producer: Producer, *, listen: str, no_workers_grace_s: float = 10.0,
                 ledger_max_bytes: int = DEFAULT_MAX_BYTES, ledger_max_age_s: float = DEFAULT_MAX_AGE_S) -> None:
        """``ledger_max_bytes`` / ``ledger_max_age_s`` bound the results kept for clients until they acknowledge them."""
        self.producer = producer
        self.instance = secrets.token_hex(8)
        self.no_workers_grace_s = no_workers_grace_s
        self.started = time.monotonic()
        opts = producer.options
        self._ctx, self._sock = bind_server(listen, max_message_bytes=opts.max_message_bytes, curve=opts.curve(), insecure=opts.insecure)
        self._sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a client that reconnects takes its identity back from a dead connection
        self.endpoint = bound_endpoint(self._sock)
        self.ledger = Ledger(instance=self.instance, max_bytes=ledger_max_bytes, max_age_s=ledger_max_age_s)
        self._outbox: deque[ResultFuture] = deque()  # futures resolved (appended by their callback, on any thread)
        # Who asked for each future not yet resolved is noted on the future (``_follow``): the request that did
        # (``asker``) and its index in it (``asked_at``), or in ``asker`` a list of such pairs when several did (the
        # same task twice in a request, or in two clients' requests while in flight).  A future whose note is another
        # service's (one that left this producer, or another one on it) is noted here instead.  The dispatcher
        # thread's only.
        self._mark = next(_marks)
        self._owners: dict[ResultFuture, Union[_Owner, list[_Owner]]] = {}
        self._waiting: dict[bytes, list[_Asked]] = {}  # per client: its requests with results resolved and not yet sent
        self._oldest: Optional[float] = None  # when the oldest result waiting (any client's) was resolved (monotonic s)
        self._in_flight: dict[bytes, int] = {}  # per client: results taken and not yet sent (resolved or not)
        self._to_answer: list[tuple[bytes, int]] = []  # (client, request) taken this turn: answered at its end
        self._dispatcher = producer._dispatcher
        self._dispatcher_ident = self._dispatcher.ident  # the thread the service's handlers run on (started with its producer)
        self._reactor: Reactor = self._dispatcher._reactor  # the service's handlers run on the dispatcher thread
        self._steps: list[Step] = []
        self._attached = False  # its handlers are on the reactor
        self._joined = False  # it joined the reactor once: from then on only the dispatcher thread leaves it
        self._stopped = False  # stop() was called
        self._left = threading.Event()  # it left the reactor: the last messages are sent, its socket unused there
        self._sock_lock = threading.Lock()  # closing the socket: by stop()'s thread or the dispatcher's, once
        self._sock_closed = False
        self._why = ""
        self.clients: set[bytes] = set()
        self.requests = 0
        self.dropped_frames = 0
        self._pools_refused = PeerRation()  # pools and workers that connected to the clients' endpoint (``_refuse_pool``): a line each
        self._bad_frames = LogRation()  # frames dropped as not valid messages (``_drop``): what its log lines are rationed by
        self._refused = RefusedStamps()  # the stamps of the clients refused, a line for each of the first

    def start(self) -> RewardService:
        """Start serving: the service's handlers join the dispatcher's reactor."""
        self._dispatcher.call(self._attach)
        return self

    def stop(self, why: str = "it was stopped") -> None:
        """Stop serving: send the results resolved so far, tell every client (``Closing``: what they wait on fails
        at once as ``service_lost``), close the socket.  The producer goes on.  Returns once that is done, or as
        soon as the dispatcher thread has ended (it did the same on its way out); a dispatcher thread that does
        not answer within ``STOP_WAIT_S`` may still use the socket, which is then left open (logged)."""
        if self._stopped:
            return
        self._why = why
        self._stopped = True  # after its reason: a turn that sees it says Closing with that reason
        if not self._joined or threading.current_thread() is self._dispatcher:
            self._leave()  # never joined the reactor, or called from one of its handlers: this thread may
        else:
            self._reactor.wake()  # the next turn leaves the reactor (``_flush`` sees ``_stopped``)
            # set by that turn, or by the reactor's end however it ends (``_reactor_ended``, which a thread that
            # has died ran on its way out): only the dispatcher thread leaves a reactor the service joined
            if not self._left.wait(STOP_WAIT_S):
                log.error("qworker service: the dispatcher thread did not answer within %.0f s; the client socket is left "
                          "open", STOP_WAIT_S)
                return
        self._close_socket()  # waits up to CLOSING_LINGER_MS for the last messages, off the dispatcher thread

    def _close_socket(self) -> None:
        """Close the socket once; a second caller returns when the first has closed it (up to its linger)."""
        with self._sock_lock:
            if self._sock_closed:
                return
            self._sock_closed = True
            close_server(self._ctx, self._sock, linger_ms=CLOSING_LINGER_MS)

    # the dispatcher thread ----------------------------------------------------------
    def _attach(self) -> None:
        r = self._reactor
        self._steps = [
            r.on_readable(self._sock, self._receive, name="receiving from clients"),
            r.each_turn(self._flush, name="sending results to clients"),
            r.every(HOUSEKEEPING_EVERY_S, self._housekeeping, name="resending and evicting"),
        ]
        r.deadline(self._next_flush)
        r.at_exit(self._reactor_ended)
        self._dispatcher.clients_endpoint = self.endpoint  # named to a Client that connects to the pools' endpoint
        self._attached = self._joined = True

    def _reactor_ended(self) -> None:
        """The dispatcher's reactor ended (its producer is closing, with or without ``stop``): say ``Closing``
        to every client and close the socket, here, on its last use."""
        if not self._why:
            self._why = "its producer closed"
        self._leave()
        self._close_socket()

    def _leave(self) -> None:
        """Leave the reactor, send every result resolved, say ``Closing`` (once)."""
        if self._left.is_set():
            return
        self._attached = False
        if self._dispatcher.clients_endpoint == self.endpoint:  # not a successor's, attached meanwhile
            self._dispatcher.clients_endpoint = None
        try:
            for step in self._steps:
                self._reactor.cancel(step)
            self._steps = []
            self._reactor.forget(self._next_flush)  # nothing of the reactor refers to a service that left it
            self._reactor.forget(self._reactor_ended)
            self._flush(time.monotonic(), everything=True)
            self._owners.clear()  # what is still pending is never sent (its clients are told Closing)
            self._say_closing()
        except Exception:
            log.exception("qworker service: could not tell clients it is stopping")
        finally:
            self._left.set()

    def _housekeeping(self, now: float) -> None:
        for peer, frames in self.ledger.due(now):
            self._send_frames(peer, frames)
        self.ledger.evict(now)

    def _say_closing(self) -> None:
        peers = set(self.clients) | set(self.ledger.peers())
        for peer in peers:
            self._send(peer, cw.Closing(self.instance, f"the reward service at {self.endpoint} stopped ({self._why})"))
        if peers:
            log.info("qworker service: told %d clients it is stopping", len(peers))

    def _receive(self) -> None:
        taken = len(self._to_answer)
        # Taking a request makes objects the cyclic GC counts and that live until their results leave (each task's
        # future): collections set off here would move every task in flight to older
        # generations, and full collections rescan them all; none of it is cyclic garbage, so the collector waits
        # for the end of the handler (as ``Producer.submit_batch`` does for one submission).
        with paused_gc():
            try:
                self._receive_some()
            finally:
                if len(self._to_answer) > taken:
                    self._dispatcher.dispatch_submitted()  # their tasks leave now, before their Accepted (this turn's end)

    def _receive_some(self) -> None:
        recv = self._sock.recv_multipart
        for _ in range(RECEIVE_PER_TURN):  # bounded: what is left makes the next turn come at once
            try:
                # NOBLOCK until there is nothing more: a check before each message (``sockets.readable``) costs a
                # system call, as one refused receive at the end of a turn does
                frames = recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            peer = frames[0] if frames else b"?"
            try:
                if len(frames) != 3:
                    raise WireError(f"expected 3 frames, got {len(frames)}")
                msg = cw.SERVICE.decode(frames[1], frames[2], max_bytes=self.producer.options.max_message_bytes)
            except ProtocolMismatch as exc:  # a client of another version: told so, at its first request
                self._refuse(peer, exc)
                continue
            except WireError as exc:
                if len(frames) == 3 and frames[1] in _POOL_KINDS:
                    self._refuse_pool(peer)
                else:
                    self._drop(peer, str(exc))
                continue
            if isinstance(msg, StatusRequest):  # ``qworker status``, a peer of its own each time: no client of the ledger's
                self._send(peer, StatusReply(dict(self.status())))
                continue
            self.clients.add(peer)
            now = time.monotonic()
            self.ledger.heard(peer, now)
            if isinstance(msg, cw.Ack):
                self.ledger.ack(peer, msg.seqs)
            elif isinstance(msg, cw.Submit):
                if self.ledger.holds(peer, msg.request):  # a resend of a request taken before (its Accepted was lost)
                    self.ledger.repeat()
                    self._send(peer, cw.Accepted(msg.request, self.instance, None, ""))
                else:
                    self._on_submit(peer, msg)
            elif isinstance(msg, cw.Ping):
                self._send(peer, cw.Pong(self.instance, self._workers(), self.ledger.unknown(peer, msg.waiting),
                                         self.producer.options.max_message_bytes))
                for frames in self.ledger.poke(peer, now):  # it is (back) in touch: what it has not acknowledged
                    self._send_frames(peer, frames)
            else:
                self._drop(peer, f"a {type(msg).__name__} is not a request")

    def _refuse(self, peer: bytes, exc: ProtocolMismatch) -> None:
        """Answer ``Refused`` (the client fails that request, and what it waits on, with one line naming both
        versions); count the frame as dropped, and log one line per version refused (the first ten versions)."""
        self.dropped_frames += 1
        if self._refused.first(exc):
            log.error("qworker service: refused client %r: %s; install the same qworker version on both",
                      peer[:32].decode(errors="replace"), exc)
        self._send(peer, refusal())

    def _refuse_pool(self, peer: bytes) -> None:
        """A pool or worker pointed at the clients' endpoint: answer ``Refused`` naming where pools connect (the pool
        stops with that line), count the frame as dropped, and log one line per pool or worker (``PeerRation``: a pool's
        reports until it stops are one line)."""
        self.dropped_frames += 1
        where = (f"pools connect to {reachable(self.producer.endpoint)}" if self.producer.options.bind else
                 "this service takes no remote pools: serve it with --bind tcp://HOST:PORT for them")
        if self._pools_refused.tick(peer):
            log.error("qworker service: refused %r: a pool or worker at the clients' endpoint %s (%s)",
                      peer[:32].decode(errors="replace"), self.endpoint, where)
        self._send(peer, Refused(*STAMP, f"it is for qworker.Clients, not pools; {where}", "the reward service's clients' endpoint"))

    def _drop(self, peer: bytes, why: str) -> None:
        """Count a bad frame; log the first ten, then one in a thousand (refused clients, counted in ``dropped_frames``
        too, are not in that ration: they have lines of their own)."""
        self.dropped_frames += 1
        if self._bad_frames.tick():
            log.warning("qworker service: dropped a bad frame from %r (%s); %d bad so far", peer[:32], why, self._bad_frames.count)

    def _workers(self) -> int:
        return self.producer._dispatcher.workers_ready

    def _on_submit(self, peer: bytes, msg: cw.Submit) -> None:
        self.requests += 1
        if self._workers() == 0 and time.monotonic() - self.started > self.no_workers_grace_s:
            why = (f"the reward service has no workers (none connected for {time.monotonic() - self.started:.0f} s): start "
                   f"'qworker-pool --connect {self.producer.endpoint}' or serve with --workers N")
            self._send(peer, cw.Accepted(msg.request, self.instance, why, "ServiceUnavailable"))
            return
        try:
            # the payloads as the client encoded them (``client_wire``): hashed and sent on, never decoded here
            futures = self.producer.submit_batch(msg.reward, msg.payloads, params=msg.params, timeout_s=msg.timeout_s,
                                                 lane=peer, encoded=True)  # each client's tasks take turns with the others'
        except Exception as exc:  # ConfigError, RewardError (the client raises the same), or a bad request: answered, never silent
            text = str(exc) if isinstance(exc, QworkerError) else f"bad request ({type(exc).__name__}: {exc})"
            self._send(peer, cw.Accepted(msg.request, self.instance, text, type(exc).__name__))
            return
        self.ledger.taken(peer, msg.request, len(futures))
        self._in_flight[peer] = self._in_flight.get(peer, 0) + len(futures)
        self._to_answer.append((peer, msg.request))
        # One callback for every future (``_on_done``, registered for a whole request under one hold of the futures'
        # lock, one tuple shared by them all) and, on each future, a note of whose it is: no per-task closure, and
        # nothing made per task (see ``_receive``).
        add_done_callbacks(self._follow(_Asked(peer, msg.request, self._mark), futures), self._on_done)  # at once for
        # those resolved already (cache hits)

    def _follow(self, asked: _Asked, futures: list[ResultFuture]) -> list[ResultFuture]:
        """Note that ``asked`` asked for ``futures`` (in its order); those this service did not follow yet, which
        ``_on_done`` is to follow.  Relies on the producer never handing out again a future whose result this service
        has sent (``PendingTable``: a task leaves the table before its future is set, and a cache hit gets a fresh
        future): a note added to one would never be answered."""
        mark, followed = self._mark, []
        for i, fut in enumerate(futures):
            held = fut.asker
            if held is None:  # the usual case: followed by no service yet
                fut.asker = asked
                fut.asked_at = i
                followed.append(fut)
            elif type(held) is _Asked and held.by == mark:  # this service's, asked for again (in this request or another)
                fut.asker = [(held, fut.asked_at), (asked, i)]
            elif type(held) is list and held[0][0].by == mark:  # this service's, asked for several times already
                held.append((asked, i))
            else:  # another service's note: this one's table
                owners = self._owners
                mine = owners.get(fut)
                if mine is None:
                    owners[fut] = (asked, i)
                    followed.append(fut)
                elif isinstance(mine, list):
                    mine.append((asked, i))
                else:
                    owners[fut] = [mine, (asked, i)]
        return followed

    def _on_done(self, fut: Any) -> None:
        """A future resolved (on the dispatcher thread, or on a thread closing the producer): queue it."""
        if not self._attached:  # left the reactor (``_leave`` sent every result then): nothing would send it, and the
            return              # reactor's wake pipe may be closed already
        self._outbox.append(fut)
        if threading.get_ident() != self._dispatcher_ident:
            self._reactor.wake()  # sent at the end of the turn this causes

    def _flush(self, now: float, everything: bool = False) -> None:
        """Answer the requests taken this turn, then send each client's resolved results that should not wait
        longer (see the module's docstring), or all of them (``everything``)."""
        if self._stopped and not everything:
            self._leave()
            return
        if self._to_answer:
            for peer, request in self._to_answer:  # a request's Accepted goes before its results
                self._send(peer, cw.Accepted(request, self.instance, None, ""))
            self._to_answer = []
        outbox, waiting = self._outbox, self._waiting
        if outbox:
            if self._oldest is None:
                self._oldest = now
            take, mark = outbox.popleft, self._mark
            for _ in range(len(outbox)):  # what a callback on another thread appends meanwhile waits for the next turn
                fut: Any = take()
                result = fut._result  # finished: ``result()`` would take its lock again
                note = fut.asker
                if type(note) is _Asked and note.by == mark:  # one asker, this service's (the usual case)
                    if not note.indexes:  # its first result waiting: the request joins its client's
                        held = waiting.get(note.peer)
                        if held is None:
                            waiting[note.peer] = [note]
                        else:
                            held.append(note)
                    note.indexes.append(fut.asked_at)
                    note.results.append(result)
                    continue
                if type(note) is list and note[0][0].by == mark:  # several askers
                    owners: list[_Owner] = note
                else:  # followed in this service's table, or not at all (it left, and cleared it)
                    owner = self._owners.pop(fut, None)
                    if owner is None:
                        continue
                    owners = [owner] if isinstance(owner, tuple) else owner
                for asked, index in owners:
                    if not asked.indexes:
                        held = waiting.get(asked.peer)
                        if held is None:
                            waiting[asked.peer] = [asked]
                        else:
                            held.append(asked)
                    asked.indexes.append(index)
                    asked.results.append(result)
        if not waiting:
            return
        waited = everything or (self._oldest is not None and now - self._oldest >= RESULTS_WAIT_S)
        in_flight = self._in_flight
        due = []
        for peer, held in waiting.items():
            n = sum(len(asked.indexes) for asked in held)  # (one sum per request, not per result)
            if waited or self._due(peer, n):
                due.append((peer, n))
        for peer, n in due:
            groups: list[cw.Group] = []
            for asked in waiting.pop(peer):
                groups.append((asked.request, asked.indexes, asked.results))
                asked.indexes, asked.results = [], []  # sent on (the request may have more to come)
            left = in_flight.get(peer, 0) - n
            if left > 0:
                in_flight[peer] = left
            else:
                in_flight.pop(peer, None)  # counted again from its next request
            for frames in self.ledger.add(peer, groups, now):
                self._send_frames(peer, frames)
        if not waiting:
            self._oldest = None

    def _due(self, peer: bytes, n: int) -> bool:
        """Whether ``peer``'s ``n`` waiting results leave before the window ends: nothing else of it in flight, or a full message."""
        return self._in_flight.get(peer, 0) <= n or n >= FLUSH_EVERY

    def _next_flush(self, now: float) -> Optional[float]:
        """The reactor's deadline: seconds until the waiting results are due (None: none waits)."""
        if self._oldest is None or not self._attached:
            return None
        return max(0.0, self._oldest + RESULTS_WAIT_S - now)

    def _send(self, peer: bytes, msg: cw.ClientMessage) -> None:
        self._send_frames(peer, cw.encode(msg))

    def _send_frames(self, peer: bytes, frames: list[bytes]) -> bool:
        try:
            self._sock.send_multipart([peer, *frames], flags=zmq.NOBLOCK)
            return True
        except zmq.ZMQError as exc:  # not connected now: the ledger resends results until they are acknowledged
            log.debug("qworker service: cannot send to %r: %s", peer[:32], exc)
            return False

    def status(self) -> ServiceStatus:
        st = self.producer.status()
        info: ServiceInfo = {"endpoint": self.endpoint, "instance": self.instance, "clients": len(self.clients),
                             "requests": self.requests, "dropped_frames": self.dropped_frames,
                             "http": self.http_url, "ledger": self.ledger.snapshot()}
        return {"producer": st["producer"], "pools": st["pools"], "judges": st["judges"], "service": info}
