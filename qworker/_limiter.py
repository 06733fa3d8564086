"""An adaptive concurrency limit for one endpoint, from what its answers say.

The algorithm only; ``_gate`` enforces it.  Units: seconds, requests.

* **Slow start.**  Until the first refusal (429, 503, a timeout) the limit
  grows by half a request per success, x1.5 every round trip, from
  ``initial``; beyond twice ``initial``, x1.25, so that the requests already
  sent when the first refusal comes back are fewer.  The first refusal takes
  it back to the level of a round trip ago, the last one known to hold.
* **Every refusal caps** the limit at what was in flight minus the refused
  request.  Nothing more is sent until enough requests finish: a retried task
  waits for measured free capacity, and refusals cannot feed a loop of retries.
* **Echoes count once.**  A refusal of a request sent before the last reaction
  is an echo of the overload already answered: it caps and lowers the level
  to recover to by one, and nothing more.
* **A lone refusal only caps.**  Against a concurrency cap, one request over
  the capacity earns one 429 and the cap is the whole answer: the limit stays
  at the capacity, not a tenth below it.
* **Multiplicative decrease when the overload is more than one request.**  A
  timeout cuts to ``backoff`` times what was in flight.  A refusal of a request
  sent *after* the last reaction, within a round trip of it and after more
  than ``burst_drops`` refusals, means the reaction did not suffice (a rate
  limit's burst allowance ran out, or the capacity fell): ``backoff_again``.
* **No growth for a round trip after a refusal**: answers still arriving were
  sent before it and say nothing about more room.
* **Recovery and probing.**  Up to one below the level of the last refusal the
  limit climbs one per success; once a reaction did not suffice, by one per
  round trip instead, since a rate limit's bucket answers late.  Above that
  level it probes by ``probe`` per success, one slot per 500 answers, so a
  steady capacity costs about one 429 per 500 answers.  It grows
  only while the limit is in use (in flight within an eighth of it): headroom
  that was never tested would turn into a burst of refusals when first used.
* **Latency gradient.**  A server that queues instead of refusing shows it in
  latency.  With ``rtt`` a moving average and ``min_rtt`` the lowest round trip
  of the last ``window_s``, ``gradient = tolerance * min_rtt / rtt``; below 1
  the limit is multiplied by it (at most once per round trip, never below
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
    backoff: float = 0.9  # a timeout: x0.9 of what was in flight
    backoff_again: float = 0.5  # a reaction that did not suffice: halve
    burst_drops: int = 8  # refusals within a round trip of a reaction that make a fresh one an overload
    probe: float = 0.002  # per success above the last refusal level: one slot per 500 answers
    slow_start_step: float = 0.5  # per success: x1.5 per round trip, so an overshoot is at most half the limit
    tolerance: float = 2.0
    window_s: float = 30.0
    limit: float = field(init=False)
    rtt: float = field(init=False, default=0.0)  # EWMA of successful round trips, seconds
    slow_start: bool = field(init=False, default=True)
    drops: int = field(init=False, default=0)
    last_drop_level: float = field(init=False, default=math.inf)  # in flight at the last refusal
    _last_cut: float = field(init=False, default=-math.inf)
    _last_drop: float = field(init=False, default=-math.inf)
    _reacted: float = field(init=False, default=-math.inf)  # when the last fresh refusal was answered
    _echo_level: int = field(init=False, default=0)  # in flight at the last reaction, less the echoes since
    _overloaded: bool = field(init=False, default=False)  # a reaction once did not suffice: recover additively
    _episode_drops: int = field(init=False, default=0)  # refusals since the last lone one
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
            if now - self._last_cut >= self._round_trip():  # once per round trip: later answers were queued too
                self._cut(max(0.5, gradient) * self.limit, now)
            return
        if now - self._last_drop < self._round_trip():
            return  # answers to requests sent before the last drop say nothing about more room
        if in_flight >= self.limit - max(2.0, self.limit / 8):  # grow only a limit that is in use
            below = self.last_drop_level - 1.0  # just under where the last drop happened
            if self.slow_start:
                grown = self.limit + self._slow_start_step()
            elif self.limit < below:  # after an overload, additively: one per round trip
                grown = min(self.limit + (1.0 / self.limit if self._overloaded else 1.0), below)
            else:
                grown = self.limit + self.probe
            self.limit = min(self.ceiling, grown)

    def on_drop(self, in_flight: int, now: float, sent_at: float, *, timeout: bool = False) -> None:
        """The endpoint refused a request sent at ``sent_at`` (429/503), or it timed out.

        ``in_flight`` counts the requests outstanding, this one included.
        """
        self.drops += 1
        self._last_drop = now
        self._episode_drops += 1
        if sent_at <= self._reacted:  # sent before the last reaction: an echo of the overload it answered
            # One more of the requests then in flight was over the capacity.  (What is in flight
            # now says less: answers that came back meanwhile were not replaced.)
            self._echo_level -= 1
            self.last_drop_level = min(self.last_drop_level, self._echo_level)
        else:
            level = max(1, min(in_flight, self.limit))
            self.last_drop_level = self._echo_level = in_flight
            if self.slow_start:  # the level of a round trip ago was the last one known to hold
                self._cut(level / (1.0 + self._slow_start_step()), now)
            elif timeout:
                self._cut(self.backoff * level, now)
            elif now - self._reacted < self._round_trip() and self._episode_drops > self.burst_drops:
                self._cut(self.backoff_again * level, now)
                self._overloaded = True
            elif now - self._reacted >= self._round_trip():
                self._episode_drops = 1  # a lone refusal: one request over the capacity; the cap is the answer
            self._reacted = now
        # Every refusal caps: the refused request's slot is not reused until something
        # finishes, so refusals cannot feed a loop of retries.
        self.limit = max(self.floor, min(self.limit, in_flight - 1))

    def _slow_start_step(self) -> float:
        """x1.5 per round trip up to twice ``initial``, x1.25 beyond: a smaller overshoot where it is dearer."""
        return self.slow_start_step if self.limit < 2 * self.initial else self.slow_start_step / 2

    def _cut(self, to: float, now: float) -> None:
        self._last_cut = now
        self.slow_start = False
        self.limit = max(self.floor, min(self.limit, to))

    def reset(self) -> None:
        """Back to slow start from ``initial`` (an endpoint that came back after being down)."""
        self.limit = max(self.floor, min(self.ceiling, self.initial))
        self.slow_start = True
        self._overloaded = False
        self._last_cut = self._last_drop = self._reacted = -math.inf
        self.last_drop_level = math.inf
