"""``qworker mock-judge``: an OpenAI-compatible judge for demos, tests and benchmarks.

It serves ``POST /v1/chat/completions`` on 127.0.0.1 as real judges behave:

* **capacity** (``capacity``): a request arriving while ``capacity`` are being
  served gets 429 (a hosted provider's concurrency cap); or, with
  ``queue=True``, waits in FIFO order and is never refused (vLLM, SGLang: a
  batch of ``capacity`` served at once, the rest queued);
* **token buckets** ``rpm`` and ``tpm`` (refilled at a sixtieth per second,
  holding one second's worth): a request finding one empty gets 429.  Tokens
  are counted as providers estimate them: prompt bytes / 4 + ``max_tokens``;
* **Retry-After** on a 429 (``retry_after``): ``"ms"`` (``retry-after-ms`` plus
  whole seconds in ``Retry-After``), ``"seconds"`` (``Retry-After`` in whole
  seconds, at least 1, as several providers send), ``"date"`` (an HTTP-date) or ``"none"``;
* **rate-limit headers** (``ratelimit_headers``): ``"openai"``
  (``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``, resets as ``"1s"``,
  ``"20ms"``) or ``"anthropic"`` (``anthropic-ratelimit-...``, RFC 3339 resets);
* **latency** per served request (``latency_dist``): ``"fixed"`` (``latency_s``),
  ``"lognormal"`` (mean ``latency_s``, ``sigma``: LLM latency), or
  ``"per-token"`` (``ttft_s`` + ``per_token_s`` x the reply's output tokens,
  lognormal around ``tokens_mean``; ``usage.completion_tokens`` says how many);
* **faults**: ``p_error`` (status ``error_status``, 500 by default, after the
  latency), ``p_reset`` (the connection is reset), ``p_hang`` (never answers),
  and ``fault`` set at run time (``"hang"``, ``"500"``, ``"401"``);
* an **API key** check when ``api_key`` is set (401, and like some providers
  the error message echoes the key it was given);
* **outages and hostile replies on command** (methods, or ``POST /admin/...``
  with a JSON body, for a mock run as a separate process):
  ``go_down(seconds, how)`` / ``/admin/down {"seconds", "how"}``: for that long
  every request is answered 503 or 429 at once (with ``Retry-After: 1`` unless
  ``retry_after="none"``), or reset (``"reset"``), or the port refuses
  connections (``"refuse"``: the listening socket is closed, open connections
  reset, and it listens again on the same port after ``seconds``);
  ``hostile(headers, count)`` / ``/admin/headers {"headers", "count"}``: add
  these headers (``x-ratelimit-limit-requests: -1``, ``retry-after: inf``, ...) to
  the next ``count`` replies (every reply when ``count`` is null);
  ``set_capacity(n)`` / ``/admin/capacity {"capacity"}``: serve ``n`` at once from now on;
  ``giant(count, size)`` / ``/admin/giant {"count", "bytes"}``: the next
  ``count`` answers carry a body of ``size`` bytes (padding in the JSON);
* a **prefix cache** per server (``prefix_blocks`` > 0, ``judge.prefixcache``:
  an LRU of prompt blocks, as vLLM's automatic prefix caching keeps): a
  request's service time is then the prefill of the prompt tokens that missed
  (``prefill_per_token_s`` each) plus the drawn latency (the decode).  A
  replica fleet is one mock per replica.

The reply's last line is ``Score: N``, N in 0..10, a hash of the last user
message (``expected_score``).  ``GET /stats``: requests, served, 429s, errors,
resets, max in flight, connections, reads of ``/metrics``, ``mean_held_s`` (how long a served request
held its slot), ``mean_queued_s`` (time waiting for a slot, queue mode) and
``mean_service_s``.  ``GET /metrics``: ``vllm:num_requests_running`` and
``vllm:num_requests_waiting`` in Prometheus text.  A slot is freed when its
answer is ready, before the answer is written.  HTTP/1.1 with keep-alive.
"""

from __future__ import annotations

import contextlib
import math
import random
import socket
import threading
import time
from collections import deque
from http.server import ThreadingHTTPServer
from typing import Any, Optional

from .mockhandler import Handler, expected_score
from .prefixcache import PrefixCache

__all__ = ["DEFAULT_PORT", "MockJudge", "expected_score", "main"]

DEFAULT_PORT = 18600  # ``qworker mock-judge``'s port: the one configs/demo-judge.yaml names (8000 is the quick start's --http)


class _Bucket:
    def __init__(self, per_minute: float) -> None:
        self.rate = per_minute / 60.0
        self.limit = per_minute
        self.tokens = self.rate
        self.at = time.monotonic()

    def take(self, n: float, now: float) -> Optional[float]:
        """None when ``n`` were taken; else seconds until they could be."""
        self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < min(n, self.rate):
            return (min(n, self.rate) - self.tokens) / self.rate
        self.tokens -= n
        return None


