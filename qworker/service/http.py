"""HTTP protocols the RL frameworks already speak, served by ``qworker serve --http PORT --reward NAME``.

Every request is scored with one reward (or composite) named at start, with
its params from the config, through the service's producer:

``POST /get_reward``  OpenRLHF's remote reward model (``--reward.remote_url``):
    ``{"query": [...], "prompts": [...], "labels": [...]}`` ->
    ``{"rewards": [...], "scores": [...], "extra_logs": {...}}``.  A query is the
    prompt followed by the response, so the response is what follows the prompt.
``POST /`` or ``/score``  slime's ``--rm-url``: ``{"prompt", "response", "label"}``
    (or a list of such objects) -> ``{"score": s, ...extra}`` (or a list).  slime's
    ``remote_rm`` keeps the whole object as the reward: run slime with ``--reward-key score``.
``GET /health``  200 while the service has workers, else 503.

A failed task is never a silent 0: the whole request answers HTTP 502 with
``{"error": ..., "failed": [{"index", "error"}]}``: the framework's client sees an
error status (slime's ``remote_rm`` retries it with backoff, then raises).  Malformed requests answer 400 naming the problem.
Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .._exceptions import GatherTimeout, QworkerError
from .._producer import Producer
from ..integrations._payload import from_openrlhf

log = logging.getLogger("qworker")

__all__ = ["HttpFront", "openrlhf_payloads"]

MAX_BODY_BYTES = 64 * 1024 * 1024


class BadRequest(ValueError):
    pass


def openrlhf_payloads(body: Any) -> list[dict]:
    """OpenRLHF's ``{"query", "prompts", "labels"}`` as qworker payloads."""
    if not isinstance(body, dict) or not isinstance(body.get("query"), list):
        raise BadRequest('expected {"query": [...], "prompts": [...], "labels": [...]}')
    queries = body["query"]
    prompts = body.get("prompts") or [""] * len(queries)
    labels = body.get("labels") or [None] * len(queries)
    if not (isinstance(prompts, list) and isinstance(labels, list) and len(prompts) == len(labels) == len(queries)):
        raise BadRequest(f"query, prompts and labels must be lists of one length (got {len(queries)}, {len(prompts)}, {len(labels)})")
    out = []
    for i, (q, p, label) in enumerate(zip(queries, prompts, labels, strict=True)):
        if not isinstance(q, str) or not isinstance(p, str):
            raise BadRequest(f"query[{i}] and prompts[{i}] must be strings")
        out.append(from_openrlhf(q, p, label))  # as openrlhf_reward_func builds it: one hash, one cache entry
    return out


def _slime_payload(item: Any, where: str) -> dict:
    if not isinstance(item, dict) or not isinstance(item.get("response"), str):
        raise BadRequest(f'{where}: expected {{"prompt": ..., "response": ..., "label": ...}}')
    payload = {"prompt": item.get("prompt", ""), "response": item["response"]}
    if "label" in item:  # absent stays absent: a reward that needs it then says so
        payload["ground_truth"] = item["label"]
    for key in ("data_source", "extra_info", "response_length", "max_response_length"):
        if key in item:
            payload[key] = item[key]
    return payload


class HttpFront(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, producer: Producer, *, reward: str, port: int, host: str = "127.0.0.1", timeout_s: float = 600.0) -> None:
        super().__init__((host, port), _Handler)
        self.producer = producer
        self.reward = reward
        self.timeout_s = timeout_s

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> HttpFront:
        threading.Thread(target=self.serve_forever, name="qworker-http", daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def score(self, payloads: list[dict]) -> tuple[list[float], list[dict], list[dict]]:
        """(scores, extras, failures); raises ``QworkerError`` when the request cannot be scored at all."""
        results = self.producer.map(self.reward, payloads, timeout=self.timeout_s)
        failed = [{"index": i, "error": r.error} for i, r in enumerate(results) if not r.ok]
        return [r.score for r in results], [r.extra for r in results], failed


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HttpFront

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("qworker http: " + fmt, *args)

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") == "/health":
            workers = self.server.producer._dispatcher.workers_ready
            self._reply(200 if workers else 503, {"workers": workers, "reward": self.server.reward})
        else:
            self._reply(404, {"error": f"no route GET {self.path}; try POST /get_reward, POST /score or GET /health"})

    def do_POST(self) -> None:  # noqa: N802
        route = self.path.split("?", 1)[0].rstrip("/")
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                raise BadRequest(f"body of {length} bytes is over the {MAX_BODY_BYTES}-byte limit")
            try:
                body = json.loads(self.rfile.read(length) or b"null")
            except ValueError as exc:
                raise BadRequest(f"body is not JSON: {exc}") from None
            if route == "/get_reward":
                self._openrlhf(body)
            elif route in ("", "/score"):
                self._slime(body)
            else:
                self._reply(404, {"error": f"no route POST {self.path}; try /get_reward (OpenRLHF) or /score (slime)"})
        except BadRequest as exc:
            self._reply(400, {"error": str(exc)})
        except GatherTimeout as exc:
            self._reply(504, {"error": f"scoring did not finish: {exc}"})
        except QworkerError as exc:  # an unknown reward or bad params: the service's set-up, not the request
            self._reply(500, {"error": f"{type(exc).__name__}: {exc}"})

    def _failed(self, failed: list[dict], n: int) -> None:
        self._reply(502, {"error": f"{len(failed)} of {n} tasks failed; first: {failed[0]['error']}", "failed": failed})

    def _openrlhf(self, body: Any) -> None:
        payloads = openrlhf_payloads(body)
        scores, extras, failed = self.server.score(payloads)
        if failed:
            return self._failed(failed, len(payloads))
        logs: dict[str, list] = {}
        for extra in extras:  # numeric extras, one list per key, as OpenRLHF logs them
            for k, v in extra.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    logs.setdefault(k, []).append(v)
        logs = {k: v for k, v in logs.items() if len(v) == len(payloads)}
        self._reply(200, {"rewards": scores, "scores": scores, "extra_logs": logs})

    def _slime(self, body: Any) -> None:
        single = isinstance(body, dict)
        items = [body] if single else body
        if not isinstance(items, list):
            raise BadRequest('expected {"prompt", "response", "label"} or a list of them')
        payloads = [_slime_payload(item, f"item {i}") for i, item in enumerate(items)]
        scores, extras, failed = self.server.score(payloads)
        if failed:
            return self._failed(failed, len(payloads))
        out = [{**extra, "score": score} for score, extra in zip(scores, extras, strict=True)]
        self._reply(200, out[0] if single else out)
