"""An adaptive concurrency limit for one endpoint, from what its answers say.

The algorithm only; ``_gate`` enforces it.  Units: seconds, requests.

* **Slow start.**  Until the first sign of overload the limit grows by half a
  request per success: x1.5 every round trip, from ``initial`` up to the ceiling.
* **Additive increase.**  Afterwards it climbs back quickly (one per success)
  to just under the level where the last drop happened, then probes above it
  slowly: ``probe`` per success, one more slot per 250 answers, so a probe that
  ends in a rejection costs well under 1% of the requests at any capacity.  It
  grows only while the limit is in use (in flight within an eighth of it):
  headroom that was never tested (the workers were busy, the queue was short)
  would turn into a burst of rejections the moment it is used.
* **Multiplicative decrease on a drop** (429, 503, a timeout): the limit falls
  to ``backoff`` times the number in flight when the drop happened, at most
  once per round trip, so a burst of rejections caused by one overshoot counts
  once (unless ``burst_drops`` more come within that round trip: then the
  overload is lasting, as when a rate limit's burst allowance runs out, and it
  cuts again); and every drop caps the limit at what was in flight minus the refused
  request.  Nothing more is sent until enough requests finish: a retried task
  waits for measured free capacity, and rejections cannot feed a retry loop.
* **No growth for a round trip after a drop**: the answers still arriving were
  sent before it, and say nothing about more room (with a rate limit, a burst
  that overshot is still draining).
* **Latency gradient.**  A server that queues instead of rejecting shows it in
  latency.  With ``rtt`` a moving average and ``min_rtt`` the lowest round
  trip of the last ``window_s``, ``gradient = tolerance * min_rtt / rtt``; below
  1 the limit is multiplied by it (at most once per round trip, never below
  half).  ``tolerance`` (2.0) leaves room for ordinary jitter.

Little's law gives the target: a judge that serves C requests at once with
latency R sustains C/R requests/s; holding exactly C in flight gets all of it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

__all__ = ["AdaptiveLimit"]


@dataclass(slots=True)
class AdaptiveLimit:
    initial: float = 4.0
    floor: float = 1.0
    ceiling: float = 512.0
    backoff: float = 0.9
    probe: float = 0.004  # per success above the last drop level: one slot per 250 answers
    slow_start_step: float = 0.5  # per success: x1.5 per round trip, so an overshoot is at most half the limit
    tolerance: float = 2.0
    burst_drops: int = 8  # this many more drops within the round trip of a cut: overload persists, cut again
    window_s: float = 30.0
    limit: float = field(init=False)
    rtt: float = field(init=False, default=0.0)  # EWMA of successful round trips, seconds
    slow_start: bool = field(init=False, default=True)
    drops: int = field(init=False, default=0)
    last_drop_level: float = field(init=False, default=math.inf)  # in flight at the last drop
    _last_cut: float = field(init=False, default=-math.inf)
    _last_drop: float = field(init=False, default=-math.inf)
    _drops_since_cut: int = field(init=False, default=0)
    _mins: deque = field(init=False, default_factory=deque)  # (time, rtt): monotone, for the window's minimum

    def __post_init__(self) -> None:
        self.limit = max(self.floor, min(self.ceiling, self.initial))

    @property
    def min_rtt(self) -> float:
        return self._mins[0][1] if self._mins else 0.0

    def _round_trip(self) -> float:
        return self.rtt or 0.05

    def on_success(self, rtt: float, in_flight: int, now: float) -> None:
        """A request answered normally after ``rtt`` seconds, with ``in_flight`` outstanding when it was sent."""
        mins = self._mins
        while mins and mins[-1][1] >= rtt:
            mins.pop()
        mins.append((now, rtt))
        while mins[0][0] < now - self.window_s and len(mins) > 1:
            mins.popleft()
        self.rtt = rtt if self.rtt == 0.0 else 0.9 * self.rtt + 0.1 * rtt
        gradient = self.tolerance * self.min_rtt / self.rtt if self.rtt > 0 else 1.0
        if gradient < 1.0:
            self._cut(max(0.5, gradient) * self.limit, now)
            return
        if now - self._last_drop < self._round_trip():
            return  # answers to requests sent before the last drop say nothing about more room
        if in_flight >= self.limit - max(2.0, self.limit / 8):  # grow only a limit that is in use
            below = 0.96 * self.last_drop_level  # just under where the last drop happened
            if self.slow_start:
                grown = self.limit + self.slow_start_step
            elif self.limit < below:
                grown = min(self.limit + 1.0, below)
            else:
                grown = self.limit + self.probe
            self.limit = min(self.ceiling, grown)

    def on_drop(self, in_flight: int, now: float) -> None:
        """The endpoint refused a request (429/503) or it timed out, with ``in_flight`` outstanding."""
        self.drops += 1
        self._last_drop = now
        level = max(1, min(in_flight, self.limit))
        if self._cut(self.backoff * level, now):
            self.last_drop_level = level
        else:  # rejections of one overshoot keep coming: the level that holds is lower
            self.last_drop_level = min(self.last_drop_level, level)
        # Every drop, even inside the round trip that already cut: the refused request's slot
        # is not reused until something finishes, so rejections cannot feed a loop of retries.
        self.limit = max(self.floor, min(self.limit, in_flight - 1))

    def _cut(self, to: float, now: float) -> bool:
        if now - self._last_cut < self._round_trip():
            self._drops_since_cut += 1
            if self._drops_since_cut < self.burst_drops:
                return False  # one overshoot, one decrease
        self._drops_since_cut = 0
        self._last_cut = now
        self.slow_start = False
        self.limit = max(self.floor, min(self.limit, to))
        return True

    def reset(self) -> None:
        """Back to slow start from ``initial`` (an endpoint that came back after being down)."""
        self.limit = max(self.floor, min(self.ceiling, self.initial))
        self.slow_start = True
        self._last_cut = self._last_drop = -math.inf
        self.last_drop_level = math.inf
