"""``Client``: the ``Producer`` API for any process, served by a reward service (``qworker serve``).

Every rank of a distributed trainer (verl's reward actors, TRL's accelerate
ranks, OpenRLHF's engines) makes a ``Client`` to one service; they then share
its pools, its result cache and one limit per judge endpoint.  A client is light
to import (no pool, no reward library), safe to use from many threads, and its
futures are the producer's (``concurrent.futures``-compatible and awaitable).

Contract:

* A *target* is a request's reward, params and ``timeout_s`` together.  The
  first ``submit_batch`` of a target returns once the service has *taken* the
  request (one round trip).  A service that does not answer within
  ``connect_timeout_s``, that has no workers, or that refuses this client
  (another wire protocol: one line naming both versions), raises
  ``ServiceUnavailable``; a bad reward name or params raise as they would at a
  ``Producer``.
* Once the service (this instance of it) has taken a request of a target, a
  later ``submit_batch`` of it is *pipelined*: it returns its futures as soon
  as the request is handed to the I/O thread, without waiting for the
  service's answer.  At most ``PIPELINE_WINDOW`` pipelined requests of a
  client are unanswered at once: beyond that, ``submit_batch`` waits for the
  oldest to be answered (up to ``connect_timeout_s``, then it raises
  ``ServiceUnavailable`` as a first request does; the older requests are kept
  and resent).  A pipelined request the service refuses (it lost its workers,
  it restarted with another config) resolves its futures as ``service_lost``
  naming the refusal, and the target needs a round trip again: the next
  ``submit_batch`` of it waits for the service's answer, and raises.  The
  targets taken are remembered per client, the ``KNOWN_TARGETS`` most recently
  used, and forgotten when the service restarts, says it is stopping, or is
  silent for ``service_timeout_s``.
* A link that breaks and comes back loses nothing, whatever the break's length
  up to ``service_timeout_s``: the client acknowledges every result message,
  and the service resends what is not acknowledged; a submission is resent
  until the service takes it; each ping names the requests still waited on,
  and those the service no longer holds are resubmitted.  A result that
  arrives twice resolves its future once.
* A service that restarts is noticed (its replies name a new instance) and the
  tasks it had not answered are resubmitted to the new one.  A service that
  stops says so, and what waits on it fails at once as ``service_lost``.  A
  service silent for ``service_timeout_s`` while tasks are pending fails them
  with ``service_lost``: no future hangs.
* A ``submit_batch`` of any size is taken, as at a ``Producer``: a request
  whose ``Submit`` would be over the service's frame limit (its
  ``max_message_bytes``, which the service states in every ``Pong``; the
  client pings from its start until the service answers, and a first
  submission waits for that answer within its ``connect_timeout_s``) is sent
  as several, each under it less ``CURVE_FRAME_BYTES``, their futures one list
  in order.  A part sent after the first is handled as a pipelined request
  (a refusal fails its futures as ``service_lost``); where one cannot be sent
  (a full window that times out, a service that restarted and refuses it),
  ``submit_batch`` returns every future, and that part's and the following
  parts' fail as ``service_lost`` naming why.  A payload over the limit by itself resolves as
  ``bad_payload`` naming its size and the limit; the rest are scored.  A
  request already out that is over a limit learned after it was split (a
  service restarted with a lower one) is never sent: it fails once, as a
  refused one does, naming its size and the limit.
* Each payload is encoded once, here, exactly as a ``Producer`` encodes it
  (``cache.hashing.encode_payload``): the service hashes and forwards those
  bytes without decoding them, so a task's key is the one a producer computes.
  A payload that cannot be encoded resolves as ``bad_payload``, the rest of its
  request is scored.
* Every future is owned by the client's ``FutureTable``, from registration to
  resolution: the first result wins, and ``close`` resolves what is left as
  ``cancelled`` and refuses later submissions.  ``close`` never waits on a
  registration in progress on another thread, however large.
* One I/O thread owns the socket (its loop is a ``Reactor``); the caller's
  threads hand it requests through a queue and ``Reactor.wake``, and sleep on
  events and futures.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence, cast

import msgspec
import zmq

from .._errors import ErrorKind
from .._exceptions import ConfigError, ProducerClosed, QworkerError, RewardError, ServiceUnavailable
from .._recent import RecentKeys
from ..cache.hashing import encode_payload, encode_payload_array, new_packer
from ..engine.arguments import check_payloads, check_timeout_s
from ..engine.futures import Batch, FutureTable
from ..engine.gc_pause import paused_gc
from ..engine.result import Result, ResultFuture, gather
from ..transport import client_wire as cw
from ..transport import wire
from ..transport.endpoint import check_endpoint
from ..transport.reactor import Reactor
from ..transport.security import CurveClient, handshake_problem
from ..transport.sockets import CURVE_FRAME_BYTES, DEFAULT_MAX_MESSAGE_BYTES, Redialer, make_socket
from ..transport.wire import StatusReply, StatusRequest, WireError

log = logging.getLogger("qworker")

__all__ = ["Client", "DEFAULT_SERVICE_ENDPOINT"]

DEFAULT_SERVICE_ENDPOINT = "tcp://127.0.0.1:5557"
PING_EVERY_S = 1.0
# a client its service never answered, with nothing out, pings ever more seldom (doubling from PING_EVERY_S to this):
# while no service listens its pings queue in the socket, and the service answers each once it comes
UNANSWERED_PING_MAX_S = 30.0
RESUBMIT_AFTER_S = 1.0  # a submission not taken is resent after this, doubling up to RESUBMIT_MAX_S
RESUBMIT_MAX_S = 8.0
RECONNECT_MAX_MS = 1000  # after a broken link, the socket redials at least this often
LINK_SILENT_S = 5.0  # pinging and hearing nothing this long: the connection is dead or damaged, dial again
_ERRORS: dict[str, type[QworkerError]] = {"ConfigError": ConfigError, "RewardError": RewardError}
# a message from the service, at most: whatever size its results come in (a Resolved is at most 512 results, split below
# 16 MiB where it can; one result is bounded by the service's own frame limit), as the socket's MAXMSGSIZE: a smaller bound
# here would drop the link with such a message, or the message, and the service would resend it until it gave up
_SOCKET_MAX_MESSAGE = -1
RECEIVE_PER_TURN = 16  # messages read per turn of the I/O thread (a Resolved carries up to 512 results)
PIPELINE_WINDOW = 8  # pipelined requests of a client handed to the I/O thread and not yet answered by the service, at most
REFUSALS_LOGGED = 10  # distinct refusals of pipelined requests logged between two requests taken, at most
KNOWN_TARGETS = 64  # targets (reward, params, timeout_s) the service has taken a request of, remembered per client
_TARGET_ENCODER = msgspec.msgpack.Encoder(order="deterministic", enc_hook=wire._as_builtin)  # a params dict's bytes,
# whatever its keys' order; numbers and strings of a subclass (numpy's float64) as the wire encodes them


def _encode(payloads: list[Any]) -> tuple[list[msgspec.Raw], list[int], list[tuple[int, str]]]:
    """Each payload's canonical encoding (``encode_payload``, as a producer hashes it), the index of each in
    ``payloads``, and ``(index, error)`` for each that cannot be encoded."""
    together = encode_payload_array(payloads)
    if together is not None:
        return together, list(range(len(payloads))), []
    packer = new_packer()
    encoded: list[msgspec.Raw] = []
    indexes: list[int] = []
    refused: list[tuple[int, str]] = []
    for i, payload in enumerate(payloads):
        try:
            encoded.append(msgspec.Raw(encode_payload(payload, packer)))
        except Exception as exc:
            refused.append((i, ErrorKind.BAD_PAYLOAD.error(f"cannot encode payload ({type(exc).__name__}: {exc})")))
            continue
        indexes.append(i)
    return encoded, indexes, refused


@dataclass(eq=False)
class _Request:
    number: int
    reward: str
    params: Optional[dict]
    payloads: list[msgspec.Raw]  # encoded (``client_wire``)
    timeout_s: Optional[float]
    batch: Batch  # the futures of the submission it is part of (the table owns them)
    indexes: list[int]  # the batch index of each payload, in order
    submitted: float
    target: Optional[bytes] = None  # its target's key (``_target_key``); None: one that cannot be keyed (never pipelined)
    instance: str = ""  # the service instance that took it
    answered: Optional[cw.Accepted] = None
    taken: threading.Event = field(default_factory=threading.Event)
    resend_at: float = 0.0  # when to send the submission again if it is not taken by then
    resend_every: float = RESUBMIT_AFTER_S
    left: int = field(init=False)  # tasks of it not yet resolved by its results

    def __post_init__(self) -> None:
        self.left = len(self.indexes)

    def pending(self) -> list[int]:
        """Positions (in this request) of the tasks whose futures have not resolved."""
        futures, at = self.batch.futures, self.indexes
        return [i for i in range(len(at)) if not futures[at[i]].done()]


def _split(encoded: list[msgspec.Raw], indexes: list[int], room: int) -> tuple[list[tuple[list[msgspec.Raw], list[int]]], list[tuple[int, int]]]:
    """``encoded`` payloads (the batch index of each in ``indexes``) as consecutive parts of at most ``room`` bytes of
    payloads each, in order, as ``(payloads, indexes)``; and ``(index, size)`` for each payload over ``room`` by itself
    (in no part)."""
    parts: list[tuple[list[msgspec.Raw], list[int]]] = []
    over: list[tuple[int, int]] = []
    part: list[msgspec.Raw] = []
    at: list[int] = []
    size = 0
    for payload, index in zip(encoded, indexes, strict=True):
        n = len(payload)
        if n > room:
            over.append((index, n))
            continue
        if part and size + n > room:
            parts.append((part, at))
            part, at, size = [], [], 0
        part.append(payload)
        at.append(index)
        size += n
    if part:
        parts.append((part, at))
    return parts, over


def _submit_overhead(reward: str, params: Optional[dict], timeout_s: Optional[float]) -> int:
    """Bytes of a ``Submit`` body beyond its payloads' own, at most (the largest request number, an array header for
    any number of payloads)."""
    empty = cw.Submit(*wire.STAMP, 2**64 - 1, reward, params, [], timeout_s)
    return len(cw.encode(empty)[1]) + 4  # an array header is 1 byte empty, 5 at most


def _envelope(reward: str, params: Optional[dict], timeout_s: Optional[float], target: Optional[bytes]) -> int:
    """``_submit_overhead`` and CURVE's framing: from the length of ``target`` (``_target_key``'s encoding of the same
    three, which a Submit carries at the same length) where there is one, without encoding the params again."""
    fixed = _SUBMIT_FIXED if target is not None else _submit_overhead(reward, params, timeout_s)
    return (len(target) if target is not None else 0) + fixed + CURVE_FRAME_BYTES


def _target_key(reward: str, params: Optional[dict], timeout_s: Optional[float]) -> Optional[bytes]:
    """The key of a request's target: its reward, params and timeout, encoded with the params' keys sorted (one target,
    one key, whatever the order its params were built in); None if they cannot be encoded.  Not the cache's identity
    (``cache.hashing.params_fingerprint``, hashed into each task's key where the service's producer submits it): this
    one holds the timeout, lives in this client only, and is as long as a ``Submit``'s encoding of the three."""
    try:
        return _TARGET_ENCODER.encode((reward, params, timeout_s))
    except (TypeError, ValueError, OverflowError):
        return None


