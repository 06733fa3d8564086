"""A worker process: receives task batches, runs rewards, returns results.

One thread owns the socket and runs CPU rewards, so SIGALRM-based timeouts in
reward libraries work; ``kind="io"`` rewards run on a thread pool.  ``async def``
rewards are awaited (``run_awaitable``).  The worker
grants credit so that it holds about ``target_hold_s`` of work (by its measured
service time), never more than ``max_hold`` tasks: a slow worker holds few tasks
and cannot hoard a batch others could run.

Results are bounded in bytes: a RESULTS message carries at most half of the
frame limit of results (a bigger one travels alone), so the producer's
frame limit never drops an honest worker's batch.  The frame limit is the lower of
this worker's ``max_message_bytes`` and the producer's, which every ``Tasks`` message
states (libzmq drops a larger message unread, with the link).  A result that alone would not
fit a frame fails its task as ``bad_result``, naming its size and the limit.  The worker states its own
limit in every ``Ready``: the producer sends it no larger ``Tasks`` message.  A
result is encoded once: one with an extra or meta when it is finished, to learn
its size (the message then carries those bytes as they are), a bare score with
its message.

Contract: a task may run more than once (it is redelivered if its worker is
lost); the producer keeps the first result for each task key.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from typing import Any, Optional, Union

import msgspec
import zmq

from .._errors import ErrorKind
from .._exceptions import CallFailed, RewardError
from ..config.options import WorkerOptions
from ..registry.fingerprint import reward_version
from ..registry.registry import EndpointCall, load_modules, registered, resolve
from ..transport import wire
from ..transport.sockets import Redialer, make_socket, readable
from .slot import TaskSlot

log = logging.getLogger("qworker.worker")

MAX_ERROR_CHARS = 2000
FLUSH_RESULTS = 256  # results per RESULTS message, at most
RESULT_OVERHEAD = 64  # bytes of msgpack around a result's key, score, error text and time (an upper bound)
MESSAGE_OVERHEAD = 64  # bytes of a RESULTS message besides its results (credit totals, array headers)
FLUSH_AFTER_S = 0.005  # a finished result waits at most this long for company
DRAIN_EVERY_S = 0.002  # while running tasks, the socket is read at least this often (REVOKE, new tasks)


def _error(kind: ErrorKind, detail: str) -> wire.Fault:
    """A failure whose ``Result.error`` text is at most ``MAX_ERROR_CHARS`` long."""
    return wire.Fault(kind, detail[: max(0, MAX_ERROR_CHARS - len(kind.value) - 2)])


def result_bytes(result: wire.TaskResult) -> int:
    """An upper bound on ``result``'s size in a RESULTS message; exact (packed) when it has an extra or meta."""
    error, ran = result.error, result.ran
    if result.extra is None and result.meta is None:
        return RESULT_OVERHEAD + (len(error.detail.encode("utf-8", "replace")) + len(error.kind.value) if error else 0) + (
            len(ran.encode()) if ran else 0)
    return len(wire.encode_body(result)) + RESULT_OVERHEAD


Packed = Union[wire.TaskResult, msgspec.Raw]  # a result as a RESULTS message carries it (``wire.encode_results``)


def _packed(result: wire.TaskResult) -> tuple[Packed, int]:
    """``result`` as a RESULTS message carries it, and ``result_bytes(result)``: encoded here when it has an extra
    or meta (its size is then that of the bytes the message carries); a bare one as it is.  Raises what the encoder
    raises for a value msgpack has no form for."""
    if result.extra is None and result.meta is None:
        return result, result_bytes(result)
    body = wire.encode_body(result)
    return msgspec.Raw(body), len(body) + RESULT_OVERHEAD


