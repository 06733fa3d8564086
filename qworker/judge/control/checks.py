"""Checking what a judge's config and its servers say, before the gate believes it.

* ``check(params)``: the ``llm_judge`` params at start: known keys (a typo must
  not fall back to a default), a model, endpoints, and every number in bounds
  (``PARAM_BOUNDS``: ``JudgeAsk``'s and ``JudgeSettings``' own; ``ENDPOINT_BOUNDS``: finite, positive where 0 means
  nothing, durations up to a day, rates up to 1e9 a minute); else a
  ``ConfigError`` naming the key and its value.
* ``screen(endpoint, outcome)``: the Retry-After and rate limits of one
  answer, less any value that is not believable (a worker's parser,
  ``ratelimit``, already drops them and names them in ``bad_headers``; this
  holds whatever the worker).  Each offending header is logged once per
  endpoint, not once per reply.
"""

from __future__ import annotations

import logging
import math
from typing import Optional

from ..._exceptions import ConfigError
from ..client.http import url_problem
from ..client.ratelimit import MAX_DELAY_S, MAX_PER_MINUTE
from ..settings import JudgeAsk, JudgeSettings, param_names
from .endpoint import Endpoint
from .routing import ROUTINGS

log = logging.getLogger("qworker")

__all__ = ["ENDPOINT_BOUNDS", "ENDPOINT_KEYS", "JUDGE_KEYS", "PARAM_BOUNDS", "check", "measured", "screen"]

JUDGE_KEYS = param_names()
ENDPOINT_KEYS = frozenset({"url", "api_key_env", "weight", "max_concurrency", "rpm", "tpm", "metrics_url", "priority"})

def check(params: dict) -> None:
    """Judge params as the gate reads them: known keys, a model, endpoints, numbers in bounds (``ValueError``/``ConfigError``)."""
    unknown = set(params) - JUDGE_KEYS
    if unknown:  # a typo must not silently fall back to a default
        raise ValueError(f"unknown param(s) {sorted(unknown)}; known: {', '.join(sorted(JUDGE_KEYS))}")
    if not isinstance(params.get("model"), str):
        raise ValueError("needs 'model', the judge model's name")
    eps = params.get("endpoints")
    if not isinstance(eps, list) or not eps or not all(isinstance(e, dict) and isinstance(e.get("url"), str) for e in eps):
        raise ValueError("needs 'endpoints': a non-empty list of {url: ..., ...}")
    for i, e in enumerate(eps):
        if set(e) - ENDPOINT_KEYS:
            raise ValueError(f"endpoints[{i}]: unknown key(s) {sorted(set(e) - ENDPOINT_KEYS)}; known: {', '.join(sorted(ENDPOINT_KEYS))}")
        for key in ("url", "metrics_url"):
            problem = url_problem(str(e[key])) if e.get(key) else None
            if problem:
                raise ValueError(f"endpoints[{i}].{key} = {e[key]!r}: {problem}")
        for key, bounds in ENDPOINT_BOUNDS.items():
            _check_number(e, key, *bounds, where=f"endpoints[{i}].")
    for key, bounds in PARAM_BOUNDS.items():
        _check_number(params, key, *bounds)
    routing = params.get("routing")
    if routing is not None and routing not in ROUTINGS:
        raise ConfigError(f"routing = {routing!r}: must be one of {', '.join(ROUTINGS)}")
    coordinate = params.get("coordinate")
    if coordinate is not None and not isinstance(coordinate, bool):
        raise ConfigError(f"coordinate = {coordinate!r}: must be true or false")
    req = params.get("request")
    if req is not None and not isinstance(req, dict):
        raise ConfigError(f"request = {req!r}: must be a mapping of request body fields")
    for key in ("max_tokens", "max_completion_tokens"):
        _check_number(req or {}, key, 1, 10**7, True, where="request.")


