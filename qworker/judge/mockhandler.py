"""The mock judge's HTTP side: one request at a time on a keep-alive connection (``mock.MockJudge`` holds the state).

``POST /v1/chat/completions`` asks the server to admit the request (capacity,
buckets, outages, prefix cache), waits its service time and answers as an
OpenAI-compatible judge, or refuses as providers do; ``GET /stats`` and ``GET
/metrics`` report; ``POST /admin/...`` changes the server at run time.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import struct
import time
from email.utils import formatdate
from hashlib import blake2b
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .mock import MockJudge

__all__ = ["Handler", "expected_score"]


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
                time.sleep(3600)
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
            s.finish(ok, started)
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