def fit_frame(result: wire.TaskResult, max_message_bytes: int) -> tuple[Packed, int]:
    """``result`` as a RESULTS message carries it (``_packed``) and its size, if it encodes and fits one RESULTS
    frame; else a small ``bad_result`` failure in its place, which keeps the endpoint call's outcome (``meta``) when
    that encodes and is small, and drops it otherwise: the failure always encodes and fits."""
    key, compute_s, outcome, ran = result.key, result.compute_s, result.meta, result.ran
    try:
        packed, size = _packed(result)
    except Exception as exc:  # the reward's extra, or a call outcome its policy set, holds a value msgpack has no form for
        detail = f"reward's extra or call outcome cannot be encoded: {exc}"
    else:
        if size + MESSAGE_OVERHEAD <= max_message_bytes:
            return packed, size
        detail = (f"the result is {size} bytes encoded, over the {max_message_bytes}-byte message limit "
                  "(max_message_bytes); return a smaller extra, or raise the limit on the producer and its pools")
    if outcome is not None:
        try:  # an endpoint call's outcome is a few numbers; one this big, or one that does not encode, is not kept
            if result_bytes(wire.TaskResult(key, None, None, None, compute_s, outcome, None)) * 4 > max_message_bytes:
                outcome = None
        except Exception:
            outcome = None
    return _packed(wire.TaskResult(key, None, None, _error(ErrorKind.BAD_RESULT, detail), compute_s, outcome, ran))


def to_score(out: Any) -> tuple[Optional[float], Optional[dict], Optional[wire.Fault]]:
    """Normalise a reward's return value to ``(score, extra, error)``.  Whether the extra encodes is learnt where the
    result is encoded (``fit_frame``)."""
    extra = None
    if isinstance(out, dict):
        if "score" not in out:
            return None, None, _error(ErrorKind.BAD_RESULT, f"reward returned a dict without 'score' (keys: {sorted(out)[:10]})")
        extra = {k: v for k, v in out.items() if k != "score"} or None
        out = out["score"]
    if isinstance(out, (str, bytes)) or out is None:
        return None, None, _error(ErrorKind.BAD_RESULT, f"reward returned {type(out).__name__}, not a number")
    try:
        score = float(out)
    except (TypeError, ValueError):
        return None, None, _error(ErrorKind.BAD_RESULT, f"reward returned {type(out).__name__}, not a number")
    if not math.isfinite(score):
        return None, None, _error(ErrorKind.BAD_RESULT, f"reward returned a non-finite score ({score})")
    return score, extra, None


Outcome = tuple[Optional[float], Optional[dict], Optional[wire.Fault], Optional[dict]]  # score, extra, error, endpoint outcome


# A payload as the producer encoded it (``cache.hashing.encode_payload``: plain msgpack, no extension types), decoded as
# ``msgpack.unpackb(b, raw=False, strict_map_key=False)`` would (str, bytes, lists, maps with any keys), in half the time.
_decode_payload = msgspec.msgpack.Decoder().decode


def call_reward(spec: Any, payload_bytes: bytes, params: dict, meta: Optional[dict] = None) -> Outcome:
    """Run a reward; a task its admission policy sent with ``meta`` gets it in an ``EndpointCall`` (``call=``), unchanged,
    and the outcome the reward records comes back (as the result's meta)."""
    call = EndpointCall(meta) if meta is not None else None
    try:
        payload = _decode_payload(payload_bytes)
    except Exception as exc:  # bytes a caller encoded itself (encoded=True), not the reward's fault: not msgpack, not UTF-8, too deep
        return None, None, _error(ErrorKind.BAD_PAYLOAD, f"the payload is not msgpack as encode_payload writes it: {exc}"), None
    try:
        kwargs = params if call is None else {**params, "call": call}
        out = spec.fn(payload, **kwargs) if kwargs else spec.fn(payload)
        if type(out) is float and math.isfinite(out):  # the usual answer: no await, nothing to normalise
            return out, None, None, None if call is None else call.outcome
        if inspect.isawaitable(out):  # an ``async def`` reward
            out = run_awaitable(out)
    except KeyboardInterrupt:
        raise
    except CallFailed as exc:  # the outcome travels to the producer's gate
        return None, None, _error(ErrorKind(exc.kind), str(exc)), exc.outcome
    except BaseException as exc:  # math_verify's TimeoutException derives from BaseException
        return None, None, _error(ErrorKind.REWARD_ERROR, f"{type(exc).__name__}: {exc}"), None if call is None else call.outcome
    return (*to_score(out), None if call is None else call.outcome)