class MockJudge(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(
        self, *, port: int = 0, capacity: int = 64, latency_s: float = 0.2, rpm: Optional[float] = None,
        tpm: Optional[float] = None, p_error: float = 0.0, error_status: int = 500, p_reset: float = 0.0,
        p_hang: float = 0.0, api_key: Optional[str] = None, seed: int = 0, queue: bool = False,
        latency_dist: str = "fixed", sigma: float = 0.6, ttft_s: float = 0.02, per_token_s: float = 0.002,
        tokens_mean: int = 150, retry_after: str = "ms", ratelimit_headers: str = "none",
        prefix_blocks: int = 0, prefill_per_token_s: float = 0.0002,
    ) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.capacity, self.latency_s, self.queue = capacity, latency_s, queue
        self.rpm, self.tpm = (_Bucket(rpm) if rpm else None), (_Bucket(tpm) if tpm else None)
        self.p_error, self.error_status, self.p_reset, self.p_hang = p_error, error_status, p_reset, p_hang
        self.api_key = api_key
        self.latency_dist, self.sigma, self.ttft_s, self.per_token_s, self.tokens_mean = latency_dist, sigma, ttft_s, per_token_s, tokens_mean
        self.retry_after, self.ratelimit_headers = retry_after, ratelimit_headers
        self.fault: Optional[str] = None
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.ends: list[float] = []  # finish times of requests in service
        self.waiters: deque[list] = deque()  # queue mode: [event, service s, prompt] waiting for a slot, in order
        self.prefix = PrefixCache(blocks=prefix_blocks, prefill_s_per_token=prefill_per_token_s) if prefix_blocks else None
        self.stats = {"requests": 0, "served": 0, "status_429": 0, "errors": 0, "resets": 0, "max_in_flight": 0, "connections": 0,
                      "metrics_reads": 0, "outage_replies": 0}
        self.held_s = self.queued_s = self.service_s = 0.0
        self._thread: Optional[threading.Thread] = None
        self.open_sockets: list[socket.socket] = []
        self.down_until, self.down_how = 0.0, ""
        self.extra_headers: dict = {}
        self.extra_left: Optional[int] = 0  # replies still to carry extra_headers (None: all)
        self.giant_left, self.giant_bytes = 0, 0
        self._stopped = False

    # commands -----------------------------------------------------------------
    def go_down(self, seconds: float, how: str = "503") -> None:
        """For ``seconds``, answer every request with 503 or 429 at once, reset it, or (``"refuse"``) refuse connections."""
        if how not in ("503", "429", "reset", "refuse"):
            raise ValueError(f"how must be 503, 429, reset or refuse, not {how!r}")
        with self.lock:
            self.down_until, self.down_how = time.monotonic() + seconds, how
        if how == "refuse":
            threading.Thread(target=self._refuse_for, args=(seconds,), name="mock-judge-down", daemon=True).start()

    def _refuse_for(self, seconds: float) -> None:
        self.shutdown()
        self.socket.close()
        self._reset_open()
        time.sleep(seconds)
        if self._stopped:
            return
        self.socket = socket.socket(self.address_family, self.socket_type)
        self.server_bind()
        self.server_activate()
        self.start()

    def is_down(self, now: float) -> str:
        """How requests are turned away now ("" when they are not)."""
        with self.lock:
            return self.down_how if now < self.down_until else ""

    def set_capacity(self, capacity: int) -> None:
        """From now on serve ``capacity`` at once (a tenant arrived, a replica restarted); requests in service finish."""
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, not {capacity}")
        with self.lock:
            self.capacity = capacity
            while self.waiters and len(self.ends) < self.capacity:  # queue mode: more room lets waiting requests start
                slot = self.waiters.popleft()
                if self.prefix is not None:
                    slot[1] += self.prefix.serve(slot[2])
                self.ends.append(time.monotonic() + slot[1])
                slot[0].set()

    def hostile(self, headers: dict, count: Optional[int] = None) -> None:
        """Add ``headers`` to the next ``count`` replies (all replies when None; ``{}`` stops)."""
        with self.lock:
            self.extra_headers, self.extra_left = dict(headers), count

    def giant(self, count: int = 1, size: int = 20 * 1024 * 1024) -> None:
        """The next ``count`` answers carry a body of about ``size`` bytes."""
        with self.lock:
            self.giant_left, self.giant_bytes = count, size

    def extras(self, answer: bool) -> tuple[dict, int]:
        """(extra headers for this reply, the size of a giant body for it or 0); ``answer``: a 200 with a score."""
        with self.lock:
            headers: dict = {}
            if self.extra_headers and (self.extra_left is None or self.extra_left > 0):
                headers = dict(self.extra_headers)
                if self.extra_left is not None:
                    self.extra_left -= 1
            size = 0
            if answer and self.giant_left > 0:
                self.giant_left -= 1
                size = self.giant_bytes
            return headers, size

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/chat/completions"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-answer (its connection reset, or ours, going down) is normal here; anything else is printed."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn = super().get_request()
        with self.lock:
            self.stats["connections"] += 1
            self.open_sockets.append(conn[0])
        return conn

    def draw(self) -> tuple[float, int]:
        """(service seconds, output tokens) of one answer.  Caller holds the lock (the rng)."""
        if self.latency_dist == "per-token":
            n = max(1, round(self.tokens_mean * math.exp(self.sigma * self.rng.gauss(0, 1) - self.sigma**2 / 2)))
            return self.ttft_s + self.per_token_s * n, n
        if self.latency_dist == "lognormal":
            return self.latency_s * math.exp(self.sigma * self.rng.gauss(0, 1) - self.sigma**2 / 2), 12
        return self.latency_s, 12

    def headers(self, now: float) -> dict:
        """The rate-limit headers the configured provider would send.  Caller holds the lock."""
        out: dict = {}
        for kind, b in (("requests", self.rpm), ("tokens", self.tpm)):
            if b is None or self.ratelimit_headers == "none":
                continue
            b.take(0, now)
            reset = (b.rate - b.tokens) / b.rate
            if self.ratelimit_headers == "openai":
                out.update({f"x-ratelimit-limit-{kind}": str(int(b.limit)), f"x-ratelimit-remaining-{kind}": str(int(b.tokens)),
                            f"x-ratelimit-reset-{kind}": f"{reset * 1000:.0f}ms"})
            else:
                at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + reset)) + f".{int((time.time() + reset) % 1 * 1000):03d}Z"
                out.update({f"anthropic-ratelimit-{kind}-limit": str(int(b.limit)),
                            f"anthropic-ratelimit-{kind}-remaining": str(int(b.tokens)), f"anthropic-ratelimit-{kind}-reset": at})
        return out

    def admit(self, tokens: float, prompt: str = "") -> tuple[int, Optional[float], dict, Optional[list], float, int, float]:
        """(status, retry_after_s, headers, [event, service s] to wait on in queue mode, service s, output tokens, random roll).

        ``prompt``: the user message, for the prefix cache: its prefill is added to the service time when the
        request's service starts (at once, or when the queue hands it a slot).
        """
        now = time.monotonic()
        with self.lock:
            service, n_tokens = self.draw()
            roll = self.rng.random()
            self.stats["requests"] += 1
            for b, need in ((self.rpm, 1.0), (self.tpm, tokens)):
                wait = b.take(need, now) if b is not None else None
                if wait is not None:
                    if b is self.tpm and self.rpm is not None:  # give the request back
                        self.rpm.tokens += 1.0
                    self.stats["status_429"] += 1
                    return 429, wait, self.headers(now), None, 0.0, 0, roll
            if len(self.ends) >= self.capacity:
                if not self.queue:
                    self.stats["status_429"] += 1
                    return 429, max(0.001, (min(self.ends) if self.ends else now + self.latency_s) - now), self.headers(now), None, 0.0, 0, roll
                slot = [threading.Event(), service, prompt]
                self.waiters.append(slot)
                return 200, None, self.headers(now), slot, service, n_tokens, roll
            if self.prefix is not None:
                service += self.prefix.serve(prompt)
            self.ends.append(now + service)
            self.stats["max_in_flight"] = max(self.stats["max_in_flight"], len(self.ends))
            return 200, None, self.headers(now), None, service, n_tokens, roll

    def finish(self, ok: bool, started: float) -> None:
        with self.lock:
            self.ends.remove(min(self.ends))
            if ok:
                self.held_s += time.monotonic() - started
            self.stats["served" if ok else "errors"] += 1
            if self.waiters and len(self.ends) < self.capacity:  # the slot passes to the first in the queue
                slot = self.waiters.popleft()
                if self.prefix is not None:
                    slot[1] += self.prefix.serve(slot[2])
                self.ends.append(time.monotonic() + slot[1])
                slot[0].set()

    def start(self) -> MockJudge:
        self._thread = threading.Thread(target=self.serve_forever, name="mock-judge", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop as a dying server does: the port refuses, and open connections are reset."""
        self._stopped = True
        self.shutdown()
        self.server_close()
        self._reset_open()

    def _reset_open(self) -> None:
        with self.lock:
            sockets, self.open_sockets = self.open_sockets, []
            for slot in self.waiters:
                slot[0].set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


def main(argv: Optional[list[str]] = None) -> int:
    from .._args import Parser, bool_flag

    ap = Parser(prog="qworker mock-judge", description="An OpenAI-compatible mock judge on 127.0.0.1.")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port on 127.0.0.1 (0: any free port); 18600 is "
                    "the one configs/demo-judge.yaml names, clear of the quick start's --http 8000")
    ap.add_argument("--capacity", type=int, default=64, help="requests served at once; more get 429 (or wait, with --queue)")
    bool_flag(ap, "queue", help="never refuse: queue beyond --capacity, served in order (vLLM-like)")
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per served request (the mean, for lognormal)")
    ap.add_argument("--latency-dist", choices=("fixed", "lognormal", "per-token"), default="fixed", help="how latency is drawn")
    ap.add_argument("--sigma", type=float, default=0.6, help="lognormal spread (of latency, or of output tokens for per-token)")
    ap.add_argument("--per-token", type=float, default=0.002, help="per-token: seconds per output token")
    ap.add_argument("--ttft", type=float, default=0.02, help="per-token: seconds before the first token")
    ap.add_argument("--tokens-mean", type=int, default=150, help="per-token: mean output tokens")
    ap.add_argument("--rpm", type=float, help="requests per minute (token bucket, 1 s burst); more get 429")
    ap.add_argument("--tpm", type=float, help="tokens per minute (token bucket, 1 s burst); more get 429")
    ap.add_argument("--retry-after", choices=("ms", "seconds", "date", "none"), default="ms", help="the form of Retry-After on a 429")
    ap.add_argument("--ratelimit-headers", choices=("none", "openai", "anthropic"), default="none",
                    help="send rate-limit headers in this provider's spelling")
    ap.add_argument("--p-error", type=float, default=0.0, help="probability of an injected error status")
    ap.add_argument("--error-status", type=int, default=500, help="the injected error's status (e.g. 503)")
    ap.add_argument("--p-reset", type=float, default=0.0, help="probability of a connection reset instead of an answer")
    ap.add_argument("--p-hang", type=float, default=0.0, help="probability of never answering")
    ap.add_argument("--api-key-env", help="require the key in this environment variable")
    ap.add_argument("--prefix-blocks", type=int, default=0, help="a prefix cache of this many 64-character blocks (0: none)")
    ap.add_argument("--prefill-per-token", type=float, default=0.0002, help="prefix cache: seconds of prefill per prompt token that missed")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random draws")
    args = ap.parse_args(argv)
    import os
    import sys

    for flag, value, low, high in (
        ("--capacity", args.capacity, 1, None), ("--latency", args.latency, 0, None), ("--sigma", args.sigma, 0, None),
        ("--per-token", args.per_token, 0, None), ("--ttft", args.ttft, 0, None), ("--tokens-mean", args.tokens_mean, 1, None),
        ("--rpm", args.rpm, 1e-9, None), ("--tpm", args.tpm, 1e-9, None), ("--p-error", args.p_error, 0, 1),
        ("--p-reset", args.p_reset, 0, 1), ("--p-hang", args.p_hang, 0, 1), ("--prefix-blocks", args.prefix_blocks, 0, None),
        ("--prefill-per-token", args.prefill_per_token, 0, None), ("--port", args.port, 0, 65535),
    ):
        if value is not None and not (low <= value <= (high if high is not None else math.inf)):
            bound = f"between {low} and {high}" if high is not None else ("above 0" if 0 < low < 1 else f"at least {low}")
            ap.error(f"{flag} must be {bound}, got {value}")

    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    try:
        server = MockJudge(
            port=args.port, capacity=args.capacity, latency_s=args.latency, rpm=args.rpm, tpm=args.tpm, p_error=args.p_error,
            error_status=args.error_status, p_reset=args.p_reset, p_hang=args.p_hang, api_key=key, seed=args.seed, queue=args.queue,
            latency_dist=args.latency_dist, sigma=args.sigma, ttft_s=args.ttft, per_token_s=args.per_token, tokens_mean=args.tokens_mean,
            retry_after=args.retry_after, ratelimit_headers=args.ratelimit_headers, prefix_blocks=args.prefix_blocks,
            prefill_per_token_s=args.prefill_per_token,
        )
    except OSError as exc:  # a busy port, most often
        print(f"qworker mock-judge: cannot listen on 127.0.0.1:{args.port}: {exc.strerror}; pick another --port", file=sys.stderr)
        return 2
    print(f"mock judge on {server.url} (capacity {args.capacity}{' queued' if args.queue else ''}, latency {args.latency} s "
          f"{args.latency_dist}, rpm {args.rpm}, tpm {args.tpm}); stats at /stats, load at /metrics", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        return 130
    return 0
