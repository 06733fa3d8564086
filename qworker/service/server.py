"""``RewardService``: one producer (its pools, cache and judge gates) behind a socket for ``Client``\\s.

``qworker serve`` runs one; every process of a distributed trainer connects a
``Client`` to it.  One thread (the *front*) owns the client socket: it takes
requests, submits them to the producer (it is the producer's caller thread),
answers each at once with ``Accepted``, and sends results back in batches as
their futures resolve.  Future callbacks run on the producer's dispatcher
thread and only append to the front's outbox and wake it.

A request is refused with a clear reason, never held silently: a bad reward
name or params (the producer's own checks), or no worker connected after
``no_workers_grace_s``.
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
from .._producer import Producer
from .._result import Result
from .._status import ServiceInfo, ServiceStatus
from ..transport import client_wire as cw
from ..transport.sockets import WakePipe, bind_server, bound_endpoint, close_server, readable
from ..transport.wire import StatusReply, StatusRequest, WireError

log = logging.getLogger("qworker")

__all__ = ["RewardService"]

FLUSH_EVERY = 512  # results per Resolved message, at most


class RewardService:
    http_url: Optional[str] = None  # the HTTP front's URL, set by 'qworker serve --http'; shown by 'qworker status'

    def __init__(self, producer: Producer, *, listen: str, no_workers_grace_s: float = 10.0) -> None:
        self.producer = producer
        self.instance = secrets.token_hex(8)
        self.no_workers_grace_s = no_workers_grace_s
        self.started = time.monotonic()
        opts = producer.options
        self._ctx, self._sock = bind_server(listen, max_message_bytes=opts.max_message_bytes, curve=opts.curve(), insecure=opts.insecure)
        self.endpoint = bound_endpoint(self._sock)
        self._outbox: deque[tuple[bytes, int, int, Result]] = deque()  # from future callbacks
        self._waker = WakePipe()
        self._wake = self._waker.wake
        self._stopping = False
        self.clients: set[bytes] = set()
        self.requests = 0
        self.dropped_frames = 0
        self._thread = threading.Thread(target=self._run, name="qworker-service", daemon=True)

    def start(self) -> RewardService:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self._wake()
        self._thread.join(10.0)
        self._waker.close()

    # the front thread -----------------------------------------------------------
    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._waker.fd, zmq.POLLIN)
        try:
            while not self._stopping:
                poller.poll(500)
                self._waker.drain()
                try:
                    self._receive()
                    self._flush()
                except Exception:
                    log.exception("qworker service: unexpected error (continuing)")
        finally:
            close_server(self._ctx, self._sock)

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
                msg = cw.decode(frames[1], frames[2], max_bytes=self.producer.options.max_message_bytes)
            except WireError as exc:
                self._drop(peer, str(exc))
                continue
            self.clients.add(peer)
            if isinstance(msg, cw.Submit):
                self._on_submit(peer, msg)
            elif isinstance(msg, cw.Ping):
                self._send(peer, cw.Pong(self.instance, self._workers()))
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
            futures = self.producer.submit_batch(msg.reward, msg.payloads, params=msg.params, timeout_s=msg.timeout_s)
        except Exception as exc:  # ConfigError, RewardError (the client raises the same), or a bad request: answered, never silent
            text = str(exc) if isinstance(exc, QworkerError) else f"bad request ({type(exc).__name__}: {exc})"
            self._send(peer, cw.Accepted(msg.request, self.instance, text, type(exc).__name__))
            return
        self._send(peer, cw.Accepted(msg.request, self.instance, None, ""))
        for i, fut in enumerate(futures):
            fut.add_done_callback(functools.partial(self._on_done, peer, msg.request, i))

    def _on_done(self, peer: bytes, request: int, index: int, fut: Any) -> None:
        """A future resolved (on the producer's dispatcher thread): hand its result to the front thread."""
        self._outbox.append((peer, request, index, fut.result()))
        self._wake()

    def _flush(self) -> None:
        if not self._outbox:
            return
        by_peer: dict[bytes, list] = defaultdict(list)
        while self._outbox:
            peer, request, index, r = self._outbox.popleft()
            by_peer[peer].append([request, index, r.to_dict()])
        for peer, rows in by_peer.items():
            for i in range(0, len(rows), FLUSH_EVERY):
                self._send(peer, cw.Resolved(self.instance, rows[i : i + FLUSH_EVERY]))

    def _send(self, peer: bytes, msg: cw.ClientMessage) -> None:
        try:
            self._sock.send_multipart([peer, *cw.encode(msg)], flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # the client is gone; its results are cached for when it asks again
            log.debug("qworker service: cannot send to %r: %s", peer[:32], exc)

    def status(self) -> ServiceStatus:
        st = self.producer.status()
        info: ServiceInfo = {"endpoint": self.endpoint, "instance": self.instance, "clients": len(self.clients),
                             "requests": self.requests, "dropped_frames": self.dropped_frames,
                             "http": self.http_url}
        return {"producer": st["producer"], "pools": st["pools"], "judges": st["judges"], "service": info}