_main_loop: Optional[asyncio.AbstractEventLoop] = None  # the main thread's, for kind="cpu" rewards
_io_loop: Optional[asyncio.AbstractEventLoop] = None  # one loop on a thread of its own, shared by the io threads
_io_loop_lock = threading.Lock()
_IO_RELEASE_S = 10.0  # how long past its deadline an io coroutine may hold its thread before it is cancelled
_io_deadline = threading.local()  # the monotonic deadline of the io task this thread runs (``_start_io``)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def run_awaitable(awaitable: Any) -> Any:
    """What an ``async def`` reward's coroutine returns (or raises), run to completion.

    On the main thread (``kind="cpu"``) it runs on the main thread's event loop, made once per
    worker process and reused by every task, so SIGALRM-based timeouts work inside it too.  On an
    io thread (``kind="io"``) it runs on one event loop shared by all io tasks of the process (on a
    thread of its own), so clients a reward keeps between tasks stay on one loop; the io thread
    waits for it, so at most ``io_threads`` of them run at once, as for plain io rewards.  The
    task's time limit is kept from outside as for any reward (the pool kills a CPU task's worker;
    an io task past its deadline fails as ``timeout`` and its coroutine is cancelled, freeing its io thread).
    """
    global _main_loop, _io_loop
    if threading.current_thread() is threading.main_thread():
        if _main_loop is None or _main_loop.is_closed():
            _main_loop = asyncio.new_event_loop()
        return _main_loop.run_until_complete(_awaited(awaitable))
    with _io_loop_lock:
        if _io_loop is None:
            _io_loop = asyncio.new_event_loop()
            threading.Thread(target=_io_loop.run_forever, name="qworker-io-loop", daemon=True).start()
        loop = _io_loop
    fut = asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop)
    deadline = getattr(_io_deadline, "at", None)
    try:
        # the worker's own check fails the task as timeout at the deadline; this wait only frees the thread after it
        return fut.result(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()) + _IO_RELEASE_S)
    except concurrent.futures.TimeoutError:
        fut.cancel()  # the task already failed as timeout: free this io thread rather than wait on for ever
        raise TimeoutError("io reward's coroutine passed its deadline and was cancelled") from None


