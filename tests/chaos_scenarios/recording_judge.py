"""A mock judge that counts every answer per prompt (and can echo the caller's key), and judge configs and rows."""

from __future__ import annotations

import io
import json
import threading
import time
from collections import Counter
from typing import Any, Optional

from qworker.testing.mockjudge import Handler, MockJudge


class _RecordingHandler(Handler):
    server: RecordingJudge

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            self._user = [m["content"] for m in json.loads(body)["messages"] if m.get("role") == "user"][-1]
        except (ValueError, KeyError, IndexError, TypeError):
            self._user = None
        rfile, self.rfile = self.rfile, io.BytesIO(body)  # the mock reads the body again
        try:
            super().do_POST()
        finally:
            self.rfile = rfile

    def _send(self, status: int, body: object, headers: Optional[dict] = None, content_type: str = "application/json") -> None:
        s = self.server
        user = getattr(self, "_user", None)
        if status == 200 and user is not None and isinstance(body, dict):
            with s.lock:
                s.answers.append((time.monotonic(), user))
            if s.echo_key:  # a provider quoting the request: the key raw, and JSON-escaped, in the reply
                key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                msg = body["choices"][0]["message"]
                msg["content"] = f"Judging with {key} (escaped: {key.replace('/', chr(92) + '/')}).\n{msg['content']}"
                body = json.dumps(body).replace("/", "\\/")  # and every '/' of the JSON text escaped, as PHP does
        elif status == 401 and s.echo_key:  # the key echoed in the error, JSON-escaped slashes and all
            key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            body = '{"error": {"message": "Incorrect API key provided: ' + key.replace("/", "\\/") + '", "type": "invalid_request_error"}}'
        super()._send(status, body, headers, content_type)


class RecordingJudge(MockJudge):
    """``MockJudge`` that records (monotonic time, prompt) of every 200 it sends;
    with ``echo_key``, it quotes the caller's key in 200 replies and in 401 bodies."""

    def __init__(self, *, echo_key: bool = False, **kw: Any) -> None:
        super().__init__(**kw)
        self.RequestHandlerClass = _RecordingHandler
        self.echo_key = echo_key
        self.answers: list[tuple[float, str]] = []

    def answered(self, since: float = 0.0, until: float = float("inf")) -> Counter:
        with self.lock:
            return Counter(u for t, u in self.answers if since <= t < until)

    def stop_soon(self) -> None:
        """Stop without waiting for handler threads that hang on purpose."""
        threading.Thread(target=self.stop, daemon=True).start()


def judge_config(*endpoints: dict, **params: Any) -> dict:
    return {"rewards": {"llm_judge": {"model": "m", "endpoints": list(endpoints), "timeout_s": 10, **params}}}


def judge_rows(n: int, tag: str) -> list[dict]:
    return [{"prompt": f"q-{tag}-{i}", "response": f"a{i}", "ground_truth": "g"} for i in range(n)]

