"""``RewardService``: one producer (its pools, cache and judge gates) behind a socket for ``Client``\\s.

``qworker serve`` runs one; every process of a distributed trainer connects a
``Client`` to it.  One thread (the *front*) owns the client socket: it takes
requests, submits them to the producer (it is the producer's caller thread),
answers each at once with ``Accepted``, and sends results back in batches as
their futures resolve.  Future callbacks run on the producer's dispatcher
thread and only append to the front's outbox and wake it.  The front's loop is
a ``Reactor``: each turn it receives (when the socket is readable), sends the
results resolved since the last turn, and every ``HOUSEKEEPING_EVERY_S``
resends what is unacknowledged and evicts what is too old or too much.

A request is refused with a clear reason, never held silently: a bad reward
name or params (the producer's own checks), or no worker connected after
``no_workers_grace_s``.

Results reach a client even across a broken link: each ``Resolved`` is kept in
the ``Ledger`` and resent until the client acknowledges it (bounded in bytes
and age; see ``_ledger``).  ``stop`` tells every client it is stopping
(``Closing``), so their waiting futures fail at once as ``service_lost``
instead of after their ``service_timeout_s``.
"""

from __future__ import annotations

import functools
import logging
import secrets
import threading
import time
from collections import defaultdict, deque
from typing import Any, Optional

import zmq

from .._exceptions import QworkerError
from ..engine.producer import Producer
from ..engine.result import Result
from ..engine.status import ServiceInfo, ServiceStatus
from ..transport import client_wire as cw
from ..transport.reactor import Reactor
from ..transport.sockets import bind_server, bound_endpoint, close_server, readable
from ..transport.wire import StatusReply, StatusRequest, WireError
from .ledger import DEFAULT_MAX_AGE_S, DEFAULT_MAX_BYTES, Ledger

log = logging.getLogger("qworker")

__all__ = ["RewardService"]

HOUSEKEEPING_EVERY_S = 0.25  # resends and evictions, at most this often
CLOSING_LINGER_MS = 2000  # how long a stopping service gives its last messages to leave


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
        self._outbox: deque[tuple[bytes, int, int, Result]] = deque()  # from future callbacks
        self._reactor = Reactor(name="service", max_wait_s=HOUSEKEEPING_EVERY_S)
        self._reactor.on_readable(self._sock, self._receive, name="receiving from clients")
        self._reactor.each_turn(lambda now: self._flush(), name="sending results")
        self._reactor.every(HOUSEKEEPING_EVERY_S, self._housekeeping, name="resending and evicting")
        self._wake = self._reactor.wake
        self._why = ""
        self.clients: set[bytes] = set()
        self.requests = 0
        self.dropped_frames = 0
        self._thread = threading.Thread(target=self._run, name="qworker-service", daemon=True)

    def start(self) -> RewardService:
        self._thread.start()
        return self

    def stop(self, why: str = "it was stopped") -> None:
        """Stop serving: send the results resolved so far, tell every client (``Closing``: what they wait on fails
        at once as ``service_lost``), close the socket."""
        self._why = why
        self._reactor.stop()
        self._thread.join(10.0 + CLOSING_LINGER_MS / 1000)
        self._reactor.close()

    # the front thread -----------------------------------------------------------
    def _run(self) -> None:
        linger = 0
        try:
            self._reactor.run()
            try:
                self._flush()
                self._say_closing()
                linger = CLOSING_LINGER_MS
            except Exception:
                log.exception("qworker service: could not tell clients it is stopping")
        finally:
            close_server(self._ctx, self._sock, linger_ms=linger)

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
        sock = self._sock
        for _ in range(1000):
            if not readable(sock):
                return
            frames = sock.recv_multipart(copy=True)
            peer = frames[0] if frames else b"?"
            try:
                if len(frames) != 3:
                    raise WireError(f"expected 3 frames, got {len(frames)}")
                msg = cw.SERVICE.decode(frames[1], frames[2], max_bytes=self.producer.options.max_message_bytes)
            except WireError as exc:
                self._drop(peer, str(exc))
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
                self._send(peer, cw.Pong(self.instance, self._workers(), self.ledger.unknown(peer, msg.waiting)))
                for frames in self.ledger.poke(peer, now):  # it is (back) in touch: what it has not acknowledged
                    self._send_frames(peer, frames)
            elif isinstance(msg, StatusRequest):
                self._send(peer, StatusReply(dict(self.status())))
            else:
                self._drop(peer, f"a {type(msg).__name__} is not a request")

    def _drop(self, peer: bytes, why: str) -> None:
        """Count a bad frame; log the first ten, then one in a thousand."""
        self.dropped_frames += 1
        n = self.dropped_frames
        if n <= 10 or n % 1000 == 0:
            log.warning("qworker service: dropped a bad frame from %r (%s); %d dropped so far", peer[:32], why, n)

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
            futures = self.producer.submit_batch(msg.reward, msg.payloads, params=msg.params, timeout_s=msg.timeout_s,
                                                 lane=peer)  # each client's tasks take turns with the others'
        except Exception as exc:  # ConfigError, RewardError (the client raises the same), or a bad request: answered, never silent
            text = str(exc) if isinstance(exc, QworkerError) else f"bad request ({type(exc).__name__}: {exc})"
            self._send(peer, cw.Accepted(msg.request, self.instance, text, type(exc).__name__))
            return
        self.ledger.taken(peer, msg.request, len(futures))
        self._send(peer, cw.Accepted(msg.request, self.instance, None, ""))
        for i, fut in enumerate(futures):
            fut.add_done_callback(functools.partial(self._on_done, peer, msg.request, i))

    def _on_done(self, peer: bytes, request: int, index: int, fut: Any) -> None:
        """A future resolved (on the producer's dispatcher thread): hand its result to the front thread."""
        # ``engine.result`` rather than ``result()``: a done callback runs once the future is finished, and a ResultFuture
        # never holds an exception; result() takes the future's lock again (4 us of the dispatcher's time per task)
        self._outbox.append((peer, request, index, fut._result))
        self._wake()

    def _flush(self) -> None:
        if not self._outbox:
            return
        by_peer: dict[bytes, list] = defaultdict(list)
        while self._outbox:
            peer, request, index, r = self._outbox.popleft()
            by_peer[peer].append(cw.ResolvedRow(request, index, r))
        now = time.monotonic()
        for peer, rows in by_peer.items():
            for frames in self.ledger.add(peer, rows, now):
                self._send_frames(peer, frames)

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
