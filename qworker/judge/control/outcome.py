"""What one answer says about its endpoint: counts, the limit, health, cooldowns (the table atop ``gate``).

``classify`` is the gate's, called from ``Gate.settle`` on the dispatcher
thread after the refusal streak is counted; it says whether the task is tried
again, and when a task must wait before its next try (``Verdict.park_until``).
Units: seconds (the gate's clock), requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .call import JudgeCall
from .endpoint import Endpoint

__all__ = ["AUTH_DOWN_S", "MAX_RETRY_AFTER_S", "Verdict", "classify"]

AUTH_DOWN_S = 60.0
ERROR_STREAK_DOWN = 5
MAX_RETRY_AFTER_S = 60.0
STREAK_COOL_FIRST_S, STREAK_COOL_MAX_S = 0.1, 1.0  # a streak of refusals without Retry-After cools the endpoint this long, doubling
SHORT_RETRY_AFTER = 0.25  # an exact Retry-After up to this fraction of a round trip holds the whole endpoint


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the task goes again, and the earliest time it may (None: as the gate's retry rules say)."""

    again: bool
    park_until: Optional[float] = None


AGAIN, DONE = Verdict(True), Verdict(False)


def classify(e: Endpoint, endpoints: list[Endpoint], p: JudgeCall, status: int, failure: str, latency: float, after: Optional[float],
             refused: bool, in_flight: float, level: float, outcome: dict, ratelimit: Optional[dict], now: float, *,
             dead_after_s: float, error_budget: float) -> Verdict:
    """Record an answer's meaning on ``e`` (one of ``endpoints``); ``in_flight``: every producer's requests at the server now, this one included (``Endpoint.total_at_server``)."""
    park = None
    if status == 200:
        e.counts["ok"] += 1
        e.latencies.append(latency)
        if e.down_reason and p.routed_at >= e.down_since:  # a probe: an answer to a request sent before it went down is old news
            e.come_back()
        e.error_streak, e.streak_cools = 0, 0
        e.limit.on_success(latency, in_flight, now, level=level or in_flight, tokens=outcome.get("completion_tokens"))
        return DONE
    if refused:
        e.counts["status_429" if status == 429 else "other_errors"] += 1
        e.limit.on_drop(in_flight, now, sent_at=p.routed_at)
        e.probing = False
        rl = (ratelimit or {}).get("requests") or {}
        if rl.get("remaining") == 0:  # the quota says the whole endpoint is out
            rate = rl["limit"] / 60.0 if rl.get("limit") else 1.0
            e.cool(now + min(MAX_RETRY_AFTER_S, after if after is not None else 1.0 / rate), "quota spent")
        elif after is not None and after != int(after) and after <= SHORT_RETRY_AFTER * e.limit.rtt:  # rtt 0 (no answer yet): never
            # Exact (not whole seconds) and short: when the server's next slot or token comes
            # (a token bucket's next refill).  Sending before then is refused too.
            e.cool(now + after, "retry-after")
        elif e.refusal_streak >= max(8, e.limit.limit / 2) and p.routed_at - e.streak_since >= (e.limit.rtt or 0.05):
            # Refused across the board (an outage, or an overload the limit did not answer), a request sent a round
            # trip after the streak began included (when the capacity drops, the requests in flight are refused
            # for about a round trip; those sent after are answered): the whole endpoint waits, for the shortest
            # Retry-After of the streak, else 0.1 s doubling to 1 s; then one probe.
            wait = e.streak_retry_s if e.streak_retry_s < math.inf else min(STREAK_COOL_MAX_S, STREAK_COOL_FIRST_S * 2**e.streak_cools)
            e.streak_cools += 1
            e.cool(now + min(MAX_RETRY_AFTER_S, wait), f"{e.refusal_streak} refusals in a row")
            if after is None:  # the next probe is another task: the refusals of an outage are spread, not one task's
                park = now + 2 * min(MAX_RETRY_AFTER_S, wait)
            if now - e.streak_since >= dead_after_s and now >= e.streak_due:
                # Refusing everything for that long, and past the time its Retry-Afters named (a per-minute quota
                # spent until the minute ends is not a dead endpoint): down, and dead_after_s applies
                e.go_down(f"refused every request for {now - e.streak_since:.0f} s", now)
        return Verdict(True, park)
    if failure == "timeout":
        e.counts["timeouts"] += 1
        # A request that hangs now and then says nothing about load (the latency statistics see a
        # server that queues); timeouts cut the limit only when errors are over the budget.
        if e.error_share() > error_budget:
            e.limit.on_drop(in_flight, now, sent_at=p.routed_at, timeout=True)
        e.probing = False
        return AGAIN
    straggler = bool(e.down_reason) and p.routed_at < e.down_since  # sent before it went down: already counted
    if failure == "connect":
        e.counts["connect_errors"] += 1
        if not straggler:
            e.go_down("unreachable", now)
        return AGAIN
    if status in (401, 403):
        e.counts["other_errors"] += 1
        e.go_down("auth", now, AUTH_DOWN_S)
        return AGAIN if any(not x.down_reason for x in endpoints) else DONE
    if failure == "reset" or status in (408, 409) or status >= 500:
        e.counts["other_errors"] += 1
        e.error_streak += 1
        if (e.error_streak >= ERROR_STREAK_DOWN or e.down_reason) and not straggler:
            e.go_down(f"{e.error_streak} errors in a row", now)
        return AGAIN
    e.counts["other_errors"] += 1
    e.probing = False
    return DONE
