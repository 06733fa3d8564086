"""``llm_judge``: score a response with an OpenAI-compatible chat-completions judge.

One call to one endpoint per task.  The producer's gate (``judge.control.gate``, this
reward's admission policy) chose the endpoint under that endpoint's adaptive
limit and hands its index in ``call.meta["endpoint"]`` (an ``EndpointCall``);
it decides what happens after a failure.  Every outcome goes back to it in
``call.outcome`` (or in the ``CallFailed`` raised), which the worker returns as
the result's meta, so the limit is one limit for all workers on all hosts.  Nothing here retries or sleeps.  The outcome's keys:

* ``endpoint`` (int), ``status`` (HTTP status, 0 when there was none),
  ``failure`` (``""``, ``"timeout"``, ``"connect"``: no connection could be
  made, ``"reset"``: the connection dropped mid-answer, ``"too_large"``: a body
  over ``judge.client.http.MAX_BODY_BYTES``, not retried), ``latency_s``;
* ``retry_after_s``: ``retry-after-ms``, ``Retry-After`` seconds or HTTP-date,
  in seconds, or ``None``;
* ``completion_tokens``: ``usage.completion_tokens`` of a 200 reply, or ``None``;
* ``ratelimit``: the provider's rate-limit headers, parsed by ``judge.client.ratelimit.rate_limits``
  (``{"requests": {"limit", "remaining", "reset_s"}, "tokens": {...}}``), or ``None``;
* ``bad_headers`` (only when there are some): ``{name: value}`` of the rate-limit
  and Retry-After headers ignored as unbelievable (``inf``, ``-1``, ``NaN``, ...).

Params (from the config's ``rewards: llm_judge:`` section, see ``configs/judge.yaml``; a judge it names
there, ``judge: NAME``, has been replaced by that judge's keys from the ``judges:`` section before a task is
made, by ``config.judges.expand``):

* ``model``, ``endpoints`` (``[{url, api_key_env, weight, max_concurrency, rpm, tpm}]``);
* ``prompt_template`` with ``{prompt}``, ``{response}``, ``{ground_truth}``,
  ``{rubric}`` (other braces are left alone), optional ``system_prompt``, ``rubric``;
* ``request``: more body fields, passed through (``temperature``,
  ``max_tokens``, ``response_format``, ...);
* ``score_pattern`` (a regex whose group 1 is the score; the last match wins) or
  ``score_json_field`` (the reply is JSON; a dotted path); ``score_max``:
  the score is ``parsed / score_max``, and must land in [0, 1];
* ``timeout_s``: wall clock per request; ``connections_per_host``: pooled connections.

Their defaults are ``judge.settings.JudgeSettings``'; its other settings (retries,
limits, routing) are the gate's, read in the producer, and not sent with the task.

A reply with no parsable score fails the task (``bad_result: ...``, the reply
in the message), it is never a 0.  API keys are read from the environment
variables named by ``api_key_env`` in the worker, sent only in the
``Authorization`` header, and removed (``redact``) from every text that is kept
or reported: error messages, the reply kept in ``extra["reply"]`` (and so in
the cache), in its raw, JSON-escaped (``\\/``, ``\\uXXXX``) and URL-encoded
forms, always before any truncation.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
import urllib.parse
from typing import Any, Optional

from .._exceptions import CallFailed
from ..judge.client import http as _http
from ..judge.client import ratelimit as _ratelimit
from ..judge.prompt import DEFAULT_TEMPLATE, render
from ..judge.settings import JudgeSettings
from ..registry.registry import EndpointCall, reward

__all__ = ["llm_judge", "render", "parse_score", "redact", "DEFAULT_TEMPLATE"]

DEFAULT_PATTERN = r"Score:\s*([-+]?\d+(?:\.\d+)?)"
MAX_SHOWN = 300
_DEFAULTS = JudgeSettings()
MAX_SNIPPET = 120  # characters of a reply that is not JSON shown in its error


def parse_score(reply: str, *, pattern: Optional[str], json_field: Optional[str], score_max: float) -> float:
    """The normalised score in ``reply``; raises ``ValueError`` naming what was missing."""
    if json_field:
        try:
            value: Any = json.loads(reply)
            for part in json_field.split("."):
                value = value[part]
            raw = float(value)
        except (ValueError, KeyError, TypeError, IndexError):
            raise ValueError(f"judge reply has no number at JSON field {json_field!r}: {reply[:MAX_SHOWN]!r}") from None
    else:
        found = re.findall(pattern or DEFAULT_PATTERN, reply)
        if not found:
            raise ValueError(f"judge reply has no score matching {pattern or DEFAULT_PATTERN!r}: {reply[:MAX_SHOWN]!r}")
        last = found[-1]
        raw = float(last[0] if isinstance(last, tuple) else last)
    score = raw / score_max
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"judge score {raw} is outside [0, {score_max}]: {reply[:MAX_SHOWN]!r}")
    return score


@functools.lru_cache(maxsize=16)  # every 200 reply is redacted twice: the forms are worked out once per key
def _forms(secret: str) -> tuple[str, ...]:
    """The ways a key can appear in a server's text: as is, JSON-escaped, slash-escaped, URL-encoded."""
    json_escaped = json.dumps(secret, ensure_ascii=False)[1:-1]
    ascii_escaped = json.dumps(secret, ensure_ascii=True)[1:-1]
    forms = {secret, json_escaped, ascii_escaped, json_escaped.replace("/", "\\/"), json_escaped.replace("/", "\\u002f"),
             json_escaped.replace("/", "\\u002F"), urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    return tuple(sorted((f for f in forms if f), key=len, reverse=True))  # the longest first: no form hides inside another's stars


def redact(text: str, secret: Optional[str]) -> str:
    """``text`` with every form of ``secret`` (see ``_forms``) replaced by ``***``.  Call before truncating."""
    if not secret or not text:
        return text
    for form in _forms(secret):
        text = text.replace(form, "***")
    return text


def _completion_tokens(doc: Any) -> Optional[int]:
    try:
        n = doc["usage"]["completion_tokens"]
    except (KeyError, TypeError, IndexError):
        return None
    return int(n) if isinstance(n, (int, float)) and 0 <= n <= 1e9 else None  # (json reads 1e400 as inf; NaN fails both)


@reward("llm_judge", kind="io", admission="qworker.judge.control.registry:JudgeGates")
def llm_judge(
    payload: dict,
    *,
    model: str,
    endpoints: list,
    call: Optional[EndpointCall] = None,
    prompt_template: str = DEFAULT_TEMPLATE,
    system_prompt: Optional[str] = None,
    rubric: str = "",
    request: Optional[dict] = None,
    score_pattern: Optional[str] = None,
    score_json_field: Optional[str] = None,
    score_max: float = 10.0,
    timeout_s: float = _DEFAULTS.timeout_s,
    connections_per_host: int = _DEFAULTS.connections_per_host,
) -> dict:
    if call is None:
        raise ValueError("llm_judge runs only as routed by a producer's judge gate (it was given no endpoint)")
    if not isinstance(payload, dict):
        raise ValueError(f"llm_judge needs a payload object, got {type(payload).__name__}")
    index = int(call.meta["endpoint"])
    ep = endpoints[index]
    url = ep["url"]
    secret = None
    headers = {"Content-Type": "application/json"}
    outcome: dict = {"endpoint": index, "status": 0, "failure": "", "latency_s": 0.0, "retry_after_s": None,
                     "completion_tokens": None, "ratelimit": None}
    call.outcome = outcome  # filled in below; the worker returns it to the gate
    env = ep.get("api_key_env")
    if env:
        secret = os.environ.get(env)
        if not secret:  # to the gate, like a 401: this endpoint cannot be used from here
            outcome["status"] = 401
            raise CallFailed(f"endpoint {index} ({url}): environment variable {env} is not set in this worker", outcome=outcome)
        headers["Authorization"] = f"Bearer {secret}"
    messages = [{"role": "user", "content": render(prompt_template, payload, rubric)}]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": system_prompt})
    body = json.dumps({**(request or {}), "model": model, "messages": messages}).encode()
    t0 = time.monotonic()
    try:
        reply = _http.post(url, body, headers, deadline=t0 + timeout_s, connections_per_host=connections_per_host)
    except _http.Deadline as exc:
        outcome.update(failure="timeout", latency_s=time.monotonic() - t0)
        raise CallFailed(redact(f"endpoint {index} ({url}): {exc} (timeout_s={timeout_s})", secret), outcome=outcome) from None
    except _http.ConnectFailed as exc:
        outcome.update(failure=exc.kind, latency_s=time.monotonic() - t0)
        raise CallFailed(redact(f"endpoint {index} ({url}): {exc}", secret), outcome=outcome) from None
    wall = time.time()
    bad: dict = {}  # headers whose values are not believable (the gate reports them once per endpoint)
    outcome.update(status=reply.status, latency_s=reply.latency_s, retry_after_s=_ratelimit.retry_after(reply.headers, wall, bad),
                   ratelimit=_ratelimit.rate_limits(reply.headers, wall, bad))
    if bad:
        outcome["bad_headers"] = {k: redact(str(v), secret)[:80] for k, v in bad.items()}
    text = redact(reply.body.decode("utf-8", "replace"), secret)  # before anything is cut, parsed or kept
    if reply.status != 200:
        raise CallFailed(redact(f"endpoint {index} ({url}): HTTP {reply.status}: ", secret) + text[:MAX_SHOWN], outcome=outcome)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        ctype = reply.headers.get("content-type") or "none given"
        snippet = " ".join(text[:MAX_SNIPPET].split()) + ("..." if len(text) > MAX_SNIPPET else "")
        raise CallFailed(f"endpoint {index} ({url}): the reply is not JSON ({exc}; Content-Type {ctype}, "
                         f"{len(reply.body)} bytes): {snippet!r}", outcome=outcome, kind="bad_result") from None
    try:
        outcome["completion_tokens"] = _completion_tokens(doc)
        content = redact(doc["choices"][0]["message"]["content"] or "", secret)  # JSON-decoding may have unescaped a key
        score = parse_score(content, pattern=score_pattern, json_field=score_json_field, score_max=score_max)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        detail = str(exc) if isinstance(exc, ValueError) else f"not a chat completion ({type(exc).__name__}): {text[:MAX_SHOWN]!r}"
        raise CallFailed(f"endpoint {index}: {detail}", outcome=outcome, kind="bad_result") from None
    return {"score": score, "reply": content}
