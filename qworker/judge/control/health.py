"""One judge endpoint's health: refusal streaks, outages, cooldowns, the error budget, answer counts.

A ``Health`` is fed one answer at a time (``observe``, with the answer's
``outcome.Kind`` from ``outcome.classify``) and returns a ``Verdict``: whether
the task goes again, when it may, whether the endpoint came back (the gate then
resets its limit) and whether the answer cuts the limit.  It owns every field
below and nothing else writes them; it reads the endpoint's limiter (its limit
and round trip) and never writes it.  Owned by the dispatcher thread.  Units:
seconds on the gate's clock, requests.

States: up; cooling (``cool_until``: the whole endpoint waits, only when the
evidence says all of it is out); down (``down_reason``: nothing but one probe
after ``down_until``, the wait doubling from ``DOWN_FIRST_S`` to ``down_max_s``);
probing (down, its one probe in flight).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass
from typing import Optional, Protocol

from .outcome import AUTH_DOWN_S, ERROR_STREAK_DOWN, MAX_RETRY_AFTER_S, SHORT_RETRY_AFTER, Answer, Kind, Verdict

log = logging.getLogger("qworker")

__all__ = ["DOWN_FIRST_S", "DOWN_MAX_S", "ERROR_WINDOW", "Health"]

DOWN_FIRST_S, DOWN_MAX_S = 0.5, 5.0
ERROR_WINDOW = 200  # answers in the error budget's window
STREAK_COOL_FIRST_S, STREAK_COOL_MAX_S = 0.1, 1.0  # a streak of refusals without Retry-After cools the endpoint this long, doubling


class LimitView(Protocol):
    """What health reads of the endpoint's limiter (``limiter.AdaptiveLimit``)."""

    limit: float
    rtt: float


@dataclass(slots=True)
class _Streak:
    """Refusals with no other answer between them (an answer to a request sent before the streak began does not end it)."""

    count: int = 0
    since: float = math.inf  # when its first refusal came
    cools: int = 0  # coolings for it without Retry-After since the last success
    retry_s: float = math.inf  # its shortest Retry-After
    promised: float = 0.0  # the latest time one of its refusals said to come back
    due: float = 0.0  # the same, over its refusals before the last one

    def add(self, now: float, after: Optional[float]) -> None:
        if not self.count:
            self.since = now
        self.count += 1
        if after is not None:
            self.retry_s = min(self.retry_s, after)
        self.due = self.promised
        if after is not None:
            self.promised = max(self.promised, now + min(float(after), MAX_RETRY_AFTER_S))

    def end(self) -> None:
        self.count, self.retry_s, self.since, self.promised, self.due = 0, math.inf, math.inf, 0.0, 0.0