class Worker:
    def __init__(self, options: WorkerOptions) -> None:
        if not options.connect:
            raise ValueError("a worker needs the producer's endpoint (connect)")
        self.options = options
        self.slot = TaskSlot(options.slot_path) if options.slot_path else None
        self.host = socket.gethostname()
        self.import_errors: list[str] = []  # set by run(), reported in every READY
        self.stopping = False
        self.granted = 0
        self.received = 0
        self.finished = 0  # completed or given back
        self.service_s = 0.0  # EWMA of a CPU task's time in the reward; 0 = unknown
        self.inbox: deque[wire.Task] = deque()
        self.results: list[Packed] = []  # finished, to send (``fit_frame``)
        self.results_bytes = 0  # result_bytes() of self.results
        # the largest RESULTS message, bytes: the lower of our limit and the producer's (CURVE's framing, 33 bytes, fits in
        # the overheads that results' sizes count: ``RESULT_OVERHEAD``, ``MESSAGE_OVERHEAD``)
        self.frame_bytes = options.max_message_bytes
        self.producer_limit = 0  # the producer's frame limit as its last Tasks stated it; 0: not said
        self.batch_bytes = self.frame_bytes // 2  # a RESULTS message's results, at most (unless one alone)
        self.first_unflushed = 0.0
        self.last_sent = 0.0  # when results or a heartbeat were last sent (monotonic s)
        self._slot_busy = False  # the slot still shows the last task run (see ``_run_tasks``)
        self._io_executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._io_running: dict[bytes, tuple[float, float]] = {}  # key -> (started, deadline)
        self._io_done: deque[wire.TaskResult] = deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    # credit -----------------------------------------------------------------
    def _hold_target(self) -> int:
        if self.service_s <= 0.0:
            want = 8
        else:
            want = max(2, min(self.options.max_hold, math.ceil(self.options.target_hold_s / self.service_s)))
        if self._io_running:
            want = max(want, 2 * self.options.io_threads)
        return want

    def _top_up(self) -> None:
        held = self.received - self.finished
        outstanding = self.granted - self.received
        room = self._hold_target() - held - outstanding
        if room > 0 and not self.stopping:
            self.granted += room

    # messages ---------------------------------------------------------------
    def _send(self, msg: wire.Message) -> None:
        self._send_frames(wire.encode(msg), type(msg).__name__)

    def _send_frames(self, frames: list[bytes], what: str) -> None:
        """Send without blocking: with no producer connected (down, or refusing our key) the message is
        dropped; the producer resynchronises from totals (credit) and leases (tasks) when it hears from us."""
        try:
            self.sock.send_multipart(frames, copy=True, flags=zmq.NOBLOCK)
        except zmq.Again:
            log.debug("%s: no producer connected; dropped a %s", self.options.worker_id, what)
            self.redial.no_peer()  # a producer that refused our key may admit it later

    def _ready(self) -> None:
        self._top_up()
        rewards = registered()
        self._send(wire.Ready(
            *wire.STAMP, self.options.worker_id, self.options.pool_id, os.getpid(), self.host,
            self.granted, self.received, self.finished, sorted(rewards), self.import_errors,
            {name: reward_version(spec.fn, spec.version) for name, spec in rewards.items()},  # each taken once per process
            self.options.max_message_bytes,
        ))

    def _idle(self) -> None:
        """Mark the busy slot idle if it still shows the last task run."""
        if self._slot_busy:
            self._slot_busy = False
            self.slot.end()  # type: ignore[union-attr]  # busy only with a slot

    def _flush(self) -> None:
        if not self.results:
            return
        self._idle()
        self._top_up()
        self._send_frames(wire.encode_results(self.granted, self.received, self.results), "Results")
        self.results = []
        self.results_bytes = 0

    def _drain_socket(self) -> None:
        self._idle()
        while readable(self.sock):
            frames = self.sock.recv_multipart(copy=True)
            if len(frames) != 2:
                log.warning("%s: dropped a frame set of %d parts", self.options.worker_id, len(frames))
                continue
            try:
                msg = wire.WORKER.decode(frames[0], frames[1], max_bytes=self.options.max_message_bytes)
            except wire.WireError as exc:
                log.warning("%s: dropped a bad frame: %s", self.options.worker_id, exc)
                continue
            if isinstance(msg, wire.Tasks):
                if msg.max_message_bytes != self.producer_limit:
                    self._fit_results_to(msg.max_message_bytes)
                self.received += len(msg.tasks)
                self.inbox.extend(msg.tasks)
            elif isinstance(msg, wire.Revoke):
                self._give_back(min(msg.n, len(self.inbox)))
            elif isinstance(msg, wire.Refused):  # another wire protocol, or a reward service's clients' endpoint: the pool hears it too and stops us
                log.debug("%s: refused: %s", self.options.worker_id, wire.refused_line("the producer", "this worker", msg))

    def _fit_results_to(self, producer_limit: int) -> None:
        """Bound RESULTS messages by the lower of this worker's frame limit and ``producer_limit`` (the producer's,
        bytes, as a ``Tasks`` message states it; 0: not said, ours alone)."""
        self.producer_limit = producer_limit
        self.frame_bytes = min(self.options.max_message_bytes, producer_limit or self.options.max_message_bytes)
        self.batch_bytes = self.frame_bytes // 2

    def _give_back(self, n: int) -> None:
        """Hand the last ``n`` unstarted tasks back, for an idle worker to take."""
        if n <= 0:
            return
        keys = [self.inbox.pop().key for _ in range(n)]
        keys.reverse()
        self.finished += len(keys)
        self._send(wire.Giveback(self.granted, self.received, keys))

    # running ----------------------------------------------------------------
    def _finish(self, result: wire.TaskResult, size: int = 0) -> None:
        """Add ``result`` to the results to send (flushing those batched first if it would not fit their message).
        ``size``: its ``result_bytes`` when the caller knows it (a bare score), else 0."""
        packed: Packed = result
        if not size or size + MESSAGE_OVERHEAD > self.frame_bytes:
            packed, size = fit_frame(result, self.frame_bytes)
        if self.results and self.results_bytes + size > self.batch_bytes:
            self._flush()  # what is batched goes now; this one starts the next message
        self.results_bytes += size
        if not self.results:
            self.first_unflushed = time.monotonic()
        self.results.append(packed)
        self.finished += 1

    def _run_tasks(self, until: float) -> None:
        """Run tasks from the front of the inbox, in order, until it is empty or ``until`` (monotonic s) has
        passed, so that the loop looks at its socket every ``DRAIN_EVERY_S`` at most; flush results as they are
        due (``FLUSH_RESULTS`` of them, the oldest ``FLUSH_AFTER_S`` old, or the inbox empty).

        Each task: its reward is resolved (an unknown one fails it as ``unknown_reward``); an io reward starts on
        the thread pool; a CPU reward runs here, with the busy slot showing it (left showing it when it returns:
        the loop marks the slot idle, ``_idle``, before it does anything but start the next task, whose write
        overwrites it: one write per task, not two).  A run of tasks of one reward resolves it once."""
        inbox, monotonic, slot, finish = self.inbox, time.monotonic, self.slot, self._finish
        default_limit = self.options.task_timeout_s
        name: Optional[str] = None  # the reward of the previous task, and what it resolved to
        spec: Any = None
        ran: Optional[str] = None
        spec_limit = 0.0
        bare = 0  # result_bytes of a bare score computed by it
        unknown: Optional[wire.Fault] = None  # why it could not be resolved
        while inbox:
            task = inbox.popleft()
            key = task.key
            if task.reward != name:
                name = task.reward
                try:
                    spec = resolve(name)
                except RewardError as exc:
                    spec = None
                    detail = str(exc)
                    if self.import_errors:
                        detail += "; " + "; ".join(self.import_errors)
                    unknown = _error(ErrorKind.UNKNOWN_REWARD, detail)
                else:
                    ran = reward_version(spec.fn, spec.version)  # the results say which code computed them
                    spec_limit = spec.timeout_s or default_limit
                    bare = RESULT_OVERHEAD + (len(ran.encode()) if ran else 0)
            if spec is None:
                finish(wire.TaskResult(key, None, None, unknown, 0.0, None, None))
                t1 = monotonic()
            elif spec.kind == "io":
                self._idle()  # the slot is the main thread's: it must not go on showing the last CPU task
                self._start_io(key, spec, task.payload, task.params, task.meta, task.timeout_s or spec_limit, ran)
                t1 = monotonic()
            else:
                t0 = monotonic()
                if slot is not None:
                    slot.begin(key, t0, t0 + (task.timeout_s or spec_limit))
                    self._slot_busy = True
                score, extra, error, outcome = call_reward(spec, task.payload, task.params, task.meta)
                t1 = monotonic()
                dt = t1 - t0
                service_s = self.service_s
                self.service_s = dt if service_s == 0.0 else 0.8 * service_s + 0.2 * dt
                finish(wire.TaskResult(key, score, extra, error, dt, outcome, ran),
                       bare if extra is None and error is None and outcome is None else 0)
            results = self.results
            if results and (len(results) >= FLUSH_RESULTS or not inbox or t1 - self.first_unflushed > FLUSH_AFTER_S):
                self._flush()
                self.last_sent = t1
            if t1 >= until or self.stopping:
                return

    def _start_io(self, key: bytes, spec: Any, payload_bytes: bytes, params: dict, meta: Optional[dict], limit: float,
                  ran: Optional[str]) -> None:
        if self._io_executor is None:
            self._io_executor = concurrent.futures.ThreadPoolExecutor(self.options.io_threads, thread_name_prefix="qworker-io")
        t0 = time.monotonic()
        self._io_running[key] = (t0, t0 + limit)

        def done(fut: concurrent.futures.Future) -> None:
            score, extra, error, outcome = fut.result()
            self._io_done.append(wire.TaskResult(key, score, extra, error, time.monotonic() - t0, outcome, ran))
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass  # the pipe is full: the main loop is awake anyway

        def call() -> Outcome:
            _io_deadline.at = t0 + limit
            return call_reward(spec, payload_bytes, params, meta)

        self._io_executor.submit(call).add_done_callback(done)

    def _collect_io(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while self._io_done:
            r = self._io_done.popleft()
            if self._io_running.pop(r.key, None) is not None:  # not already timed out
                self._finish(r)
        now = time.monotonic()
        for key, (started, deadline) in list(self._io_running.items()):
            if now >= deadline:
                del self._io_running[key]
                self._finish(wire.TaskResult(key, None, None, _error(ErrorKind.TIMEOUT, f"io reward passed its {deadline - started:.3g} s limit"),
                                             now - started, None, None))

    def _next_io_deadline(self) -> Optional[float]:
        return min((d for _, d in self._io_running.values()), default=None)

    # main loop --------------------------------------------------------------
    def _beat_forever(self) -> None:
        """Heartbeat into the slot from a thread of its own, so the pool sees a live process
        even while the main thread runs a long reward; a stopped or frozen process stops beating."""
        assert self.slot is not None
        while not self.stopping:
            self.slot.beat(time.monotonic())
            time.sleep(self.options.heartbeat_s / 2)

    def run(self) -> int:
        if self.slot is not None:
            threading.Thread(target=self._beat_forever, name="qworker-beat", daemon=True).start()
        self.import_errors = load_modules(list(self.options.reward_modules))
        for e in self.import_errors:
            log.error("%s: %s", self.options.worker_id, e)
        self.ctx = zmq.Context(io_threads=1)
        self.sock = make_socket(
            self.ctx, zmq.DEALER, connect=self.options.connect, identity=self.options.worker_id.encode(),
            max_message_bytes=self.options.max_message_bytes, linger_ms=1000, curve=self.options.curve(),
        )
        self.redial = Redialer(self.sock, str(self.options.connect))
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        self._ready()
        self.last_sent = last_drain = time.monotonic()
        while not self.stopping:
            if not self.inbox:
                self._idle()
                self._collect_io()
                if self.results:
                    self._flush()
                    self.last_sent = time.monotonic()
                wait_s = self.options.heartbeat_s
                io_deadline = self._next_io_deadline()
                if io_deadline is not None:
                    wait_s = max(0.0, min(wait_s, io_deadline - time.monotonic()))
                events = dict(poller.poll(int(wait_s * 1000) + 1))
                if not events:
                    now = time.monotonic()
                    if now - self.last_sent >= self.options.heartbeat_s:
                        self._ready()  # heartbeat; lets a restarted producer learn our credit
                        self.last_sent = now
                    if self.options.parent_pid is not None and os.getppid() != self.options.parent_pid:
                        log.error("%s: pool process %d is gone; exiting", self.options.worker_id, self.options.parent_pid)
                        return 1
                    continue
                self._drain_socket()
                last_drain = time.monotonic()
                continue
            now = time.monotonic()
            if now - last_drain > DRAIN_EVERY_S:
                self._drain_socket()
                if self._io_running or self._io_done:
                    self._collect_io()
                last_drain = now
                if not self.inbox:  # a REVOKE took what was left
                    continue
            self._run_tasks(last_drain + DRAIN_EVERY_S)
        return self._drain_and_leave()

    def _drain_and_leave(self) -> int:
        """SIGTERM: finish running io tasks, hand queued tasks back, say BYE."""
        self._drain_socket()
        self.granted = self.received  # withdraw unused credit, so nothing more is sent our way
        self._give_back(len(self.inbox))
        while self._io_running:  # each ends by its own deadline at the latest
            wait_s = max(0.0, (self._next_io_deadline() or 0.0) - time.monotonic())
            zmq.select([self._wake_r], [], [], wait_s + 0.001)
            self._collect_io()
        if self._io_executor is not None:
            self._io_executor.shutdown(wait=False, cancel_futures=True)
        self._flush()
        self._send(wire.Bye("draining"))
        self.sock.close(linger=1000)  # a reachable producer takes it at once
        self.ctx.term()
        return 0

    def request_stop(self, *_: object) -> None:
        self.stopping = True


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL us when the pool dies, so no worker outlives its pool."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the idle-loop parent check still applies
    if os.getppid() != parent_pid:
        sys.exit(1)


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m qworker.host.worker FLAGS``: the flags are ``WorkerOptions.to_argv()``, built by the pool."""
    options = WorkerOptions.from_argv(sys.argv[1:] if argv is None else argv, prog="python -m qworker.host.worker")
    if options.parent_pid is not None:
        _die_with_parent(options.parent_pid)
    logging.basicConfig(level=options.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    os.environ["QWORKER_WORKER_ID"] = options.worker_id  # rewards may read it (e.g. to pick a device)
    worker = Worker(options)
    signal.signal(signal.SIGTERM, worker.request_stop)
    signal.set_wakeup_fd(worker._wake_w)  # SIGTERM wakes the poll at once, so draining starts now
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the pool, which drains us
    rc = worker.run()  # the socket is flushed and closed when this returns
    # Exit now: an io reward thread past its deadline must not hold the process
    # open (the interpreter would join the thread pool at exit).
    logging.shutdown()
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(main())
