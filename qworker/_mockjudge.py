"""``qworker mock-judge``: an OpenAI-compatible judge for demos, tests and benchmarks.

It serves ``POST /v1/chat/completions`` on 127.0.0.1 like a rate-limited
provider:

* a **concurrency cap** (``capacity``): a request arriving while ``capacity``
  are being served gets 429, with ``retry-after-ms`` (and ``Retry-After`` in
  whole seconds) set to when the earliest one in service will finish;
* an **RPM budget** (``rpm``): a token bucket refilled at ``rpm/60`` per second
  holding at most one second's worth; a request finding it empty gets 429
  with the time until the next token;
* **latency** (``latency_s``) per served request, and injected faults:
  ``p_error`` (500 with that probability), and ``fault`` set at run time
  (``"hang"``: never answer; ``"500"``; ``"401"``);
* an **API key** check when ``api_key`` is set (401, and like some providers
  the error message echoes part of the key it was given).

The reply's last line is ``Score: N``, N in 0..10, a hash of the last user
message, so callers can predict it (``expected_score``).  ``GET /stats``
reports what it saw: requests, served, 429s, errors, max in flight,
connections opened, and ``mean_held_s``, how long a served request really held
its slot (the sleep overshoots on a loaded machine).  A slot is freed when its
answer is ready, before the answer is written.  It speaks HTTP/1.1 with
keep-alive.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import socket
import threading
import time
from hashlib import blake2b
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

__all__ = ["MockJudge", "expected_score", "main"]


def expected_score(user_message: str) -> int:
    """The score the mock gives a prompt."""
    return blake2b(user_message.encode(), digest_size=4).digest()[0] % 11


class MockJudge(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(
        self, *, port: int = 0, capacity: int = 64, latency_s: float = 0.2, rpm: Optional[float] = None,
        p_error: float = 0.0, api_key: Optional[str] = None, seed: int = 0,
    ) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.capacity = capacity
        self.latency_s = latency_s
        self.rpm = rpm
        self.p_error = p_error
        self.api_key = api_key
        self.fault: Optional[str] = None
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.ends: list[float] = []  # finish times of requests in service
        self.tokens = (rpm or 0) / 60.0
        self.refilled = time.monotonic()
        self.stats = {"requests": 0, "served": 0, "status_429": 0, "errors": 0, "max_in_flight": 0, "connections": 0}
        self.held_s = 0.0  # total seconds capacity slots were held by served requests
        self._thread: Optional[threading.Thread] = None
        self.open_sockets: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/chat/completions"

    def get_request(self):  # type: ignore[no-untyped-def]
        conn = super().get_request()
        with self.lock:
            self.stats["connections"] += 1
            self.open_sockets.append(conn[0])
        return conn

    def admit(self) -> tuple[int, Optional[float]]:
        """(status, retry_after_s): 200 and None when the request may be served now."""
        now = time.monotonic()
        with self.lock:
            self.stats["requests"] += 1
            if self.rpm:
                rate = self.rpm / 60.0
                self.tokens = min(rate, self.tokens + (now - self.refilled) * rate)
                self.refilled = now
                if self.tokens < 1.0:
                    self.stats["status_429"] += 1
                    return 429, (1.0 - self.tokens) / rate
            if len(self.ends) >= self.capacity:
                self.stats["status_429"] += 1
                return 429, max(0.001, (min(self.ends) if self.ends else now + self.latency_s) - now)
            if self.rpm:
                self.tokens -= 1.0
            self.ends.append(now + self.latency_s)
            self.stats["max_in_flight"] = max(self.stats["max_in_flight"], len(self.ends))
            return 200, None

    def finish(self, ok: bool, started: float) -> None:
        with self.lock:
            self.ends.remove(min(self.ends))
            if ok:
                self.held_s += time.monotonic() - started
            self.stats["served" if ok else "errors"] += 1

    def start(self) -> MockJudge:
        self._thread = threading.Thread(target=self.serve_forever, name="mock-judge", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop as a dying server does: the port refuses, and open connections are reset."""
        self.shutdown()
        self.server_close()
        with self.lock:
            sockets, self.open_sockets = self.open_sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: Nagle + delayed ACK would add 40 ms
    server: MockJudge

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: dict, headers: Optional[dict] = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/stats":
            s = self.server
            with s.lock:
                held = s.held_s / s.stats["served"] if s.stats["served"] else 0.0
                self._send(200, {**s.stats, "in_flight": len(s.ends), "mean_held_s": round(held, 5)})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802
        s = self.server
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
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
        status, retry_after = s.admit()
        if status == 429:
            self._send(429, {"error": {"message": "Rate limit reached", "type": "rate_limit"}},
                       {"retry-after-ms": f"{retry_after * 1000:.0f}", "Retry-After": str(max(1, round(retry_after)))})
            return
        ok, started = False, time.monotonic()
        try:
            if s.fault == "hang":
                time.sleep(3600)
            time.sleep(s.latency_s)
            ok = not (s.fault == "500" or (s.p_error and s.rng.random() < s.p_error))
        finally:
            # The answer is ready: its slot is free before it is written, so a client that
            # sends its next request on reading this one never finds the slot still taken.
            s.finish(ok, started)
        if not ok:
            self._send(500, {"error": {"message": "injected server error"}})
            return
        content = f"The answer looks reasonable.\nScore: {expected_score(user)}"
        self._send(200, {
            "id": "mock", "object": "chat.completion", "model": req.get("model", "mock"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(user) // 4, "completion_tokens": 12, "total_tokens": len(user) // 4 + 12},
        })


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="qworker mock-judge", description="An OpenAI-compatible mock judge on 127.0.0.1.")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--capacity", type=int, default=64, help="requests served at once; more get 429")
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per served request")
    ap.add_argument("--rpm", type=float, help="requests per minute (token bucket, 1 s burst); more get 429")
    ap.add_argument("--p-error", type=float, default=0.0, help="probability of an injected 500")
    ap.add_argument("--api-key-env", help="require the key in this environment variable")
    args = ap.parse_args(argv)
    import os

    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    server = MockJudge(port=args.port, capacity=args.capacity, latency_s=args.latency, rpm=args.rpm, p_error=args.p_error, api_key=key)
    print(f"mock judge on {server.url} (capacity {args.capacity}, latency {args.latency} s, rpm {args.rpm}); stats at /stats", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
