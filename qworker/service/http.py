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

A failed task is never a silent 0.  With ``on_failure="error"`` (the default) the
whole request answers HTTP 502 with ``{"error": ..., "failed": [{"index", "error"}]}``:
the framework's client sees an error status (slime's ``remote_rm`` and OpenRLHF
retry it, then raise).  With ``on_failure="fallback"`` (``--on-failure fallback``)
a failed sample scores the producer's ``fallback_score`` and is flagged:
``extra_logs["qworker_failed"]`` is 1.0 for it (0.0 for the others; OpenRLHF logs
the mean), slime's object carries ``"qworker_failed": 1.0`` and ``"qworker_error"``.

A query that does not start with its prompt, even ignoring whitespace and
special tokens (``split_query``), fails that sample (``bad_payload``) unless
``whole_query`` (``--whole-query``) scores it whole, logged.

A body that is not ``application/json`` (when a Content-Type is given) answers
415; a malformed one (not JSON, a missing ``query``/``prompts``/``labels`` list,
lists of different lengths) 400 naming the problem.  Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union

from .._errors import ErrorKind
from .._exceptions import ConfigError, GatherTimeout, QworkerError
from ..engine.producer import Producer
from ..engine.result import Result
from ..integrations._outcome import FAILED_KEY, failure_keys
from ..integrations._payload import PromptMismatch, from_openrlhf
from ..registry.catalog import Composite, Plain

log = logging.getLogger("qworker")

__all__ = ["HttpFront", "ON_FAILURE", "check_http_reward", "openrlhf_payloads"]

ON_FAILURE = ("error", "fallback")  # a failed sample fails the request (502), or scores the fallback score, flagged

MAX_BODY_BYTES = 64 * 1024 * 1024


class BadRequest(ValueError):
    pass


def check_http_reward(target: Union[Plain, Composite]) -> None:
    """``ConfigError`` when the reward (or a component of the composite) needs a length that HTTP requests do
    not carry: OpenRLHF's ``/get_reward`` and slime's ``/score`` send text only, with no ``response_length``
    or ``max_response_length``, so ``length_penalty`` needs ``unit: chars`` and its ``max_len`` in its params
    (``unit: auto`` would read a ``max_len`` meant in tokens as characters)."""
    parts = [(f"component {c.name!r} of {target.name!r}", c.task) for c in target.components] \
        if isinstance(target, Composite) else [(f"reward {target.reward!r}", target)]
    for what, plain in parts:
        if plain.reward != "length_penalty":
            continue
        unit = plain.params.get("unit", "auto")
        if unit != "chars" or plain.params.get("max_len") is None:
            # unit auto would measure characters against a max_len meant in tokens: a silently wrong penalty
            raise ConfigError(
                f"{what} is length_penalty with {'no max_len' if plain.params.get('max_len') is None else f'unit {unit}'}, "
                "but HTTP requests (OpenRLHF, slime) carry no token counts or max_response_length: give it params "
                "{unit: chars, max_len: N, buffer_len: M} in characters (configs/rewards.yaml's math_shaped_chars does)")


def openrlhf_payloads(body: Any, *, whole_query: bool = False) -> list[Union[dict, str]]:
    """OpenRLHF's ``{"query", "prompts", "labels"}`` as qworker payloads; a sample whose query does not
    start with its prompt is its error (a string) instead."""
    shape = '{"query": [...], "prompts": [...], "labels": [...]}'
    if not isinstance(body, dict):
        raise BadRequest(f"expected {shape}")
    missing = [k for k in ("query", "prompts", "labels") if not isinstance(body.get(k), list)]
    if missing:
        raise BadRequest(f"expected {shape}: {', '.join(missing)} missing or not a list")
    queries, prompts, labels = body["query"], body["prompts"], body["labels"]
    if not len(prompts) == len(labels) == len(queries):
        raise BadRequest(f"query, prompts and labels must be lists of one length (got {len(queries)}, {len(prompts)}, {len(labels)})")
    out: list[Union[dict, str]] = []
    for i, (q, p, label) in enumerate(zip(queries, prompts, labels, strict=True)):
        if not isinstance(q, str) or not isinstance(p, str):
            raise BadRequest(f"query[{i}] and prompts[{i}] must be strings")
        try:
            out.append(from_openrlhf(q, p, label, whole_query=whole_query))  # as openrlhf_reward_func builds it: one hash
        except PromptMismatch as exc:
            out.append(ErrorKind.BAD_PAYLOAD.error(f"query[{i}]: {exc}"))
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

    def __init__(self, producer: Producer, *, reward: str, port: int, host: str = "127.0.0.1", timeout_s: float = 600.0,
                 on_failure: str = "error", whole_query: bool = False) -> None:
        if on_failure not in ON_FAILURE:
            raise ValueError(f"on_failure must be one of {ON_FAILURE}, got {on_failure!r}")
        super().__init__((host, port), _Handler)
        self.producer = producer
        self.reward = reward
        self.timeout_s = timeout_s
        self.on_failure = on_failure
        self.whole_query = whole_query

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

    def score(self, payloads: list[Union[dict, str]]) -> list[Result]:
        """One result per payload (a string is that sample's error); raises ``QworkerError`` when the request
        cannot be scored at all."""
        good = [p for p in payloads if isinstance(p, dict)]
        scored = iter(self.producer.map(self.reward, good, timeout=self.timeout_s) if good else [])
        fallback = self.producer.fallback_score
        return [next(scored) if isinstance(p, dict) else Result(score=fallback, error=p) for p in payloads]


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
            ctype = (self.headers.get("Content-Type") or "application/json").split(";", 1)[0].strip().lower()
            if ctype != "application/json" and not ctype.endswith("+json"):
                self.close_connection = True  # the body is not read
                return self._reply(415, {"error": f"Content-Type {ctype!r}: send the body as application/json"})
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

    def _failed(self, results: list[Result]) -> bool:
        """Answer 502 and return True when a sample failed and the mode is "error"."""
        failed = [{"index": i, "error": r.error} for i, r in enumerate(results) if not r.ok]
        if not failed or self.server.on_failure != "error":
            return False
        self._reply(502, {"error": f"{len(failed)} of {len(results)} tasks failed; first: {failed[0]['error']}", "failed": failed})
        return True

    def _openrlhf(self, body: Any) -> None:
        results = self.server.score(openrlhf_payloads(body, whole_query=self.server.whole_query))
        if self._failed(results):
            return
        scores = [r.score for r in results]
        logs: dict[str, list] = {}
        for r in results:  # numeric extras, one list per key, as OpenRLHF logs them
            for k, v in r.extra.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    logs.setdefault(k, []).append(v)
        logs = {k: v for k, v in logs.items() if len(v) == len(results)}
        if self.server.on_failure == "fallback":
            logs[FAILED_KEY] = [failure_keys(r)[FAILED_KEY] for r in results]
        self._reply(200, {"rewards": scores, "scores": scores, "extra_logs": logs})

    def _slime(self, body: Any) -> None:
        single = isinstance(body, dict)
        items = [body] if single else body
        if not isinstance(items, list):
            raise BadRequest('expected {"prompt", "response", "label"} or a list of them')
        payloads: list[Union[dict, str]] = [_slime_payload(item, f"item {i}") for i, item in enumerate(items)]
        results = self.server.score(payloads)
        if self._failed(results):
            return
        fallback = self.server.on_failure == "fallback"
        out = [{**r.extra, **(failure_keys(r) if fallback else {}), "score": r.score} for r in results]
        self._reply(200, out[0] if single else out)