# (low, high, integer, low excluded): a number outside is a ConfigError at start, naming the key and value
PARAM_BOUNDS: dict[str, tuple[float, float, bool, bool]] = {**JudgeSettings.bounds(), **JudgeAsk.bounds()}
ENDPOINT_BOUNDS: dict[str, tuple[float, float, bool, bool]] = {
    "weight": (0.0, 1e6, False, True), "max_concurrency": (1, 1e6, True, False),
    "rpm": (0.0, MAX_PER_MINUTE, False, True), "tpm": (0.0, MAX_PER_MINUTE, False, True),
    "priority": (-1000, 1000, True, False),
}


def _check_number(params: dict, key: str, lo: float, hi: float, integer: bool = False, open_low: bool = False, where: str = "") -> None:
    """``params[key]``, when given (not None), is a finite number in its bounds; else a ``ConfigError`` naming it."""
    value = params.get(key)
    if value is None:
        return
    kind = "a whole number" if integer else "a number"
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and integer:
        ok = float(value).is_integer()
    if ok and not ((lo < value if open_low else lo <= value) and value <= hi):
        ok = False
    if not ok:
        low = f"> {lo:g}" if open_low else f">= {lo:g}"
        raise ConfigError(f"{where}{key} = {value!r}: must be {kind} {low} and <= {hi:g}")


_RATELIMIT_BOUNDS = {"limit": (1.0, MAX_PER_MINUTE), "remaining": (0.0, MAX_PER_MINUTE), "reset_s": (0.0, MAX_DELAY_S)}


def _within(x: object, lo: float, hi: float) -> bool:
    """``x`` is a finite number (not a bool) in [lo, hi]."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and lo <= x <= hi


MAX_TOKENS = 10**9  # a reply's completion tokens beyond this are not believed


def measured(outcome: dict) -> dict:
    """``outcome`` less a ``latency_s`` (seconds) or ``completion_tokens`` that is not a believable measurement.

    The worker measures both, but they cross a socket as plain numbers: a NaN
    latency would stay in the limiter's average for good, and a zero or
    negative one would read as a call that spent no time at the server.  What
    is dropped reads as not measured.
    """
    latency, tokens = outcome.get("latency_s"), outcome.get("completion_tokens")
    keep_latency = latency is None or _within(latency, 0.0, MAX_DELAY_S)
    keep_tokens = tokens is None or (isinstance(tokens, int) and not isinstance(tokens, bool) and 0 <= tokens <= MAX_TOKENS)
    if keep_latency and keep_tokens:
        return outcome
    out = dict(outcome)
    if not keep_latency:
        out.pop("latency_s")
    if not keep_tokens:
        out.pop("completion_tokens")
    return out


def screen(e: Endpoint, outcome: dict) -> tuple[Optional[float], Optional[dict]]:
    """The outcome's Retry-After and rate limits, less any value that is not believable (``judge.client.ratelimit``'s bounds).

    A worker's parser already drops them (and lists them in ``bad_headers``); this
    holds for any worker.  Each offending header is logged once per endpoint.
    """
    bad = dict(outcome.get("bad_headers") or {})
    after = outcome.get("retry_after_s")
    if after is not None and not _within(after, 0.0, MAX_DELAY_S):
        bad["retry-after"], after = after, None
    ratelimit: Optional[dict] = None
    for kind, fam in (outcome.get("ratelimit") or {}).items():
        if not isinstance(fam, dict):
            continue
        kept = {}
        for key, value in fam.items():
            lo, hi = _RATELIMIT_BOUNDS.get(key, (0.0, -1.0))
            if _within(value, lo, hi):
                kept[key] = value
            else:
                bad[f"{kind} {key}"] = value
        if kept:
            ratelimit = ratelimit or {}
            ratelimit[kind] = kept
    for name, value in bad.items():
        if name not in e.warned_headers:
            e.warned_headers.add(name)
            log.warning("qworker: judge endpoint %s sent %s: %r, not a believable value; ignored "
                        "(this warning is given once per endpoint and header)", e.url, name, value)
    return after, ratelimit