_SUBMIT_FIXED = _submit_overhead("", None, None) - len(_TARGET_ENCODER.encode(("", None, None)))  # a Submit's bytes besides its target's


class Client:
    """Submit reward tasks to a reward service and collect their ``Result``s, as a ``Producer`` does."""

    def __init__(
        self, connect: Optional[str] = None, *, connect_timeout_s: float = 10.0, service_timeout_s: float = 60.0,
        fallback_score: float = 0.0, curve_secret_key: Optional[str] = None, curve_server_key: Optional[str] = None,
    ) -> None:
        """``connect`` defaults to ``$QWORKER_CONNECT``, else ``tcp://127.0.0.1:5557``.  With CURVE, give this
        client's secret key file and the service's public key file (``qworker keys``)."""
        from_env = os.environ.get("QWORKER_CONNECT")
        self.endpoint = check_endpoint(connect or from_env or DEFAULT_SERVICE_ENDPOINT,
                                       what="Client(connect=...)" if connect else "QWORKER_CONNECT")
        self.connect_timeout_s = connect_timeout_s
        self.service_timeout_s = service_timeout_s
        self.fallback_score = fallback_score
        self._closed = False
        self._numbers = itertools.count(1)
        self._table = FutureTable(fallback_score=fallback_score)
        self._requests: dict[int, _Request] = {}  # the I/O thread's
        self._outbox: deque[Any] = deque()  # messages from the callers' threads
        self._status_waiters: deque[tuple[threading.Event, list]] = deque()
        self._known: RecentKeys[bytes] = RecentKeys(KNOWN_TARGETS)  # targets the service has taken (``submit_batch``)
        self._refusals_logged: set[str] = set()  # refusals logged since the service last took a request (I/O thread)
        self._window_lock = threading.Lock()
        self._unanswered: deque[_Request] = deque()  # pipelined requests, oldest first, maybe answered (callers' threads)
        self._instance = ""
        self._heard = time.monotonic()
        # the service's frame limit (``Pong.max_message_bytes``), assumed the default until it says; ``_answered`` is
        # set once anything answers the pings the I/O thread sends from its start (a Pong, a refusal, ...)
        self._frame_limit = DEFAULT_MAX_MESSAGE_BYTES
        self._answered = threading.Event()
        self.resubmitted = 0  # requests sent again: not taken in time, restarted or unknown to the service
        self._ctx = zmq.Context(io_threads=1)
        if (curve_secret_key is None) != (curve_server_key is None):
            raise ConfigError("CURVE needs both curve_secret_key and curve_server_key (or neither)")
        curve = CurveClient(curve_secret_key, curve_server_key) if curve_secret_key and curve_server_key else None
        self._sock = make_socket(self._ctx, zmq.DEALER, connect=self.endpoint, identity=f"client-{secrets.token_hex(6)}".encode(),
                                 curve=curve, reconnect_max_ms=RECONNECT_MAX_MS, max_message_bytes=_SOCKET_MAX_MESSAGE)
        self._redialer = Redialer(self._sock, self.endpoint)
        self.redials = 0  # connections dropped and dialled again after LINK_SILENT_S of silence
        self._next_ping = 0.0
        self._ping_every = PING_EVERY_S  # seconds to the next ping (I/O thread; grows while the service never answered)
        self._reactor = Reactor(name="client", max_wait_s=PING_EVERY_S / 2)
        self._reactor.each_turn(lambda now: self._send_outbox(), name="sending requests")
        self._reactor.on_readable(self._sock, self._receive, name="receiving from the service")
        self._reactor.each_turn(self._keep_in_touch, name="pinging the service")
        self._wake = self._reactor.wake
        self._thread = threading.Thread(target=self._run, name="qworker-client", daemon=True)
        self._thread.start()
        self._wake()  # its first turn at once: the ping that asks the service's frame limit goes now

    # the Producer's API ---------------------------------------------------------
    def submit(self, reward: str, payload: Any, *, params: Optional[Mapping[str, Any]] = None, timeout_s: Optional[float] = None) -> ResultFuture:
        return self.submit_batch(reward, [payload], params=params, timeout_s=timeout_s)[0]

    def submit_batch(
        self, reward: str, payloads: Iterable[Any], *, params: Optional[Mapping[str, Any]] = None, timeout_s: Optional[float] = None
    ) -> list[ResultFuture]:
        """One future per payload, in order: once the service has taken the request, or at once for a target it has
        taken a request of before (pipelined; see the module's docstring)."""
        if self._closed:
            raise ProducerClosed("submit_batch() on a closed Client")
        check_payloads(payloads)
        timeout_s = check_timeout_s(timeout_s)
        payloads = list(payloads)
        if not payloads:
            return []
        params = dict(params) if params else None
        target = _target_key(reward, params, timeout_s)
        try:
            envelope = _envelope(reward, params, timeout_s, target)  # a Submit's bytes besides its payloads
        except (TypeError, ValueError, OverflowError) as e:
            raise ConfigError(f"params cannot be sent to the reward service: {e}") from None
        # a future per payload, which lives until its result comes: collections set off while they are made would
        # move every future in flight to older generations (and full collections rescan them all); none of it is
        # cyclic garbage, so the collector waits until they are made (as ``Producer.submit_batch`` does)
        with paused_gc():
            encoded, indexes, refused = _encode(payloads)
            batch = self._table.register(len(payloads))  # raises ProducerClosed once closed
        deadline = time.monotonic() + self.connect_timeout_s
        if not self._answered.is_set():  # the service's frame limit (known but in a client's first instant)
            self._answered.wait(self.connect_timeout_s)
        limit = self._frame_limit
        room = limit - envelope  # bytes of payloads a Submit may carry
        if room <= 0:
            why = (f"this request's reward, params and framing encode to {envelope} bytes without a payload, over the "
                   f"{limit}-byte message limit of the reward service at {self.endpoint} (its max_message_bytes)")
            self._table.fail(batch, range(len(payloads)), ErrorKind.BAD_PAYLOAD.error(why))  # never handed out
            raise ConfigError(why)
        parts, over = ([(encoded, indexes)], []) if sum(map(len, encoded)) <= room else _split(encoded, indexes, room)
        refused += [(i, ErrorKind.BAD_PAYLOAD.error(
            f"the payload is {size} bytes encoded; with its request's {envelope} (reward, params, framing) that is over "
            f"the {limit}-byte message limit of the reward service at {self.endpoint} (its max_message_bytes)"))
            for i, size in over]
        if refused:  # as a Producer does: those tasks fail, the others are scored
            self._table.resolve(batch, [i for i, _ in refused], [Result(score=self.fallback_score, error=error) for _, error in refused])
            if not parts:
                return self._table.hand_out(batch)
        now = time.monotonic()
        requests = [_Request(next(self._numbers), reward, params, part, timeout_s, batch, at, now, target) for part, at in parts]
        futures: list[ResultFuture] = []
        for sent, req in enumerate(requests):  # one list of futures (``hand_out`` gives the batch's each time)
            try:
                # each part waits for its own answer (the first also for the frame limit, within the same bound)
                futures = self._send_request(req, deadline if not sent else time.monotonic() + self.connect_timeout_s)
            except BaseException as e:
                if not sent or not isinstance(e, Exception) or isinstance(e, ProducerClosed):  # the call raises
                    for unsent in requests[sent + 1:]:  # never sent: their futures (never handed out) resolve too
                        self._fail(unsent, ErrorKind.SERVICE_LOST.error("an earlier part of its submission raised"))
                    raise
                # earlier parts were taken and are being scored: the caller gets every future, and those of this
                # part and the ones after it fail as results (as a pipelined request's refusal does), never silently
                for unsent in requests[sent:]:
                    self._fail(unsent, ErrorKind.SERVICE_LOST.error(
                        f"part {sent + 1} of {len(requests)} of its submission (split under the service's frame limit) was "
                        f"not taken: {e}"))
                return self._table.hand_out(batch)  # raises ProducerClosed if close() came first
        return futures

    def _send_request(self, req: _Request, deadline: float) -> list[ResultFuture]:
        """Send ``req``: pipelined (``_pipeline``) if the service has taken a request of its target, else waiting for
        the service's answer until ``deadline`` (``time.monotonic``) and raising what it refuses; the batch's futures."""
        if req.target is not None and req.target in self._known:
            return self._pipeline(req, deadline)
        self._outbox.append(req)  # to the I/O thread
        self._wake()
        if self._closed:  # close() may have passed over the outbox before this request reached it
            req.taken.set()
        if not req.taken.wait(max(0.0, deadline - time.monotonic())):
            self._outbox.append(("forget", req.number))
            self._wake()
            raise self._unanswered_error(req)
        answer = req.answered
        if answer is None:
            raise ProducerClosed("the Client closed while submitting")
        if answer.error is not None:
            raise _ERRORS.get(answer.error_type, ServiceUnavailable)(answer.error)
        return self._table.hand_out(req.batch)  # raises ProducerClosed if close() came first

    def _pipeline(self, req: _Request, deadline: float) -> list[ResultFuture]:
        """Hand ``req`` (of a target the service has taken) to the I/O thread and its futures to the caller, once fewer
        than ``PIPELINE_WINDOW`` pipelined requests are unanswered; ``ServiceUnavailable`` if the oldest is not
        answered by ``deadline`` (``time.monotonic``; ``req`` is then not sent, and its futures are never handed out)."""
        while True:
            with self._window_lock:
                unanswered = self._unanswered
                while unanswered and unanswered[0].taken.is_set():
                    unanswered.popleft()
                if len(unanswered) < PIPELINE_WINDOW:
                    futures = self._table.hand_out(req.batch)  # raises ProducerClosed if close() came first
                    unanswered.append(req)
                    self._outbox.append(req)  # to the I/O thread, in the order of the window
                    break
                oldest = unanswered[0]
            if not oldest.taken.wait(max(0.0, deadline - time.monotonic())):
                raise self._unanswered_error(req, waiting_on=oldest)
        self._wake()
        if self._closed:  # close() may have passed over the outbox before this request reached it: nobody waits on
            req.taken.set()  # it but a later caller's window, which then finds the client closed
        return futures

    def _unanswered_error(self, req: _Request, waiting_on: Optional[_Request] = None) -> ServiceUnavailable:
        """The service did not answer in time (``req``, or ``waiting_on``: the oldest request of a full window):
        ``req``'s futures (never handed out) resolve, and this is raised."""
        why = handshake_problem(self.endpoint)
        if not why and waiting_on is not None:
            why = (f"{PIPELINE_WINDOW} requests sent to the reward service at {self.endpoint} were still unanswered after "
                   f"{self.connect_timeout_s:.0f} s (the oldest: request {waiting_on.number}); they are kept and resent, "
                   "this one was not sent")
        elif not why:
            why = (f"the reward service at {self.endpoint} did not answer within {self.connect_timeout_s:.0f} s "
                   "(is 'qworker serve' running there?)")
        self._fail(req, ErrorKind.SERVICE_LOST.error(why))  # never handed out, but the table resolves all it owns
        return ServiceUnavailable(why)

    def gather(self, futures: Sequence[Any], timeout: Optional[float] = None) -> list[Result]:
        """The ``Result`` of each future, in order; see ``Producer.gather``."""
        return gather(futures, timeout)

    def map(self, reward: str, payloads: Iterable[Any], *, params: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None) -> list[Result]:
        return self.gather(self.submit_batch(reward, payloads, params=params), timeout=timeout)

    def status(self, timeout: float = 10.0) -> dict:
        """The service's status: its producer, pools, workers and judges."""
        done, box = threading.Event(), cast(list[dict], [])
        self._outbox.append(("status", done, box))
        self._wake()
        if not done.wait(timeout):
            done.set()  # given up: a late reply must not go to it, nor every later reply to the waiter before its own
            raise ServiceUnavailable(f"the reward service at {self.endpoint} did not answer within {timeout:.0f} s")
        return box[0]

    def close(self) -> None:
        """Stop the I/O thread; tasks still pending resolve as cancelled.  A ``submit_batch`` on another thread
        is not waited for: it stops registering within ``CHECK_EVERY`` (1,024) tasks and raises ``ProducerClosed``."""
        if self._closed:
            return
        self._closed = True
        self._answered.set()  # a caller waiting for the frame limit goes on, and finds the client closed
        self._reactor.stop()
        self._thread.join(10.0)
        self._table.close("the client closed")  # later submissions raise ProducerClosed
        for item in [*self._requests.values(), *self._outbox]:
            if isinstance(item, _Request):
                item.taken.set()  # a caller still waiting raises ProducerClosed
        self._reactor.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # the I/O thread ---------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._reactor.run()
        finally:
            self._sock.close(linger=0)
            self._ctx.term()

    def _keep_in_touch(self, now: float) -> None:
        """Until the service first answers (its ``Pong`` states its frame limit), and while requests are out: ping
        (naming those waited on; each ping further apart while none is out and the service never answered), then
        resend those not taken (behind the ping), watch the link."""
        if (self._requests or not self._answered.is_set()) and now >= self._next_ping:
            unheard = not self._requests and not self._answered.is_set()
            self._next_ping = now + self._ping_every
            self._ping_every = min(2 * self._ping_every, UNANSWERED_PING_MAX_S) if unheard else PING_EVERY_S
            self._send(cw.Ping([n for n, r in self._requests.items() if r.answered is not None]))
            if self._requests:
                self._resend_untaken(now)
                self._check_link(now)
                self._check_silence(now)

    def _send(self, msg: cw.ClientMessage) -> None:
        self._send_frames(cw.encode(msg))

    def _send_frames(self, frames: list[bytes]) -> None:
        try:
            self._sock.send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # not connected yet: a ping or resubmission will follow

    def _submit(self, req: _Request) -> None:
        """Send ``req`` (held until taken); one over the service's frame limit, which the transport would drop unread
        (and the link with it) however often it is sent, is refused here instead, once (``_on_accepted``)."""
        self._requests[req.number] = req
        req.resend_at = time.monotonic() + req.resend_every
        self._ping_every, self._next_ping = PING_EVERY_S, min(self._next_ping, req.resend_at)  # a request out: ping each second
        frames = cw.encode(cw.Submit(*wire.STAMP, req.number, req.reward, req.params, req.payloads, req.timeout_s))
        if len(frames[1]) + CURVE_FRAME_BYTES > self._frame_limit:
            self._on_accepted(cw.Accepted(req.number, self._instance, (
                f"the request is {len(frames[1])} bytes encoded, over the {self._frame_limit}-byte message limit (with "
                f"{CURVE_FRAME_BYTES} bytes of framing) of the reward service at {self.endpoint} (its max_message_bytes); "
                "this client did not send it"), "ServiceUnavailable"))
            return
        self._send_frames(frames)

    def _resend_untaken(self, now: float) -> None:
        """Submissions the service has not taken (lost on a broken link, or it is slow): send them again."""
        for req in list(self._requests.values()):
            if req.answered is None and now >= req.resend_at:
                req.resend_every = min(2 * req.resend_every, RESUBMIT_MAX_S)
                self.resubmitted += 1
                self._submit(req)

    def _send_outbox(self) -> None:
        while self._outbox:
            item = self._outbox.popleft()
            if isinstance(item, _Request):
                if not self._requests:
                    self._heard = time.monotonic()  # silence is measured from when something is pending
                self._submit(item)
            elif item[0] == "forget":
                self._requests.pop(item[1], None)
            else:
                self._status_waiters.append((item[1], item[2]))
                self._send(StatusRequest())

    def _receive(self) -> None:
        # Decoding and resolving a Resolved makes a few objects per result that the cyclic GC counts, all gone by the
        # end: the collector waits, so that they set off no collection that would move the futures still in flight
        # to older generations (see ``submit_batch``).  The callbacks users add to the futures resolved run after the
        # pause, never inside it (user code could allocate without bound there).
        with self._table.callbacks_after(), paused_gc():
            self._receive_some()

    def _receive_some(self) -> None:
        recv = self._sock.recv_multipart
        acks: list[int] = []
        for _ in range(RECEIVE_PER_TURN):  # bounded: what is left makes the next turn come at once
            if self._closed:
                break  # close() waits for this thread: it stops between messages, not after a flood of them
            try:
                frames = recv(zmq.NOBLOCK, copy=True)  # until none is left: no ZMQ_EVENTS system call per message
            except zmq.Again:
                break
            try:
                if len(frames) != 2:
                    raise WireError(f"expected 2 frames, got {len(frames)}")
                msg = cw.CLIENT.decode(frames[0], frames[1], max_bytes=len(frames[1]))  # any size (``_SOCKET_MAX_MESSAGE``)
            except WireError as exc:
                log.warning("qworker client: dropped a bad frame from the service: %s", exc)
                continue
            self._heard = time.monotonic()
            if isinstance(msg, cw.Resolved):
                self._see(msg.instance)
                self._resolve(msg.requests)
                acks.append(msg.seq)
            elif isinstance(msg, cw.Accepted):
                self._see(msg.instance)
                self._on_accepted(msg)
            elif isinstance(msg, cw.Pong):
                self._frame_limit = msg.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
                self._answered.set()  # a caller waiting for the frame limit goes on
                self._see(msg.instance)
                for number in msg.unknown:  # taken, yet the service no longer holds it: ask again
                    req = self._requests.get(number)
                    if req is not None and req.answered is not None:
                        self._resubmit(req, "the service no longer holds it")
            elif isinstance(msg, cw.Closing):
                self._answered.set()  # a caller waiting for the frame limit goes on, to meet this
                self._on_closing(msg.reason)
            elif isinstance(msg, wire.Refused):  # a service of another wire protocol, or not a service (a producer's pools' endpoint)
                self._answered.set()  # a caller waiting for the frame limit goes on, to meet this
                who = wire.refuser(msg, self.endpoint, f"the reward service at {self.endpoint}")
                self._on_closing(wire.refused_line(who, "this client", msg))
            elif isinstance(msg, StatusReply):
                while self._status_waiters and self._status_waiters[0][0].is_set():
                    self._status_waiters.popleft()  # its caller timed out
                if self._status_waiters:
                    done, box = self._status_waiters.popleft()
                    box.append(msg.status)
                    done.set()
        if acks:
            self._send(cw.Ack(acks))

    def _on_accepted(self, msg: cw.Accepted) -> None:
        req = self._requests.get(msg.request)
        if req is None or req.answered is not None:
            return  # forgotten, or the answer to a resend
        if msg.error is None:
            self._on_taken(req, msg.instance, msg)
            return
        req.instance, req.answered = msg.instance, msg
        del self._requests[msg.request]
        # A pipelined request or a resubmission has no caller waiting to raise this: its futures are out, so they
        # fail (a first submission's futures were never handed out; its caller raises).
        why = f"the reward service refused the request: {msg.error}"
        if req.target is not None:
            self._known.discard(req.target)
        logged = self._refusals_logged
        if req.batch.handed_out and msg.error not in logged and len(logged) < REFUSALS_LOGGED:  # once each
            logged.add(msg.error)
            log.error("qworker client: %s; its tasks fail as service_lost (as may those of the requests of its reward "
                      "and params already sent); the next submit_batch of them waits for the service's answer", why)
        self._fail(req, ErrorKind.SERVICE_LOST.error(why))
        req.taken.set()

    def _on_taken(self, req: _Request, instance: str, answer: Optional[cw.Accepted] = None) -> None:
        """``req`` was taken by ``instance`` (its ``Accepted``, or all its results, came): its caller, or the window,
        stops waiting on it, and its target's later requests are pipelined."""
        req.instance, req.answered = instance, answer or cw.Accepted(req.number, instance, None, "")
        if self._refusals_logged:  # a refusal after this one is news again
            self._refusals_logged.clear()
        if req.target is not None:
            self._known.add(req.target)
        req.taken.set()

    def _on_closing(self, reason: str) -> None:
        """The service is stopping (``Closing``), refused this client (``Refused``), or went silent, for ``reason``:
        what it took fails at once; a submission it had not answered raises ``ServiceUnavailable(reason)``."""
        why = ErrorKind.SERVICE_LOST.error(reason)
        self._known.clear()  # a later request waits for an answer (and raises without one), as a first one does
        if self._requests:
            log.error("qworker client: %s; failing %d requests", reason, len(self._requests))
        for req in self._requests.values():
            if req.answered is None:
                req.answered = cw.Accepted(req.number, self._instance, reason, "ServiceUnavailable")
            self._fail(req, why)
            req.taken.set()
        self._requests.clear()

    def _see(self, instance: str) -> None:
        """A reply from ``instance``: if the service restarted, resubmit what the old one held."""
        if instance == self._instance:
            return
        restarted = bool(self._instance)
        self._instance = instance
        if not restarted:
            return
        self._known.clear()  # the new instance may serve other rewards: each target's next request waits for its answer
        stale = [r for r in self._requests.values() if r.instance and r.instance != instance]
        if stale:
            log.warning("qworker client: the reward service at %s restarted; resubmitting %d requests", self.endpoint, len(stale))
        for req in stale:
            self._resubmit(req, "restarted")

    def _resubmit(self, req: _Request, why: str) -> None:
        """Send what ``req`` still waits for as a new request (the caller's futures stay the same)."""
        del self._requests[req.number]
        left = req.pending()
        if not left:
            return
        log.info("qworker client: resubmitting %d tasks of request %d (%s)", len(left), req.number, why)
        self.resubmitted += 1
        again = _Request(next(self._numbers), req.reward, req.params, [req.payloads[i] for i in left], req.timeout_s,
                         req.batch, [req.indexes[i] for i in left], req.submitted, req.target)
        again.taken.set()  # no caller waits on it
        self._submit(again)

    def _resolve(self, groups: list[cw.ResolvedRequest]) -> None:
        """Resolve the futures of each group's request, a request at a time (no step per result but setting its
        latency); a group of a request answered before (a resend) or resubmitted under a new number, that names a
        position the request does not have, or whose positions and results differ in number, is dropped (the message
        is still acknowledged: once the service no longer holds the request, a Ping finds it unknown and what is still
        pending is resubmitted)."""
        now = time.monotonic()
        requests, resolve = self._requests, self._table.resolve
        for group in groups:
            number, indexes, results = group.request, group.indexes, group.results
            req = requests.get(number)
            if req is None or len(indexes) != len(results) or (indexes and max(indexes) >= len(req.indexes)):
                continue
            latency = now - req.submitted  # as the caller sees it (each a fresh Result, decoded from the message)
            for result in results:
                result.latency_s = latency
            req.left -= resolve(req.batch, map(req.indexes.__getitem__, indexes), results)
            if req.left <= 0:
                del requests[number]
                if req.answered is None:  # its results came before its answer (lost, or not yet resent): it was taken
                    self._on_taken(req, self._instance)

    def _check_link(self, now: float) -> None:
        """Pings unanswered for ``LINK_SILENT_S``: a connection can stay open yet carry nothing (its stream
        damaged, a peer gone without a close); drop it and dial again.  What was queued on it is sent again by
        the protocol (submissions until taken, results until acknowledged)."""
        if now - self._heard >= LINK_SILENT_S and now - self._redialer.last >= LINK_SILENT_S:
            self._redialer.no_peer()
            self.redials += 1
            log.warning("qworker client: no answer from %s for %.0f s; dialled again", self.endpoint, now - self._heard)

    def _check_silence(self, now: float) -> None:
        silent = now - self._heard
        if silent < self.service_timeout_s:
            return
        # as a service that says it is stopping: what it took fails, a submission waiting on it raises
        self._on_closing(f"the reward service at {self.endpoint} did not answer for {silent:.0f} s")

    def _fail(self, req: _Request, error: str) -> None:
        """Resolve what ``req`` still waits for with ``error`` (a result that came first stays)."""
        self._table.fail(req.batch, req.indexes, error)
