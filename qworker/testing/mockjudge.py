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
  latency), ``p_reset`` (the connection is reset), ``p_hang`` (never answers: its slot is held until the client
  closes the connection),
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
* a **prefix cache** per server (``prefix_blocks`` > 0, ``testing.prefixcache``:
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
import json
import math
import random
import select
import socket
import struct
import sys
import threading
import time
from collections import deque
from email.utils import formatdate
from hashlib import blake2b
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

from .prefixcache import PrefixCache

__all__ = ["DEFAULT_PORT", "MockJudge", "expected_score"]

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
    """An OpenAI-compatible judge on 127.0.0.1 (``port`` 0: any free port), behaving as the module docstring says.

    Listens when constructed; ``start()`` serves it on a daemon thread and returns it, ``url`` is its
    base URL (``GET {url}/stats`` its counters), ``stop()`` stops it.  Keyword-only: every knob of the
    module docstring (capacity, buckets, latency, faults, prefix cache) is one argument.
    """

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
        self.stats = {"requests": 0, "served": 0, "status_429": 0, "errors": 0, "resets": 0, "hangs": 0, "max_in_flight": 0, "connections": 0,
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

    def finish(self, ok: bool, started: float, *, hung: bool = False) -> None:
        """A request leaves its slot: served (``ok``), failed, or ``hung`` (counted in ``stats["hangs"]`` alone)."""
        with self.lock:
            self.ends.remove(min(self.ends))
            if ok:
                self.held_s += time.monotonic() - started
            if not hung:
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


# The HTTP side: one request at a time on a keep-alive connection (``MockJudge`` holds the state).



def expected_score(user_message: str) -> int:
    """The score the mock gives a prompt."""
    return blake2b(user_message.encode(), digest_size=4).digest()[0] % 11


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: Nagle + delayed ACK would add 40 ms
    server: MockJudge

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: object, headers: Optional[dict] = None, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        s = self.server
        if self.path == "/stats":
            with s.lock:
                n = s.stats["served"] + s.stats["errors"]
                self._send(200, {**s.stats, "in_flight": len(s.ends), "waiting": len(s.waiters),
                                 "mean_held_s": round(s.held_s / s.stats["served"], 5) if s.stats["served"] else 0.0,
                                 "mean_queued_s": round(s.queued_s / n, 5) if n else 0.0,
                                 "mean_service_s": round(s.service_s / n, 5) if n else 0.0,
                                 **({"prefix_hit_rate": round(s.prefix.hit_rate(), 5), **s.prefix.stats} if s.prefix else {})})
        elif self.path == "/metrics":
            with s.lock:
                s.stats["metrics_reads"] += 1
                text = (f'vllm:num_requests_running{{model_name="mock"}} {len(s.ends)}.0\n'
                        f'vllm:num_requests_waiting{{model_name="mock"}} {len(s.waiters)}.0\n')
            self._send(200, text, content_type="text/plain; version=0.0.4")
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def _hang(self) -> None:
        """Never answer: hold the request's slot until the client gives up (closes the connection; a server that
        serves in batches frees the slot of a request whose client left, as vLLM does), the server stops, or an
        hour passes.  Bytes the client sends meanwhile are read and dropped."""
        s = self.server
        until = time.monotonic() + 3600
        conn = self.connection
        while time.monotonic() < until and not s._stopped:
            try:
                readable, _, _ = select.select([conn], [], [], 0.05)
                if readable and conn.recv(4096) == b"":
                    return  # closed by the client
            except (OSError, ValueError):  # reset, or closed here
                return

    def _reset(self) -> None:
        """Drop the connection with a TCP reset, as a crashing proxy does."""
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        self.close_connection = True

    def _admin(self, body: bytes) -> None:
        s = self.server
        try:
            args = json.loads(body or b"{}")
            if self.path == "/admin/down":
                s.go_down(float(args["seconds"]), str(args.get("how", "503")))
            elif self.path == "/admin/headers":
                s.hostile({str(k): str(v) for k, v in args["headers"].items()}, args.get("count"))
            elif self.path == "/admin/capacity":
                s.set_capacity(int(args["capacity"]))
            elif self.path == "/admin/giant":
                s.giant(int(args.get("count", 1)), int(args.get("bytes", 20 * 1024 * 1024)))
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._send(400, {"error": {"message": f"bad admin command: {exc}"}})
            return
        self._send(200, {"ok": True})

    def do_POST(self) -> None:  # noqa: N802
        s = self.server
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/admin/"):
            self._admin(body)
            return
        if not self.path.endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        given = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        if s.fault == "401" or (s.api_key and given != s.api_key):
            with s.lock:
                s.stats["requests"] += 1
                s.stats["errors"] += 1
            self._send(401, {"error": {"message": f"Incorrect API key provided: {given}", "type": "invalid_request_error"}})
            return
        try:
            req = json.loads(body)
            user = [m["content"] for m in req["messages"] if m.get("role") == "user"][-1]
        except (ValueError, KeyError, IndexError, TypeError):
            self._send(400, {"error": {"message": "body is not a chat completion request"}})
            return
        arrived = time.monotonic()
        down = s.is_down(arrived)
        if down:
            with s.lock:
                s.stats["requests"] += 1
                s.stats["outage_replies"] += 1
            if down in ("reset", "refuse"):
                self._reset()
                return
            extra = s.extras(False)[0]
            after = {} if s.retry_after == "none" else {"Retry-After": "1"}
            self._send(int(down), {"error": {"message": "the judge is down", "type": "overloaded"}}, {**after, **extra})
            return
        status, retry_after, headers, wait, service, n_tokens, roll = s.admit(len(body) / 4 + float(req.get("max_tokens") or 16), user)
        extra, giant = s.extras(status == 200)
        if status == 429:
            ra = retry_after or 0.0
            if s.retry_after == "ms":
                headers.update({"retry-after-ms": f"{ra * 1000:.0f}", "Retry-After": str(max(1, round(ra)))})
            elif s.retry_after == "seconds":
                headers["Retry-After"] = str(max(1, math.ceil(ra)))
            elif s.retry_after == "date":
                headers["Retry-After"] = formatdate(time.time() + max(1.0, ra), usegmt=True)
            self._send(429, {"error": {"message": "Rate limit reached", "type": "rate_limit"}}, {**headers, **extra})
            return
        if wait is not None:
            wait[0].wait()
            service = wait[1]
        started = time.monotonic()
        with s.lock:
            s.queued_s += started - arrived
            s.service_s += service
        ok, outcome = False, "error"
        try:
            if s.fault == "hang" or roll < s.p_hang:
                outcome = "hung"
                with s.lock:
                    s.stats["hangs"] += 1
                self._hang()
            else:
                time.sleep(service)
                if roll < s.p_hang + s.p_reset:
                    outcome = "reset"
                elif s.fault == "500" or roll < s.p_hang + s.p_reset + s.p_error:
                    outcome = "error"
                else:
                    ok, outcome = True, "ok"
        finally:
            # The answer is ready: its slot is free before it is written, so a client that
            # sends its next request on reading this one never finds the slot still taken.
            s.finish(ok, started, hung=outcome == "hung")
        if outcome == "hung":
            self.close_connection = True  # (the client is gone: nothing to write to)
            return
        if outcome == "reset":
            with s.lock:
                s.stats["resets"] += 1
            self._reset()
            return
        if not ok:
            status = 500 if s.fault == "500" else s.error_status
            self._send(status, {"error": {"message": "injected server error", "type": "server_error"}}, {**headers, **extra})
            return
        content = f"The answer looks reasonable.\nScore: {expected_score(user)}"
        doc: dict = {
            "id": "mock", "object": "chat.completion", "model": req.get("model", "mock"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(user) // 4, "completion_tokens": n_tokens, "total_tokens": len(user) // 4 + n_tokens},
        }
        if giant:
            doc["padding"] = "x" * giant
        self._send(200, doc, {**headers, **extra})