class Health:
    """An endpoint's health, fed one answer at a time (``observe``); ``limiter``: read for its limit and round trip."""

    def __init__(self, *, url: str, limiter: LimitView, error_budget: float, dead_after_s: float,
                 down_max_s: float = DOWN_MAX_S) -> None:
        self.url = url
        self._limiter = limiter
        self.error_budget, self.dead_after_s, self.down_max_s = error_budget, dead_after_s, down_max_s
        self.cool_until, self.cool_reason = 0.0, ""
        self.down_reason = ""  # "" while up
        self.down_until = self.down_for = self.down_since = 0.0
        self.probing = False  # down, and its one probe is in flight
        self.error_streak = 0
        self.streak = _Streak()
        self.errors: deque[bool] = deque(maxlen=ERROR_WINDOW)  # per answer: True for a 5xx, reset or 408
        self.last_error = ""
        self.counts = {"requests": 0, "ok": 0, "status_429": 0, "timeouts": 0, "connect_errors": 0, "other_errors": 0, "retries": 0}
        self.latencies: deque[float] = deque(maxlen=2048)  # served answers' latencies (seconds), for reports

    # what admission reads -------------------------------------------------------
    def state(self, now: float) -> str:
        if self.down_reason:
            return "probing" if self.probing else f"down ({self.down_reason})"
        return "cooling" if now < self.cool_until else "up"

    def holds(self, now: float) -> Optional[bool]:
        """True: nothing may go now (cooling, down and not due a probe, or probing); False: one probe may go now;
        None: up, so the limit and pacing decide."""
        if self.down_reason:
            return not (now >= self.down_until and not self.probing)
        return True if now < self.cool_until else None

    def blocked(self, now: float) -> str:
        """Why health holds the endpoint now ("" when it does not)."""
        if self.down_reason:
            return f"down ({self.down_reason}), probing" if self.probing else f"down ({self.down_reason})"
        return f"cooling ({self.cool_reason})" if now < self.cool_until else ""

    def wake_at(self, now: float) -> Optional[float]:
        """When health next lets a request go (None: it does not hold the endpoint now)."""
        if self.down_reason:
            return self.down_until
        return self.cool_until if now < self.cool_until else None

    def error_share(self) -> float:
        return sum(self.errors) / len(self.errors) if len(self.errors) >= 20 else 0.0

    def over_budget(self) -> bool:
        """More of the last answers were errors than the error budget allows: errors are overload, not noise."""
        return self.error_share() > self.error_budget

    # what admission tells it ----------------------------------------------------
    def sent(self) -> None:
        """A request went (the probe, when down)."""
        self.counts["requests"] += 1
        if self.down_reason:
            self.probing = True

    def released(self) -> None:
        """A request in flight ended without an answer (its probe, if it was one, is no longer in flight)."""
        self.probing = False

    def retried(self) -> None:
        self.counts["retries"] += 1

    # answers --------------------------------------------------------------------
    def observe(self, a: Answer, kind: Kind) -> Verdict:
        """Record one answer (``kind``: its meaning, ``outcome.classify``) and say what follows for its task."""
        if kind is Kind.NONE:  # failed before any call: says nothing about the endpoint
            self.probing = False
            return Verdict(kind, again=False)
        if a.error:
            self.last_error = a.error
        if kind in (Kind.SERVED, Kind.REFUSED, Kind.ERROR, Kind.TIMEOUT):
            self.errors.append(kind in (Kind.ERROR, Kind.TIMEOUT))
        if kind is Kind.REFUSED:
            self.streak.add(a.at, a.retry_after)
        elif (a.status or a.failure) and (a.routed_at >= self.streak.since or not self.streak.count):
            self.streak.end()
        return _OBSERVE[kind](self, a)

    def _served(self, a: Answer) -> Verdict:
        self.counts["ok"] += 1
        self.latencies.append(a.latency)
        back = bool(self.down_reason) and a.routed_at >= self.down_since  # an answer to a request sent before it went down is old news
        if back:
            log.info("qworker: judge endpoint %s answered a probe and is back (was: %s)", self.url, self.down_reason)
            self.down_reason, self.down_for, self.probing = "", 0.0, False
        self.error_streak, self.streak.cools = 0, 0
        return Verdict(Kind.SERVED, again=False, came_back=back)

    def _refused(self, a: Answer) -> Verdict:
        """A refusal; ``self._limiter`` has already been told (its limit is the one after the refusal)."""
        self.counts["status_429" if a.status == 429 else "other_errors"] += 1
        self.probing = False
        rl = (a.ratelimit or {}).get("requests") or {}
        after, now, s = a.retry_after, a.at, self.streak
        if rl.get("remaining") == 0:  # the quota says the whole endpoint is out
            rate = rl["limit"] / 60.0 if rl.get("limit") else 1.0
            self._cool(now + min(MAX_RETRY_AFTER_S, after if after is not None else 1.0 / rate), "quota spent")
        elif after is not None and after != int(after) and after <= SHORT_RETRY_AFTER * self._limiter.rtt:  # rtt 0: never
            # Exact (not whole seconds) and short: when the server's next slot or token comes
            # (a token bucket's next refill).  Sending before then is refused too.
            self._cool(now + after, "retry-after")
        elif s.count >= max(8, self._limiter.limit / 2) and a.routed_at - s.since >= (self._limiter.rtt or 0.05):
            # Refused across the board (an outage, or an overload the limit did not answer), a request sent a round
            # trip after the streak began included (when the capacity drops, the requests in flight are refused
            # for about a round trip; those sent after are answered): the whole endpoint waits, for the shortest
            # Retry-After of the streak, else 0.1 s doubling to 1 s; then one probe.
            wait = s.retry_s if s.retry_s < math.inf else min(STREAK_COOL_MAX_S, STREAK_COOL_FIRST_S * 2**s.cools)
            s.cools += 1
            self._cool(now + min(MAX_RETRY_AFTER_S, wait), f"{s.count} refusals in a row")
            if now - s.since >= self.dead_after_s and now >= s.due:
                # Refusing everything for that long, and past the time its Retry-Afters named (a per-minute quota
                # spent until the minute ends is not a dead endpoint): down, and dead_after_s applies
                self._go_down(f"refused every request for {now - s.since:.0f} s", now)
            if after is None:  # the next probe is another task: the refusals of an outage are spread, not one task's
                return Verdict(Kind.REFUSED, again=True, park_until=now + 2 * min(MAX_RETRY_AFTER_S, wait))
        return Verdict(Kind.REFUSED, again=True)

    def _hung(self, a: Answer) -> Verdict:
        """A timeout of one request the server lost while it answered the others: retried, counted as a timeout, but
        neither an error in the budget nor a cut (it says nothing of the load).  Charged to its task as a timeout is
        (not while the endpoint is down).  Never the probe: a hung request is one the server answered others after,
        so one seen while down was sent before it went down, and the probe stays in flight."""
        self.counts["timeouts"] += 1
        if not self._straggler(a):
            self.probing = False
        return Verdict(Kind.HUNG, again=True, charged=not self.down_reason)

    def _timeout(self, a: Answer) -> Verdict:
        # A request that hangs now and then says nothing about load (the latency statistics see a
        # server that queues); timeouts cut the limit only when errors are over the budget.
        self.counts["timeouts"] += 1
        self.probing = False
        return Verdict(Kind.TIMEOUT, again=True, cuts_limit=self.over_budget(), charged=not self.down_reason)

    def _straggler(self, a: Answer) -> bool:
        """Sent before the endpoint went down: its failure is already counted."""
        return bool(self.down_reason) and a.routed_at < self.down_since

    def _unreachable(self, a: Answer) -> Verdict:
        self.counts["connect_errors"] += 1
        if not self._straggler(a):
            self._go_down("unreachable", a.at)
        return Verdict(Kind.UNREACHABLE, again=True, charged=not self.down_reason)

    def _auth(self, a: Answer) -> Verdict:
        self.counts["other_errors"] += 1
        self._go_down("auth", a.at, AUTH_DOWN_S)
        return Verdict(Kind.AUTH, again=True)

    def _error(self, a: Answer) -> Verdict:
        self.counts["other_errors"] += 1
        self.error_streak += 1
        if (self.error_streak >= ERROR_STREAK_DOWN or self.down_reason) and not self._straggler(a):
            self._go_down(f"{self.error_streak} errors in a row", a.at)
        return Verdict(Kind.ERROR, again=True, charged=not self.down_reason)

    def _rejected(self, a: Answer) -> Verdict:
        self.counts["other_errors"] += 1
        self.probing = False
        return Verdict(Kind.REJECTED, again=False)

    def _go_down(self, reason: str, now: float, for_s: Optional[float] = None) -> None:
        if not self.down_reason:
            log.warning("qworker: judge endpoint %s is down (%s); routing to the others, probing it again", self.url, reason)
            self.down_since = now
        self.down_for = for_s or min(self.down_max_s, max(DOWN_FIRST_S, 2 * self.down_for))
        self.down_until = now + self.down_for
        self.down_reason = reason
        self.probing = False

    def _cool(self, until: float, reason: str) -> None:
        if until > self.cool_until:
            self.cool_until, self.cool_reason = until, reason


_OBSERVE = {Kind.SERVED: Health._served, Kind.REFUSED: Health._refused, Kind.TIMEOUT: Health._timeout, Kind.HUNG: Health._hung,
            Kind.UNREACHABLE: Health._unreachable, Kind.AUTH: Health._auth, Kind.ERROR: Health._error,
            Kind.REJECTED: Health._rejected}
