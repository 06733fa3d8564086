"""An adaptive concurrency limit for one endpoint, from what its answers say.

The algorithm only; ``gate`` enforces it (and paces by rate where a provider
announces its rate limit: that is ``endpoint``'s business).  Units: seconds,
requests.  Only the dispatcher thread calls it.

**Refusals (429, a 503 judged to be overload, a timeout).**

* Slow start: until the first refusal or sign of queueing, the limit grows by
  half a request per success, x1.5 per round trip from ``initial`` (x1.25
  beyond twice ``initial``).  The first refusal takes it back to the level of a
  round trip ago, the last one known to hold.
* Every refusal caps the limit at what was in flight minus the refused
  request, so refusals cannot feed a loop of retries.
* A refusal of a request sent before the last reaction is an *echo* of the
  overload already answered: it caps and lowers the level to recover to by one.
* A lone refusal only caps: against a concurrency cap the limit then sits at the
  capacity.  A fresh refusal within a round trip of a reaction, after more than
  ``burst_drops`` refusals, means the reaction did not suffice.
  The cut then goes to what the answers of the last few round trips sustained
  (Little's law: answers/s x mean latency; a rate limit's rate times the
  latency), or to half when too few answered.  A timeout cuts to ``backoff``
  times what was in flight.
* An outage is not a capacity signal.  When, for a whole round trip, every
  request sent was refused (at least ``outage_after`` refusals, none of them
  answered: a judge restarting, a proxy refusing everything), the levels the
  refusals lowered meanwhile say nothing about the capacity.  The first answer
  to a request sent after that restores what held before the refusals began
  (the level to recover to, the knee, slow start or not) and the limit climbs
  back by one per success (x2 per round trip) to where it was; refusals of
  requests sent during the outage are ignored.  ``reset`` (an endpoint back
  from down) climbs the same way to the limit it had.
* No growth for a round trip after a refusal.  Then the limit climbs one per
  success back to one below the last refusal level (one per round trip once a
  reaction did not suffice), and probes above it by ``probe`` requests per round
  trip: the same for every client, which is what makes several producers
  sharing one endpoint converge to even shares (with ``fair_share``: each fresh
  refusal lowers the level to recover to by that fraction, so the client with
  the larger share gives up more).

**Queueing (a server that never refuses: vLLM, SGLang).**  Latency is
compared, not to a minimum (under LLM latency, lognormal with a 10x spread, the
minimum of a window says nothing), but by means over windows: ``recent`` is the
mean of the last ``window`` answers, ``base`` the mean of at least
``base_samples`` answers sent at the *lowest* concurrency levels seen (kept per
level, so the base does not drift up with the limit).  Each latency is divided
by the answer's ``usage.completion_tokens`` when replies carry it (latency per
output token is far steadier).  By Little's law a server holding ``C`` at once
and sent ``L > C`` answers ``L / C`` times slower, so ``g = recent / base``
estimates ``L / C``: above ``queue_cut`` the limit is cut to
``queue_target * L / g`` (the knee, plus a queue of a tenth of it), and from
there it grows by one per round trip until the next cut.  A window faster
than ``stale_base`` times the base says the base was measured while someone
else loaded the server: it is rebuilt from that window.  A metrics URL's
``num_requests_waiting`` / ``num_requests_running`` replace the latency signal
while they are fresh (``on_server_load``): a reading with a queue longer than
a tenth of what runs cuts to what keeps it so; one without lets the limit grow
(x1.5 in slow start, else by one).

Little's law gives the target: a judge that serves C requests at once with
latency R sustains C/R requests/s; holding exactly C in flight gets all of it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["AdaptiveLimit", "LOAD_FRESH_S"]

_LEVEL_BASE = math.log(1.1)  # latency is kept per 10%-wide band of concurrency
LOAD_FRESH_S = 2.0  # a metrics URL's reading steers the limit for this long


@dataclass(slots=True)
class AdaptiveLimit:
    initial: float = 4.0
    floor: float = 1.0
    ceiling: float = 512.0
    backoff: float = 0.9  # a timeout: x0.9 of what was in flight
    backoff_again: float = 0.5  # a reaction that did not suffice: halve
    burst_drops: int = 8  # refusals within a round trip of a reaction that make a fresh one an overload
    probe: float = 0.15  # requests per round trip above the last refusal level
    fair_share: float = 0.02  # a fresh refusal lowers the level to recover to by this fraction
    slow_start_step: float = 0.5  # per success: x1.5 per round trip
    queue_cut: float = 1.3  # g above this: the server queues, cut to the knee
    queue_target: float = 1.1  # where a cut puts the limit: the knee estimate times this
    window: int = 128  # answers in the recent latency window
    base_samples: int = 128  # answers at the lowest levels that make the base
    stale_base: float = 0.8  # g below this: the base was measured while others loaded the server; rebuilt
    outage_after: int = 8  # refusals, with nothing sent for a round trip answered, that make an outage
    regain: float = 0.9  # below this share of a capacity seen before (``high``), the limit climbs back to it on evidence
    regain_rtts: float = 2.0  # the evidence: in use at the last refusal's level for this many round trips without a refusal
    regains: int = field(init=False, default=0)
    limit: float = field(init=False)
    rtt: float = field(init=False, default=0.0)  # EWMA of successful round trips, seconds
    slow_start: bool = field(init=False, default=True)
    drops: int = field(init=False, default=0)
    queue_cuts: int = field(init=False, default=0)
    rebases: int = field(init=False, default=0)
    last_drop_level: float = field(init=False, default=math.inf)  # where refusals say the capacity is
    knee_level: float = field(init=False, default=math.inf)  # where queueing says it is
    gradient: float = field(init=False, default=1.0)  # the last g (recent / base latency)
    _last_cut: float = field(init=False, default=-math.inf)
    _last_drop: float = field(init=False, default=-math.inf)
    _reacted: float = field(init=False, default=-math.inf)
    _echo_level: int = field(init=False, default=0)
    _overloaded: bool = field(init=False, default=False)
    _episode_drops: int = field(init=False, default=0)
    _queue_free: bool = field(init=False, default=True)
    _per_token: Optional[bool] = field(init=False, default=None)
    _recent: deque = field(init=False, default_factory=deque)  # (normalised latency, level at send)
    _recent_sum: list = field(init=False, default_factory=lambda: [0.0, 0.0])
    _levels: dict = field(init=False, default_factory=dict)  # band -> deque of normalised latencies
    _since_decision: int = field(init=False, default=0)
    _load_at: float = field(init=False, default=-math.inf)  # when a metrics URL last spoke
    _answers: deque = field(init=False, default_factory=deque)  # (time, latency) of recent successes, for Little's law
    _answers_rtt: float = field(init=False, default=0.0)
    outages: int = field(init=False, default=0)
    _run: int = field(init=False, default=0)  # refusals since the last answer to a request sent after they began
    _run_started: float = field(init=False, default=math.inf)  # when the first of them came
    _held: Optional[tuple] = field(init=False, default=None)  # what held before they began (``_snapshot``)
    _restore_to: float = field(init=False, default=0.0)  # after an outage: climb back x2 per round trip to this
    _recovered_at: float = field(init=False, default=-math.inf)  # refusals of requests sent before this are the outage's
    high: float = field(init=False, default=0.0)  # the highest level a lone refusal found: a capacity seen before
    refused_level: float = field(init=False, default=math.inf)  # in flight at the last fresh refusal
    refusals: int = field(init=False, default=0)  # fresh refusals so far (not echoes, not an outage's)
    answers_scale: float = field(init=False, default=1.0)  # the endpoint's load / this client's: its answers are that share (``peers``)
    _above_since: float = field(init=False, default=math.inf)  # since when the limit is in use at or above it
    _regaining: bool = field(init=False, default=False)  # climbing back to ``high``
    _regain_wait: float = field(init=False, default=2.0)  # round trips of evidence the next climb back wants
    _lone_level: float = field(init=False, default=-math.inf)  # in flight at the last lone refusal

    def __post_init__(self) -> None:
        self.limit = max(self.floor, min(self.ceiling, self.initial))

    def _round_trip(self) -> float:
        return self.rtt or 0.05

    # latency ----------------------------------------------------------------
    def _record(self, rtt: float, level: float, tokens: Optional[int]) -> bool:
        """Keep one latency sample; True when a decision is due."""
        if self._per_token is None:
            self._per_token = bool(tokens)
        if self._per_token and not tokens:
            return False
        x = rtt / tokens if self._per_token and tokens else rtt
        recent = self._recent
        recent.append((x, level))
        self._recent_sum[0] += x
        self._recent_sum[1] += level
        if len(recent) > self.window:
            ox, ol = recent.popleft()
            self._recent_sum[0] -= ox
            self._recent_sum[1] -= ol
        self._keep(x, level)
        self._since_decision += 1
        if len(recent) >= self.window and self._since_decision >= self.window // 2:
            self._since_decision = 0
            return True
        return False

    def _keep(self, x: float, level: float) -> None:
        band = int(math.log(max(1.0, level)) / _LEVEL_BASE)
        q = self._levels.get(band)
        if q is None:
            q = self._levels[band] = deque(maxlen=256)
        q.append(x)

    def base(self) -> Optional[float]:
        """Mean normalised latency of the answers sent at the lowest levels (None until there are enough)."""
        total, n = 0.0, 0
        for band in sorted(self._levels):
            q = self._levels[band]
            total += sum(q)
            n += len(q)
            if n >= self.base_samples:
                return total / n
        return None

    def _decide(self, now: float) -> None:
        base = self.base()
        if not base:
            return
        n = len(self._recent)
        g = (self._recent_sum[0] / n) / base
        self.gradient = g
        if g < self.stale_base:  # answers far faster than the base: it was measured while others loaded the server
            self._levels.clear()
            for x, level in self._recent:
                self._keep(x, level)
            self.rebases += 1
        elif g > self.queue_cut:
            self._queue_free = False
            if now - self._last_cut >= self._round_trip():
                knee = (self._recent_sum[1] / n) / g
                self.knee_level = max(self.floor, knee * self.queue_target)
                self.queue_cuts += 1
                self._cut(self.knee_level, now)
                self._recent.clear()  # judge the cut on answers sent after it
                self._recent_sum[:] = [0.0, 0.0]
        else:
            self._queue_free = True

    def on_server_load(self, running: float, waiting: float, in_flight: int, now: float) -> None:
        """A metrics URL says ``running`` requests are being served and ``waiting`` are queued (all clients)."""
        self._load_at = now
        allowed = (self.queue_target - 1.0) * max(1.0, running)
        if waiting > allowed and running > 0:
            self._queue_free = False
            if now - self._last_cut >= self._round_trip():
                self.knee_level = max(self.floor, in_flight * (running + allowed) / (running + waiting))
                self.queue_cuts += 1
                self._cut(self.knee_level, now)
        else:
            self._queue_free = True
            if self._in_use(in_flight) and self.limit < self.last_drop_level - 1.0:  # x1.5 (slow start) or one more per reading with no queue
                step = self.limit * self.slow_start_step if self.slow_start else 1.0
                self.limit = min(self.ceiling, self.limit + step, self.last_drop_level - 1.0)
                self._raise_knee(self.limit)

    def _in_use(self, in_flight: int) -> bool:
        """Growth is earned only by a limit that is in use."""
        return in_flight >= self.limit - max(2.0, self.limit / 8)

    def _raise_knee(self, level: float) -> None:
        """Growth above a queueing server's knee that brought no queue moves the knee up (an unknown knee stays unknown)."""
        if self.knee_level < math.inf:
            self.knee_level = max(self.knee_level, level)

    # answers ----------------------------------------------------------------
    def on_success(self, rtt: float, in_flight: int, now: float, *, level: Optional[float] = None, tokens: Optional[int] = None) -> None:
        """A request answered normally after ``rtt`` seconds.

        ``in_flight``: requests outstanding now, this one included; ``level``:
        requests outstanding when it was sent (default ``in_flight``);
        ``tokens``: its ``usage.completion_tokens`` when the reply said.
        """
        self.rtt = rtt if self.rtt == 0.0 else 0.9 * self.rtt + 0.1 * rtt
        answers = self._answers
        answers.append((now, rtt))
        self._answers_rtt += rtt
        while answers[0][0] < now - max(1.0, 4 * self.rtt):
            self._answers_rtt -= answers.popleft()[1]
        if self._run and now - rtt >= self._run_started:  # an answer to a request sent since refusals began
            if self._run >= self.outage_after and now - rtt - self._run_started >= self._round_trip():
                self._recover(now)  # for a round trip nothing sent was answered: an outage, not the capacity
            self._run, self._run_started, self._held = 0, math.inf, None
        if self._record(rtt, float(level if level is not None else in_flight), tokens) and now - self._load_at > LOAD_FRESH_S:
            self._decide(now)
        if self.limit < self.refused_level or self.slow_start or self._restore_to or not self._in_use(in_flight):
            self._above_since = math.inf
        elif self._above_since == math.inf:
            self._above_since = now
        elif self.limit < self.regain * self.high and now - self._above_since >= self._regain_wait * self._round_trip():
            # In use at the level the last refusal came at, for round trips, with no refusal, below a capacity
            # seen before: the capacity came back (a tenant left, a replica returned).  Climb back x2 per round
            # trip to it, as after an outage.
            self._restore_to = self.high
            self.regains += 1
            self._regaining = True
        if self._restore_to and self._in_use(in_flight):  # back from an outage: x2 per round trip to where it was
            self.limit = min(self.ceiling, self._restore_to, self.limit + 1.0)
            if self.limit >= self._restore_to:
                self._restore_to = 0.0
                if self._regaining:  # all of it came back
                    self._regaining = False
                    self._regain_wait = self.regain_rtts
            return
        if now - self._last_drop < self._round_trip():
            return  # answers to requests sent before the last drop say nothing about more room
        if now - self._load_at <= LOAD_FRESH_S:
            return  # a metrics URL steers: the limit grows by its readings (on_server_load)
        if not self._in_use(in_flight):
            return
        below = self.last_drop_level - 1.0  # just under where the last refusal happened
        if self.slow_start:
            grown = self.limit + self._slow_start_step() if self._queue_free else self.limit
        elif self.limit < min(below, self.knee_level):  # back to where the capacity was: one per success
            grown = min(self.limit + (1.0 / self.limit if self._overloaded else 1.0), below, self.knee_level)
        elif not self._queue_free:
            return
        elif self.limit < below:  # above the knee of a queueing server: one per round trip
            grown = min(self.limit + 1.0 / self.limit, below)
            self._raise_knee(grown)
        else:  # probe: the same per round trip for every client sharing the endpoint (faster below a capacity seen before)
            grown = self.limit + self.probe / max(1.0, self.limit)
        self.limit = min(self.ceiling, grown)

    def on_drop(self, in_flight: int, now: float, sent_at: float, *, timeout: bool = False) -> None:
        """The endpoint refused a request sent at ``sent_at`` (429/503), or it timed out.

        ``in_flight`` counts the requests outstanding, this one included.
        """
        self.drops += 1
        if sent_at < self._recovered_at:  # sent during an outage that is over: says nothing about the capacity now
            return
        if not self._run:
            self._held = self._snapshot()
            self._run_started = now
        self._run += 1
        self._restore_to = 0.0
        self._last_drop = now
        self._above_since = math.inf
        self._episode_drops += 1
        if sent_at <= self._reacted:  # sent before the last reaction: an echo of the overload it answered
            self._echo_level -= 1
            self.last_drop_level = min(self.last_drop_level, self._echo_level)
        else:
            level = max(1, min(in_flight, self.limit))
            self._echo_level = in_flight
            self.last_drop_level = in_flight if self.slow_start else in_flight * (1.0 - self.fair_share)
            if self.slow_start:  # the level of a round trip ago was the last one known to hold
                self._cut(level / (1.0 + self._slow_start_step()), now)
            elif timeout:
                self._cut(self.backoff * level, now)
            elif now - self._reacted < self._round_trip() and self._episode_drops > self.burst_drops:
                # What the endpoint accepts (Little's law: answers/s x latency), or half when that is unknown
                self._cut(max(self.backoff_again * level, min(level, 0.95 * self.sustained(now))), now)
                self._overloaded = True
            elif now - self._reacted >= self._round_trip():
                self._episode_drops = 1  # a lone refusal: one request over the capacity; the cap is the answer
                if abs(in_flight - self._lone_level) <= 1.0 + 0.05 * in_flight:
                    # Two lone refusals in a row at the same level: a concurrency cap (a rate limit refuses at any level)
                    self.high = max(self.high, self.last_drop_level)
                self._lone_level = in_flight
            self.refused_level = in_flight
            self.refusals += 1
            if self._regaining:  # refused on the way back: not all of it is back; the next try wants longer evidence
                self._regaining = False
                self._regain_wait = min(4 * self.regain_rtts, 2 * self._regain_wait)
            self._reacted = now
        self.cap(in_flight)

    def adopt(self, level: float, high: float, regain: float = 0.0) -> None:
        """What other producers of the endpoint learnt (``peers``): their largest limit ``level``, taken
        before this limit's first answer; the highest capacity they saw (``high``); and ``regain``, the
        level one of them climbs back to as capacity returned, which this limit climbs to as well."""
        if self.rtt == 0.0 and not self.drops and level > self.limit:
            self.limit = min(self.ceiling, level)
        self.high = max(self.high, min(self.ceiling, high))
        if regain > self.limit and not self._restore_to and not self.slow_start:
            self._restore_to = min(self.ceiling, regain)
            self._regaining = True

    def regaining_to(self) -> float:
        """The level this limit climbs back to as capacity returned (0: not climbing so)."""
        return self._restore_to if self._regaining else 0.0

    def cap(self, in_flight: int) -> None:
        """The refused request's slot is not reused until something finishes."""
        self.limit = max(self.floor, min(self.limit, in_flight - 1))

    def sustained(self, now: float) -> float:
        """Little's law on the recent answers: the concurrency that carried them (0 when too few), times ``answers_scale``."""
        answers = self._answers
        span = max(1.0, 4 * self.rtt)
        if len(answers) < 20 or now - answers[0][0] < 0.5 * span:
            return 0.0
        return self.answers_scale * self._answers_rtt / min(span, now - answers[0][0])  # answers/s x their mean latency

    def _slow_start_step(self) -> float:
        return self.slow_start_step if self.limit < 2 * self.initial else self.slow_start_step / 2

    def _cut(self, to: float, now: float) -> None:
        self._last_cut = now
        self.slow_start = False
        self.limit = max(self.floor, min(self.limit, to))

    def _snapshot(self) -> tuple:
        return (self.limit, self.last_drop_level, self._echo_level, self.knee_level, self.slow_start, self._overloaded)

    def _recover(self, now: float) -> None:
        """The first answer after an outage: back to what held before it, the limit climbing to its old level."""
        assert self._held is not None
        limit, self.last_drop_level, self._echo_level, self.knee_level, self.slow_start, self._overloaded = self._held
        self.outages += 1
        self._restore_to = limit if limit > self.limit else 0.0
        self._last_drop = self._reacted = -math.inf
        self._recovered_at = now

    def reset(self) -> None:
        """Back to slow start (an endpoint that came back after being down): x2 per round trip to the limit it had, then x1.5."""
        self._restore_to = self.limit if self.limit > self.initial else 0.0
        self._run, self._run_started, self._held = 0, math.inf, None
        self.limit = max(self.floor, min(self.ceiling, self.initial))
        self.slow_start = True
        self._overloaded = False
        self._queue_free = True
        self._last_cut = self._last_drop = self._reacted = -math.inf
        self.last_drop_level = self.knee_level = math.inf
        self.refused_level = math.inf
        self._recent.clear()
        self._recent_sum[:] = [0.0, 0.0]
        self._levels.clear()
