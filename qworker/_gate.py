"""The producer's gate for calls to rate-limited endpoints (LLM judges).

A task of ``llm_judge`` does not go to a worker when a worker has credit: it
waits here until one of the judge's endpoints has room under its adaptive
limit (``_limiter``), its static caps (``max_concurrency``, ``rpm``, ``tpm``)
and any cooldown.  The gate then picks the endpoint with the most free
capacity (times its ``weight``) and the dispatcher sends the task with that
endpoint's index.  Every answer's outcome comes back here.  Because every
worker of every pool is fed by this one producer, an endpoint has one limit,
not one per process.

After an answer the gate decides:

=====================================  ===========================================
200                                    done (a reply with no score fails: ``bad_result``)
429, 503                               limit cut; ``Retry-After`` cools the endpoint down; retried
timeout                                limit cut; retried
connection refused/reset               endpoint down (probed after 0.5 s, doubling to 5 s); retried elsewhere
408, 409, other 5xx                    retried; 5 in a row take the endpoint down
401, 403                               endpoint down for 60 s; retried on another endpoint, else fails at once
other 4xx                              fails at once with the server's message
=====================================  ===========================================

A retried task waits in the queue for measured free capacity, on any
endpoint that is up: there is no blind sleep.  A task is retried after at
most ``max_attempts - 1`` errors, and after at most ``5 * max_attempts``
rate-limit refusals (429/503: expected while the limit is being found, and
they cost the judge nothing).  Only the dispatcher thread uses a gate.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional

from ._limiter import AdaptiveLimit
from ._pending import Pending

log = logging.getLogger("qworker")

__all__ = ["AUTH_FAILED_ERROR", "Gate", "JUDGE_REWARD", "ROUTING_KEYS", "hash_params", "identity"]

JUDGE_REWARD = "llm_judge"
# params that choose where and how a call is made, not what it scores: not part of the task hash
ROUTING_KEYS = frozenset({"endpoints", "timeout_s", "max_attempts", "ceiling", "initial_concurrency", "pool_size"})
DOWN_FIRST_S, DOWN_MAX_S, AUTH_DOWN_S = 0.5, 5.0, 60.0
ERROR_STREAK_DOWN = 5
JUDGE_KEYS = frozenset({
    "model", "endpoints", "prompt_template", "system_prompt", "rubric", "request", "score_pattern", "score_json_field",
    "score_max", "timeout_s", "pool_size", "max_attempts", "ceiling", "initial_concurrency",
})
ENDPOINT_KEYS = frozenset({"url", "api_key_env", "weight", "max_concurrency", "rpm", "tpm"})
THROTTLED_ATTEMPTS_FACTOR = 5  # a task may be refused 429/503 up to 5 x max_attempts times
AUTH_FAILED_ERROR = f"judge_error: every endpoint of this judge refused our credentials (401/403) within the last {AUTH_DOWN_S:.0f} s; not sent"


def hash_params(params: dict) -> dict:
    return {k: v for k, v in params.items() if k not in ROUTING_KEYS}


def identity(params: dict) -> str:
    return json.dumps([params.get("model"), params.get("endpoints"), params.get("ceiling")], sort_keys=True, default=str)


@dataclass(slots=True)
class _Bucket:
    """A token bucket: ``rate`` per second, holding at most ``rate`` (one second's worth)."""

    rate: float
    tokens: float = 0.0
    at: float = 0.0

    def level(self, now: float) -> float:
        self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return self.tokens

    def ready_at(self, need: float, now: float) -> float:
        lvl = self.level(now)
        return now if lvl >= need else now + (min(need, self.rate) - lvl) / self.rate


@dataclass(slots=True, eq=False)
class Endpoint:
    index: int
    url: str
    weight: float
    limit: AdaptiveLimit
    rpm: Optional[_Bucket]
    tpm: Optional[_Bucket]
    in_flight: int = 0
    cool_until: float = 0.0  # Retry-After
    down_until: float = 0.0  # down: nothing but one probe after this
    down_for: float = 0.0
    down_reason: str = ""
    probing: bool = False
    error_streak: int = 0
    counts: dict = field(default_factory=lambda: {"requests": 0, "ok": 0, "status_429": 0, "timeouts": 0, "connect_errors": 0, "other_errors": 0, "retries": 0})
    latencies: deque = field(default_factory=lambda: deque(maxlen=2048))

    def state(self, now: float) -> str:
        if self.down_reason:
            return "probing" if self.probing else f"down ({self.down_reason})"
        return "cooling" if now < self.cool_until else "up"

    def free(self, now: float, tokens: float) -> float:
        """Room for one more request now (0 when none)."""
        if self.down_reason:  # one probe, before anything else, once the down time is over
            return math.inf if (now >= self.down_until and not self.probing) else 0.0
        if now < self.cool_until:
            return 0.0
        if self.rpm is not None and self.rpm.level(now) < 1.0:
            return 0.0
        if self.tpm is not None and self.tpm.level(now) < min(tokens, self.tpm.rate):
            return 0.0
        return max(0.0, math.floor(self.limit.limit) - self.in_flight)

    def go_down(self, reason: str, now: float, for_s: Optional[float] = None) -> None:
        if not self.down_reason:
            log.warning("qworker: judge endpoint %s is down (%s); routing to the others, probing it again", self.url, reason)
        self.down_for = for_s or min(DOWN_MAX_S, max(DOWN_FIRST_S, 2 * self.down_for))
        self.down_until = now + self.down_for
        self.down_reason = reason
        self.probing = False

    def come_back(self) -> None:
        log.info("qworker: judge endpoint %s answered a probe and is back (was: %s)", self.url, self.down_reason)
        self.down_reason, self.down_for, self.probing, self.error_streak = "", 0.0, False, 0
        self.limit.reset()


class Gate:
    def __init__(self, params: dict) -> None:
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
        self.model = str(params.get("model"))
        self.max_attempts = int(params.get("max_attempts", 4))
        ceiling = float(params.get("ceiling", 512))
        initial = float(params.get("initial_concurrency", 32))
        req = params.get("request") or {}
        self.completion_tokens = int(req.get("max_tokens") or req.get("max_completion_tokens") or 256)
        self.endpoints = [
            Endpoint(
                i, e["url"], float(e.get("weight", 1.0)),
                AdaptiveLimit(initial=min(initial, e.get("max_concurrency") or ceiling), ceiling=float(e.get("max_concurrency") or ceiling)),
                _Bucket(e["rpm"] / 60.0) if e.get("rpm") else None,
                _Bucket(e["tpm"] / 60.0) if e.get("tpm") else None,
            )
            for i, e in enumerate(eps)
        ]
        self.queue: deque[Pending] = deque()

    def _tokens(self, p: Pending) -> float:
        return len(p.payload) / 4 + self.completion_tokens  # a rough estimate of the request's tokens

    # admission --------------------------------------------------------------
    def admit(self, now: float, budget: int) -> tuple[list[Pending], list[Pending]]:
        """(tasks to send now, each with ``route`` set; tasks to fail: no endpoint can ever take them)."""
        sent: list[Pending] = []
        queue = self.queue
        if queue and all(e.down_reason == "auth" and now < e.down_until for e in self.endpoints):
            failed = list(queue)
            queue.clear()
            return [], failed
        while queue and len(sent) < budget:
            p = queue[0]
            if p.resolved:
                queue.popleft()
                continue
            tokens = self._tokens(p)
            best, best_room = None, 0.0
            for e in self.endpoints:
                room = e.free(now, tokens) * e.weight
                if room > best_room:
                    best, best_room = e, room
            if best is None:
                break
            queue.popleft()
            if best.down_reason:
                best.probing = True
            if best.rpm is not None:
                best.rpm.tokens -= 1.0
            if best.tpm is not None:
                best.tpm.tokens -= tokens
            best.in_flight += 1
            best.counts["requests"] += 1
            p.route, p.routed_at = best.index, now
            sent.append(p)
        return sent, []

    def next_wake(self, now: float) -> Optional[float]:
        """When a cooldown, a probe or a token refill may let a queued task go."""
        if not self.queue:
            return None
        times = []
        for e in self.endpoints:
            if e.down_reason:
                times.append(e.down_until)
            elif now < e.cool_until:
                times.append(e.cool_until)
            else:
                if e.rpm is not None:
                    times.append(e.rpm.ready_at(1.0, now))
                if e.tpm is not None:
                    times.append(e.tpm.ready_at(self._tokens(self.queue[0]), now))
        future = [t for t in times if t > now]
        return min(future) if future else None

    # answers ----------------------------------------------------------------
    def forget(self, p: Pending) -> None:
        """A routed task came back unanswered (its worker was lost, or gave it back)."""
        if 0 <= p.route < len(self.endpoints):
            e = self.endpoints[p.route]
            e.in_flight = max(0, e.in_flight - 1)
            if e.probing:
                e.probing = False
        p.route = -1

    def settle(self, p: Pending, outcome: Optional[dict], error: Optional[str], now: float) -> bool:
        """Record a routed task's answer; True when the task should be retried."""
        e = self.endpoints[p.route] if 0 <= p.route < len(self.endpoints) else None
        p.route = -1
        if e is None:
            return False
        e.in_flight = max(0, e.in_flight - 1)
        if outcome is None:  # failed before any call (a bad payload): says nothing about the endpoint
            e.probing = False
            return False
        status, failure, latency = outcome.get("status", 0), outcome.get("failure", ""), float(outcome.get("latency_s", 0.0))
        in_flight = e.in_flight + 1
        retry = False
        if status == 200:
            e.counts["ok"] += 1
            e.latencies.append(latency)
            if e.down_reason:
                e.come_back()
            e.error_streak = 0
            e.limit.on_success(latency, in_flight, now)
        elif status in (429, 503):
            e.counts["status_429" if status == 429 else "other_errors"] += 1
            e.limit.on_drop(in_flight, now, sent_at=p.routed_at)
            after = outcome.get("retry_after_s")
            if after:
                e.cool_until = max(e.cool_until, now + min(float(after), 60.0))
            e.probing = False
            retry = True
        elif failure == "timeout":
            e.counts["timeouts"] += 1
            e.limit.on_drop(in_flight, now, sent_at=p.routed_at, timeout=True)
            e.probing = False
            retry = True
        elif failure == "connect":
            e.counts["connect_errors"] += 1
            e.go_down("unreachable", now)
            retry = True
        elif status in (401, 403):
            e.counts["other_errors"] += 1
            e.go_down("auth", now, AUTH_DOWN_S)
            retry = any(not x.down_reason for x in self.endpoints)
        elif status in (408, 409) or status >= 500:
            e.counts["other_errors"] += 1
            e.error_streak += 1
            if e.error_streak >= ERROR_STREAK_DOWN or e.down_reason:
                e.go_down(f"{e.error_streak} errors in a row", now)
            retry = True
        else:
            e.counts["other_errors"] += 1
            e.probing = False
        if not retry:
            return False
        if status in (429, 503):  # the limiter's business: these have a budget of their own
            p.throttled += 1
            if p.throttled >= THROTTLED_ATTEMPTS_FACTOR * self.max_attempts:
                return False
        else:
            if p.tries + 1 >= self.max_attempts:
                return False
            p.tries += 1
        e.counts["retries"] += 1
        return True

    # reporting --------------------------------------------------------------
    def snapshot(self, now: float) -> dict[str, Any]:
        eps = []
        for e in self.endpoints:
            lat = sorted(e.latencies)
            q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [lat[0] if lat else 0.0] * 99
            eps.append({
                "endpoint": e.index, "url": e.url, "model": self.model, "state": e.state(now), "in_flight": e.in_flight,
                "limit": round(e.limit.limit, 1), "weight": e.weight, **e.counts,
                "latency_p50_s": round(q[49], 4), "latency_p90_s": round(q[89], 4), "latency_p99_s": round(q[98], 4),
            })
        return {"model": self.model, "queued": len(self.queue), "endpoints": eps}
