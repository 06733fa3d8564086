"""What one kind of evidence says about an endpoint's capacity: the limiter's estimators, one per signal.

Each class is fed by one signal and answers one question; ``limiter.AdaptiveLimit``
combines their answers through its mode state machine.  None of them changes
the limit.  Units: seconds (the gate's clock), requests.  Only the dispatcher
thread calls them.

* ``Refusals``: 429s, overload 503s and timeouts, with the time each refused
  request was sent.  Says what kind of refusal each one is (``RefusalKind``)
  and when every request sent for a round trip was refused (an outage).
* ``Latency``: answers' latencies with the concurrency each was sent at.  Says
  whether the server queues (recent latency over a baseline) and where its knee
  is.  The baseline is re-learnt whenever the capacity moves (``relearn``).
* ``ServerLoad``: a metrics URL's running and waiting counts.  Says whether the
  server's queue is over what refills its batch (a batch: what it runs, or the
  requests on their way to it, where more), and where the knee is.
* ``CapacityMemory``: where refusals and queueing put the capacity, and the
  highest capacity seen.  Its levels expire: a refusal level the limit has been
  in use at for round trips without a refusal no longer caps growth.
* ``Probes``: when requests were sent above the refusal level, and how long
  refusals take to come back.  Says whether a request was out alone above it:
  its level is then what the server held.
* ``Admissions``: when requests were sent, and which of them were refused.
  Says how many per second the server admitted over a span: while it refuses,
  its capacity as a rate, now rather than a round trip late.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass
from typing import Optional

__all__ = ["Admissions", "CapacityMemory", "Hangs", "LOAD_FRESH_S", "Latency", "LimitConfig", "Probes", "Refusal", "RefusalKind", "Refusals",
           "ServerLoad", "Throughput"]

LOAD_FRESH_S = 2.0  # a metrics URL's reading steers the limit for this long
PROBES_KEPT = 1024  # send instants of probes kept (``Probes``)
HANG_ANSWERS = 128  # the answers whose longest latency a timeout is weighed against (``Hangs``)
ADMISSIONS_KEPT = 4096  # send instants kept, and as many of refused requests (``Admissions``)
ADMISSIONS_MIN = 8  # requests sent in a span, at least, for what was admitted in it to be read (``Admissions``)
STORM_SHARE = 0.1  # a span in which the server admitted less than this share of what was sent: a storm (``Admissions``)
ON_WAY_READINGS = 4.0  # the moving mean of the requests on a server's way (``ServerLoad``) weighs each reading 1/this
_LEVEL_BASE = math.log(1.1)  # latency is kept per 10%-wide band of concurrency


@dataclass(frozen=True, slots=True)
class LimitConfig:
    """Every tunable of the adaptive limit (requests, seconds, round trips, fractions)."""

    initial: float = 4.0  # the limit before any answer
    floor: float = 1.0
    ceiling: float = 512.0
    backoff: float = 0.9  # a timeout: the limit goes to this share of what was in flight
    hang: float = 4.0  # overdue by this many times the longest recent answer when a later request was answered: hung
    backoff_again: float = 0.5  # a refusal after a reaction that did not suffice: at most halve
    burst_drops: int = 8  # refusals within a round trip of a reaction that make a fresh one an overload
    probe: float = 0.15  # requests per round trip above the refusal level, at first (``probe_max``)
    probe_max: float = 2.0  # below the highest capacity seen, the probe doubles each round trip without a refusal, up to this
    fair_share: float = 0.02  # a fresh refusal puts the refusal level this fraction under what was in flight
    slow_start_step: float = 0.5  # per success while probing: x1.5 per round trip (x1.25 beyond twice ``initial``)
    queue_cut: float = 1.3  # recent / base latency above this: the server queues
    queue_target: float = 1.1  # a queueing cut read from latency or a batch goes to the knee times this (not metrics')
    window: int = 128  # answers in the recent latency window
    base_samples: int = 128  # answers at the lowest levels that make the latency baseline
    stale_base: float = 0.8  # recent / base below this: the base was measured under someone else's load; rebuilt
    outage_after: int = 8  # refusals, with nothing sent for a round trip answered, that make an outage
    regain: float = 0.9  # below this share of the highest capacity seen, the limit climbs back to it on evidence
    regain_sustained: float = 0.75  # the same for a capacity known only from Little's law on answers (about 15% noise)
    regain_rtts: float = 2.0  # the evidence: in use for this many round trips without a refusal
    regain_rtts_max: float = 8.0  # a climb back that was refused doubles the evidence the next one wants, up to this


class RefusalKind(enum.Enum):
    """What one refusal says, as ``Refusals.on_refusal`` reads it."""

    STALE = "stale"  # of a request sent during an outage that is over: says nothing
    ECHO = "echo"  # of a request sent before the last reaction: the overload already answered
    LONE = "lone"  # fresh, a round trip or more after the last reaction: one request over the capacity
    REPEAT = "repeat"  # fresh, within a round trip of a reaction, not (yet) a burst
    BURST = "burst"  # fresh, within a round trip of a reaction, after more than ``burst_drops`` refusals: it did not suffice
    TIMEOUT = "timeout"  # a request that timed out


@dataclass(frozen=True, slots=True)
class Refusal:
    kind: RefusalKind
    level: float  # what was in flight when it came (this request included)
    same_level: bool = False  # LONE: the previous lone refusal came at about this level (5% and one request)
    exact_level: bool = False  # LONE: ... at this very level, within one request (a concurrency cap, not a bucket)


class Refusals:
    """Fed by refusals (with their send times) and by the send times of answers; says what each refusal means.

    A reaction is the limiter acting on a fresh refusal; a refusal of a request sent
    before the last reaction is its echo.  An outage: at least ``outage_after``
    refusals in a row, with no answer to a request sent since the first of them
    for a round trip.
    """

    def __init__(self, config: LimitConfig) -> None:
        self.config = config
        self.reacted = -math.inf  # when the last fresh refusal came
        self.last = -math.inf  # when the last refusal (any kind) came
        self.echo_level = 0.0  # lowered by one per echo: in flight at the reaction, less the echoes since
        self.episode = 0  # refusals since the last lone one
        self.lone_level = -math.inf  # in flight at the last lone refusal
        self.run = 0  # refusals since the last answer to a request sent after they began
        self.run_started = math.inf
        self.recovered_at = -math.inf  # refusals of requests sent before this are an over outage's
        self.drops = 0
        self.fresh = 0  # refusals that were news (not echoes, not stale)
        self.outages = 0

    def on_refusal(self, level: float, now: float, sent_at: float, rtt: float, *, timeout: bool = False) -> Refusal:
        """Classify a refusal of a request sent at ``sent_at``; ``level``: in flight now, this one included."""
        self.drops += 1
        if sent_at < self.recovered_at:
            return Refusal(RefusalKind.STALE, level)
        if not self.run:
            self.run_started = now
        self.run += 1
        self.last = now
        self.episode += 1
        if sent_at <= self.reacted:
            self.echo_level -= 1
            return Refusal(RefusalKind.ECHO, self.echo_level)
        self.fresh += 1
        self.echo_level = level
        since, self.reacted = now - self.reacted, now
        if timeout:
            return Refusal(RefusalKind.TIMEOUT, level)
        if since < rtt:
            return Refusal(RefusalKind.BURST if self.episode > self.config.burst_drops else RefusalKind.REPEAT, level)
        self.episode = 1
        apart = abs(level - self.lone_level)
        self.lone_level = level
        return Refusal(RefusalKind.LONE, level, apart <= 1.0 + 0.05 * level, apart <= 1.0)

    def on_answer(self, now: float, sent_at: float, rtt: float) -> bool:
        """An answer to a request sent at ``sent_at``; True when it ends an outage."""
        if not self.run or sent_at < self.run_started:
            return False  # no refusals, or sent before they began: says nothing about them
        outage = self.run >= self.config.outage_after and sent_at - self.run_started >= rtt
        self.run, self.run_started = 0, math.inf
        if outage:
            self.outages += 1
            self.recovered_at = now
            self.reacted = -math.inf
        return outage

    def in_outage(self, now: float, rtt: float) -> bool:
        """Every request for a round trip refused: what the refusals meanwhile say is not the capacity."""
        return self.run >= self.config.outage_after and now - self.run_started >= rtt

    def reset(self) -> None:
        self.run, self.run_started, self.reacted, self.episode = 0, math.inf, -math.inf, 0


@dataclass(frozen=True, slots=True)
class QueueReading:
    queueing: bool
    knee: float = math.inf  # where the server stops serving more at once (requests); inf when not queueing
    room: float = 0.0  # not queueing: how many more requests the server's queue may take (``ServerLoad``)


class Latency:
    """Fed by answers' latencies and the concurrency each was sent at; says whether the server queues.

    Not a minimum (LLM latency is lognormal with a 10x spread): means over
    windows.  ``recent``: the last ``window`` answers; ``base``: at least
    ``base_samples`` answers sent at the lowest levels seen, kept per 10% band of
    concurrency.  Per output token when replies carry ``usage.completion_tokens``
    and the base's latencies per token spread less (relative to their mean) than
    its latencies: the replies' lengths explain their times, as on a server that
    decodes them; else (lengths drawn apart from the time) dividing by them would
    only add their spread.  By Little's law a server holding C sent L > C answers
    L/C times slower, so ``g = recent / base`` estimates L/C.  The base is a measurement of the server
    at one capacity: ``relearn`` drops it when the capacity moves, and a window
    far faster than it (``stale_base``) replaces it.
    """

    def __init__(self, config: LimitConfig) -> None:
        self.config = config
        self.gradient = 1.0
        self.rebases = 0
        self.queueing = False  # what the last reading said
        self._per_token: Optional[bool] = None  # replies carry their length
        self._recent: deque[tuple[float, float, float]] = deque()  # (latency, per token, level)
        self._sum = [0.0, 0.0, 0.0]  # the recent window's sums of the same
        self._bands: dict[int, deque[tuple[float, float]]] = {}  # (latency, per token) by band of level
        self._since = 0

    def relearn(self) -> None:
        """The capacity moved: what the base measured is gone."""
        self._bands.clear()
        self._recent.clear()
        self._sum[:] = [0.0, 0.0, 0.0]
        self._since = 0
        self.queueing = False

    def restart(self) -> None:
        """Judge the next window on answers sent from now on (after a cut)."""
        self._recent.clear()
        self._sum[:] = [0.0, 0.0, 0.0]

    def _keep(self, x: tuple[float, float], level: float) -> None:
        band = int(math.log(max(1.0, level)) / _LEVEL_BASE)
        q = self._bands.get(band)
        if q is None:
            q = self._bands[band] = deque(maxlen=256)
        q.append(x)

    def _base_answers(self) -> Optional[list[tuple[float, float]]]:
        """At least ``base_samples`` answers, those sent at the lowest levels (None until there are enough)."""
        got: list[tuple[float, float]] = []
        for band in sorted(self._bands):
            got.extend(self._bands[band])
            if len(got) >= self.config.base_samples:
                return got
        return None

    def _measure(self, answers: list[tuple[float, float]]) -> int:
        """Which latency ``answers`` are judged by: 1, per output token, where replies say their length and
        that spreads less than latency itself (squared coefficients of variation); else 0, latency."""
        if not self._per_token:
            return 0
        n = len(answers)
        spread = [0.0, 0.0]
        for k in (0, 1):
            mean = sum(a[k] for a in answers) / n
            spread[k] = sum((a[k] - mean) ** 2 for a in answers) / n / (mean * mean) if mean else math.inf
        return 1 if spread[1] <= spread[0] * (1.0 + 1e-9) else 0  # (equal up to rounding: every reply the same length)

    def _judged_base(self) -> Optional[tuple[float, int]]:
        """The base and the measure it is in (``_measure``); None until there are enough answers."""
        answers = self._base_answers()
        if answers is None:
            return None
        k = self._measure(answers)
        return sum(a[k] for a in answers) / len(answers), k

    def base(self) -> Optional[float]:
        """Mean latency (per token where that is the measure) of the answers sent at the lowest levels (None until there are enough)."""
        judged = self._judged_base()
        return None if judged is None else judged[0]

    def on_answer(self, rtt: float, level: float, tokens: Optional[int]) -> Optional[QueueReading]:
        """Keep one latency; a reading every half window once a window is full (None between)."""
        if self._per_token is None:
            self._per_token = bool(tokens)
        if self._per_token and not tokens:
            return None
        per = rtt / tokens if self._per_token and tokens else rtt
        recent = self._recent
        recent.append((rtt, per, level))
        total = self._sum
        total[0] += rtt
        total[1] += per
        total[2] += level
        if len(recent) > self.config.window:
            old = recent.popleft()
            for k in (0, 1, 2):
                total[k] -= old[k]
        self._keep((rtt, per), level)
        self._since += 1
        if len(recent) < self.config.window or self._since < self.config.window // 2:
            return None
        self._since = 0
        judged = self._judged_base()
        if judged is None or not judged[0]:
            return None
        base, k = judged
        n = len(recent)
        g = self.gradient = (total[k] / n) / base
        self.queueing = g > self.config.queue_cut
        if g < self.config.stale_base:
            self._bands.clear()
            for r, p, lvl in recent:
                self._keep((r, p), lvl)
            self.rebases += 1
        return QueueReading(True, (total[2] / n) / g) if self.queueing else QueueReading(False)


class ServerLoad:
    """Fed by a metrics URL's ``running`` and ``waiting`` counts (every client's); says whether the server queues.

    A queue is the server's refill: a slot its batch frees is taken at once by a waiting
    request, where a request sent in answer to it arrives only after its way back to the
    gate and out again (the gate's dispatch and the worker, and the server's front end,
    which neither runs nor queues it).  How many slots free at once is the batch's to say:
    replies of many lengths end one by one, but replies of one length admitted together end
    in one step, every slot of their batch with them.  So the queue allowed is a batch: what
    runs, the next batch waiting at the server whichever way its slots free (what that costs
    a request's wait and a shared server's other clients: ``docs/judges.md``).  The batch is what
    runs at its high, the most of the readings of the last ``LOAD_FRESH_S`` seconds: a server logs its counts
    after each step, when the sequences that step ended have left and the requests it admits
    in their place are still counted waiting, so one reading may show the batch less those
    that just ended and the next batch waiting beside it (no queue past a batch).  Requests
    on their way, ``held - running - waiting`` (``held``: what the gates have in flight),
    are what the batch frees while a replacement is under way (Little's law: they spend the
    refill's time on it), so where they are more than a batch's queue, the queue covers
    them instead.  Their number at one moment varies about its mean p as a Poisson count
    does, and one reading's counts are a snapshot of the server's (running and waiting move
    by many requests between two steps): p is a moving mean over the readings (each
    weighing 1 / ``ON_WAY_READINGS``), and the queue covers p + 2 sqrt(p) (two deviations:
    the most on their way at once, but rarely).  A reading counts at most ``running`` on
    their way: more than a batch is not a refill but requests the server's counts miss (a
    metrics URL of another or an idle server, of one replica of several).  Past the larger
    of the two, the server queues: the knee is what keeps the queue at that allowance.
    Below it, ``room`` says how far below.
    """

    def __init__(self, config: LimitConfig) -> None:
        self.config = config
        self.at = -math.inf
        self.on_way: Optional[float] = None  # mean requests on their way over the last readings (None before any)
        self._running: deque[tuple[float, float]] = deque()  # (when, running) of the readings of the last LOAD_FRESH_S

    def forget(self) -> None:
        """Start the mean of the requests on their way and the batch afresh (an endpoint that came back after being down)."""
        self.on_way = None
        self._running.clear()

    def fresh(self, now: float) -> bool:
        """Whether a reading is recent enough to steer instead of the latency signal."""
        return now - self.at <= LOAD_FRESH_S

    def reading(self, running: float, waiting: float, in_flight: float, now: float, held: Optional[float] = None) -> QueueReading:
        """A queue over its allowance: queueing, the knee being what keeps it there (``in_flight``: at the server, and
        ``held``: in flight at the gates, default ``in_flight``; both of the producers that read these counts
        together).  The allowance: the larger of a batch (what runs at its high: the most of the
        readings of the last ``LOAD_FRESH_S`` seconds) and the requests on their way (``held - running - waiting``: a server others also
        load counts theirs in running and waiting, which makes that smaller, never larger, than ours on the way)."""
        self.at = now
        readings = self._running
        readings.append((now, running))
        while now - readings[0][0] > LOAD_FRESH_S:  # (this reading stays)
            readings.popleft()
        batch = max(r for _, r in readings)
        # at most a batch: more than the server runs cannot be a refill of its batch, only requests its counts miss (a
        # metrics URL of another server, of one replica of several, a front end that holds requests uncounted)
        seen = min(batch, max(0.0, (in_flight if held is None else held) - running - waiting))
        on_way = self.on_way = seen if self.on_way is None else self.on_way + (seen - self.on_way) / ON_WAY_READINGS
        allowed = max(batch, on_way + 2.0 * math.sqrt(on_way))
        if waiting > allowed and running > 0:  # the knee: what keeps the server at a batch running and the allowance waiting
            return QueueReading(True, in_flight * (batch + allowed) / (running + waiting))
        return QueueReading(False, room=allowed - waiting)


class CapacityMemory:
    """Where the evidence put the capacity, and for how long that holds.

    ``refusal_level``: just under where fresh refusals came (growth above it is a
    slow probe); ``knee``: where queueing began; ``high``: the highest capacity
    seen (what a producer alone was answered at in steady state, Little's law, two lone refusals at one level,
    or producers together holding it).
    ``refused_level``: in flight at the last fresh refusal, or what the server admitted in the refusals that ended
    slow start where that is lower (``admits``; told to peers).  ``cap_seen``: a concurrency cap
    two lone refusals at one level showed, known within a refusal's margin (``under``).

    Expiry: a refusal level or knee says what the server allowed then.  The
    evidence that it moved up is the server answering a request sent with more
    at it than the last fresh refusal found there (``outgrew``): more than
    ``refused_level``, and more than one above ``refusal_level``; or, for a
    request that was out alone above the refusal level (``Probes.alone``), as
    many as that refusal found.  Holding the refusal level itself is no
    evidence: it sits under the capacity that refused (a share under it, or
    lower still where echoes put it).  Once that
    evidence is ``wait`` round trips old with the limit in use and no refusal,
    ``stale`` says so, and the limiter climbs back to ``high``; a climb that is
    refused as it begins doubles ``wait`` (up to ``regain_rtts_max``).

    A climb back refused at a level (``climb_refused``) bounds the capacity known
    only from answers (``high_sustained``) at that level: a capacity that is gone
    is neither climbed to nor probed for faster.  The bound says what the server
    allowed when that climb was refused, so it lapses on the same evidence as a
    refusal level (``outgrown``: the server held more than where it refused
    since), when the answers show the server sustaining more than the bound, or
    when a climb back reaches its target (``regained``).
    """

    def __init__(self, config: LimitConfig) -> None:
        self.config = config
        self.refusal_level = math.inf
        self.knee = math.inf
        self.high = 0.0
        self.high_sustained = 0.0  # the highest concurrency the answers showed the server sustaining (``held``)
        self.climb_bound = math.inf  # where a climb back to ``high_sustained`` was refused, until evidence lifts it
        self.cap_seen = 0.0  # the highest concurrency cap two lone refusals at one level showed (``capped``)
        self.echoed_down = False  # echoes lowered ``refusal_level`` since the last fresh refusal (``under``)
        self.refused_level = math.inf
        self.refused_at = -math.inf  # when the last fresh refusal came
        self.wait = config.regain_rtts
        self.quiet_since = math.inf  # the evidence that the capacity moved up, dated ``wait`` round trips back (``outgrown``)
        self.overshot = False  # a reaction to refusals did not suffice: climb back to the refusal level one per round trip

    def refused(self, level: float, *, probing: bool, now: float = -math.inf) -> None:
        """A fresh refusal at ``level`` in flight, at ``now``."""
        self.refusal_level = level if probing else level * (1.0 - self.config.fair_share)
        self.echoed_down = False
        self.refused_level = level
        self.refused_at = now
        self.quiet_since = math.inf

    def echoed(self, echo_level: float) -> None:
        self.echoed_down = self.echoed_down or echo_level < self.refusal_level
        self.refusal_level = min(self.refusal_level, echo_level)
        self.quiet_since = math.inf

    def queued(self, knee: float) -> None:
        self.knee = knee
        self.quiet_since = math.inf

    def saw(self, level: float) -> None:
        """A capacity seen: the server held ``level`` (lone refusals at one level, or peers together)."""
        self.high = max(self.high, min(self.config.ceiling, level))

    def capped(self, level: float) -> None:
        """Two lone refusals came at one level, within one request: the server refuses past about ``level`` (the
        refusal level under them), a concurrency cap (a capacity seen)."""
        self.saw(level)
        self.cap_seen = max(self.cap_seen, min(self.config.ceiling, level))

    def admits(self, level: float, limit: float) -> None:
        """While it refused, the server admitted ``level`` at once (``Admissions``): a capacity seen, and where it
        refuses now, the limit being ``limit`` (the refusal level, and the level refused told to peers, are no higher
        than the larger: the in-flight count at the refusals that led here is not)."""
        self.saw(level)
        self.refusal_level = min(self.refusal_level, max(limit, level))
        self.refused_level = min(self.refused_level, max(limit, level))

    def held(self, level: float) -> None:
        """The server sustained ``level`` requests at once over the last round trips (Little's law on its answers);
        more than where a climb back was refused lifts that bound."""
        self.high_sustained = max(self.high_sustained, min(self.config.ceiling, level))
        if level > self.climb_bound:
            self.climb_bound = math.inf

    def climb_refused(self, level: float) -> None:
        """A climb back to a capacity seen before was refused at ``level``: a capacity known only from answers
        (``high_sustained``) is not believed above it until evidence says the server holds more (``outgrown``,
        ``held``), so a capacity that is gone is not climbed to again."""
        self.climb_bound = min(self.climb_bound, level)

    def believed_sustained(self) -> float:
        """The capacity known from answers, as far as it is believed now: ``high_sustained`` under ``climb_bound``."""
        return min(self.high_sustained, self.climb_bound)

    def below(self, limit: float) -> bool:
        """``limit`` is under a capacity seen, by more than the noise of how it was seen."""
        return limit < self.config.regain * self.high or limit < self.config.regain_sustained * self.believed_sustained()

    def under(self, limit: float) -> bool:
        """``limit`` is under a capacity seen by more than the margin of how it was seen: while echoes have put the
        refusal level under a concurrency cap seen (``capped``; those are the refusals of requests sent before the
        last fresh one, not news of the cap), by more than a fresh refusal at it leaves the refusal level under it
        (``fair_share``) and one request; any other capacity seen (Little's law, peers holding a level) as ``below``
        says."""
        return (self.echoed_down and limit < self.cap_seen * (1.0 - self.config.fair_share) - 1.0) or self.below(limit)

    def target(self) -> float:
        """The level a climb back goes to: the highest capacity seen, however it was seen."""
        return max(self.high, self.believed_sustained())

    def raise_knee(self, level: float) -> None:
        """Growth above a known knee that brought no queue moves it up."""
        if self.knee < math.inf:
            self.knee = max(self.knee, level)

    def in_use(self, used: bool) -> None:
        """Whether the limit is in use: the evidence gathered (``outgrown``) lapses while it is not."""
        if not used:
            self.quiet_since = math.inf

    def outgrew(self, level: float, sent_at: float, alone: bool = False) -> bool:
        """Whether an answer to a request sent at ``sent_at`` with ``level`` at the server shows it holding more than
        where it last refused: sent after that refusal (one sent before says nothing of it), above the in-flight
        count at it, and more than one above the refusal level.  ``alone``: no other request was out above the
        refusal level when it was sent (``Probes.alone``), so none of those counted with it was a refusal on its
        way back, counted in flight but holding no slot: then as many as that refusal found is evidence (the
        server held them all at once where it refused them before)."""
        if sent_at <= self.refused_at or level <= self.refusal_level:
            return False
        if alone:
            return level >= self.refused_level
        return level > self.refused_level and level > self.refusal_level + 1.0

    def outgrown(self, now: float, rtt: float) -> None:
        """The server held more than where it last refused (``outgrew``): evidence worth ``regain_rtts`` round trips
        in use without a refusal (``stale`` then says so at once, unless a refused climb back asked for more).  The
        capacity that refused is gone: so is the bound a refused climb back set (``climb_refused``)."""
        self.quiet_since = min(self.quiet_since, now - self.config.regain_rtts * rtt)
        self.climb_bound = math.inf

    def stale(self, now: float, rtt: float, limit: float) -> bool:
        """Evidence (``outgrown``) ``wait`` round trips old, in use with no refusal since, below the highest capacity
        seen: it came back."""
        return self.below(limit) and now - self.quiet_since >= self.wait * rtt

    def regained(self, level: float) -> None:
        """All of it came back, up to ``level``: the next climb wants the usual evidence; the old levels are gone
        (growth above ``level`` is a probe, as above a refusal)."""
        self.wait = self.config.regain_rtts
        self.quiet_since = math.inf
        self.climb_bound = math.inf
        self.refusal_level = level + 1.0
        self.knee = math.inf
        self.overshot = False

    def regain_refused(self) -> None:
        self.wait = min(self.config.regain_rtts_max, 2 * self.wait)

    def forget(self) -> None:
        """Back to knowing nothing but the capacities seen (``high``, ``high_sustained`` and its ``climb_bound``, ``cap_seen``: an endpoint
        back from down)."""
        self.refusal_level = self.knee = self.refused_level = math.inf
        self.echoed_down = False
        self.quiet_since = math.inf
        self.overshot = False


class Probes:
    """Fed by the send times of requests sent above the refusal level (probes) and by how long refusals took to come
    back; says whether a probe was out alone.

    A refused request is counted in flight until its refusal comes back (50-300 ms where a gateway queues before
    refusing), but holds no slot at the server meanwhile: a request sent beside it is counted one level higher than
    the server held.  A probe sent when no other probe had been sent within the longest a recent refusal took to come
    back had no such neighbour among the probes: its level is what the server held (``CapacityMemory.outgrew``),
    unless a request sent at or under the refusal level (not a probe, not told of) was refused meanwhile.  Each send
    instant keeps the instant of the probe before it, so the answer is the same however late it is asked; the last
    ``PROBES_KEPT`` instants are kept (an older probe is not known to have been alone).  Seconds, as the gate's clock.
    """

    def __init__(self) -> None:
        self._sent: dict[float, list[float]] = {}  # send instant -> [probes sent at it, the instant before], oldest first
        self._last = -math.inf  # the latest send instant
        self._refusal_s: deque[float] = deque(maxlen=16)  # how long the last refusals took to come back

    def sent(self, now: float) -> None:
        """A request went out above the refusal level at ``now``."""
        got = self._sent.get(now)
        if got is not None:
            got[0] += 1
            return
        self._sent[now] = [1.0, self._last]
        self._last = now
        if len(self._sent) > PROBES_KEPT:
            del self._sent[next(iter(self._sent))]

    def refused(self, seconds: float) -> None:
        """A refusal came back ``seconds`` after its request was sent (not a timeout: that is not a refusal's way back)."""
        self._refusal_s.append(max(0.0, seconds))

    def span(self) -> float:
        """The longest a recent refusal took to come back (0 before any)."""
        return max(self._refusal_s, default=0.0)

    def alone(self, sent_at: float) -> bool:
        """Whether the probe sent at ``sent_at`` was told of (``sent``) and no other was sent in the ``span`` before it,
        nor with it (False for a request whose send this was not told of: nothing is known of its neighbours)."""
        got = self._sent.get(sent_at)
        return got is not None and got[0] == 1 and sent_at - got[1] > self.span() + 1e-9


class Hangs:
    """Fed by answers (when each request was sent, how long after it was answered, and the reply's length when it
    says); says whether a timeout was a hung request.

    A timeout hung when the server answered a request sent after this one had already waited longer than the
    server could have kept it for its load: ``hang`` times the longest of the last ``HANG_ANSWERS`` answers, and
    the time those answers say the longest reply it may send takes now (``longest_reply_s``).  The server was
    then serving, and fast, while this request was overdue by far (a dropped connection, a stuck generation),
    which says nothing of its load.  A server that queues answers slowly too (its longest answers grow with the
    wait), and one that stops answering answers nothing sent after a request became overdue: their timeouts are
    not hung.  Nor is the timeout of a reply that may be long on a server that decodes: the answers are only
    the replies that came back within the timeout, so on a loaded server whose long replies all pass it they
    are the short ones, fast however slow the long ones are; the replies' lengths say its pace (seconds per
    token), and at that pace the longest reply may take longer than the timeout: then timeouts are its load.
    With no answer yet, none is.  Seconds, as the gate's clock (send to answer, as the gate sees it); tokens.
    """

    def __init__(self, config: LimitConfig, reply_tokens: Optional[int] = None) -> None:
        """``reply_tokens``: the longest reply a request may get (its ``max_tokens``; None: not known)."""
        self.config = config
        self.reply_tokens = reply_tokens
        self.count = 0  # timeouts found hung
        self._latencies: deque[float] = deque(maxlen=HANG_ANSWERS)
        self._told: deque[tuple[float, int]] = deque(maxlen=HANG_ANSWERS)  # (latency, tokens) of answers saying their length
        self._answered_sent = -math.inf  # when the latest-sent request answered so far was sent

    def allow(self, reply_tokens: Optional[int]) -> None:
        """Requests may also get replies of ``reply_tokens`` (another config of the same judge; None: not known, and
        from then on the longest reply is not known)."""
        if self.reply_tokens is not None:
            self.reply_tokens = None if reply_tokens is None else max(self.reply_tokens, reply_tokens)

    def on_answer(self, sent_at: float, now: float, tokens: Optional[int] = None) -> None:
        """The request sent at ``sent_at`` was answered at ``now``, with a reply of ``tokens`` (None: not said; a
        count over ``reply_tokens`` is read as that many: a reply is no longer than the request allowed)."""
        self._latencies.append(now - sent_at)
        self._answered_sent = max(self._answered_sent, sent_at)
        if tokens is not None and tokens > 0:
            self._told.append((now - sent_at, tokens if self.reply_tokens is None else min(tokens, self.reply_tokens)))

    def longest_reply_s(self) -> float:
        """Seconds the longest reply a request may get (``reply_tokens``; not known: the longest of the answers read)
        takes at the pace of the last ``HANG_ANSWERS`` answers that said their length: their least-squares line of
        latency on length, its slope taken two standard errors low (lengths that barely explain the times give no
        pace), read at that length.  0 when no pace is known: fewer than 16 such answers, all of one length (their
        time is not told apart from what every request costs), or a slope not surely above 0."""
        told = self._told
        n = len(told)
        if n < 16:
            return 0.0
        mean_x = sum(x for _, x in told) / n
        mean_y = sum(y for y, _ in told) / n
        sxx = sum((x - mean_x) ** 2 for _, x in told)
        if sxx <= 1e-9 * n * mean_x * mean_x:
            return 0.0
        slope = sum((x - mean_x) * (y - mean_y) for y, x in told) / sxx
        sse = sum((y - mean_y - slope * (x - mean_x)) ** 2 for y, x in told)
        low = slope - 2.0 * math.sqrt(max(0.0, sse) / (n - 2) / sxx)
        if low <= 0.0:
            return 0.0
        most = self.reply_tokens if self.reply_tokens is not None else max(x for _, x in told)
        return max(0.0, mean_y + low * (most - mean_x))

    def hung(self, sent_at: float) -> bool:
        """Whether the request sent at ``sent_at`` that timed out hung (counted when it did)."""
        longest = max(self._latencies, default=0.0)
        if longest <= 0.0 or self._answered_sent <= sent_at + self.config.hang * longest:
            return False
        if self._answered_sent > sent_at + self.longest_reply_s():
            self.count += 1
            return True
        return False


class Admissions:
    """Fed by the send time of every request and of every refused one; says how many per second the server admitted
    over a span (requests sent in it, less those refused).

    While a server refuses, what it admits is its capacity as a rate: a token bucket's refill once its reserve is
    spent, a concurrency cap's slots as they free.  Little's law on the answers (``Throughput``) says the same a round
    trip late, and after a token bucket's reserve it counts what the reserve let through as well.  A refusal comes back
    within ``Probes.span`` of its send: the caller ends the span that long before now, so a request in it that is not
    refused was admitted.  The last ``ADMISSIONS_KEPT`` sends and refusals are kept.  Seconds, as the gate's clock.
    """

    def __init__(self) -> None:
        self._sent: deque[float] = deque(maxlen=ADMISSIONS_KEPT)
        self._refused: deque[float] = deque(maxlen=ADMISSIONS_KEPT)  # send instants of refused requests

    def sent(self, now: float) -> None:
        self._sent.append(now)

    def refused(self, sent_at: float) -> None:
        self._refused.append(sent_at)

    def rate(self, since: float, until: float) -> Optional[float]:
        """Requests admitted per second among those sent in [``since``, ``until``]; None when the span is empty, holds
        fewer than ``ADMISSIONS_MIN`` sends, begins before the oldest send kept, or is a storm: less than
        ``STORM_SHARE`` of the sends admitted (an outage, a tenant taking everything for a while) says nothing of the
        capacity, where a token bucket past its reserve admits its refill, a share of what is sent however deep the
        reserve that carried the sends past it."""
        if until <= since or not self._sent or self._sent[0] > since:
            return None
        sent = 0
        for t in reversed(self._sent):
            if t < since:
                break
            sent += t <= until
        if sent < ADMISSIONS_MIN:
            return None
        admitted = max(0, sent - sum(1 for t in self._refused if since <= t <= until))
        return None if admitted < STORM_SHARE * sent else admitted / (until - since)


class Throughput:
    """Fed by answers (when, latency, round trip from the gate); Little's law on the last few round trips: the
    concurrency that carried them."""

    def __init__(self) -> None:
        self._answers: deque[tuple[float, float, float]] = deque()  # (when, latency, round trip from the gate)
        self._sum = 0.0
        self._trips = 0.0

    def on_answer(self, now: float, rtt: float, mean_rtt: float, trip: float) -> None:
        """``rtt``: the answer's latency, ``trip``: from the gate's send to now, seconds."""
        self._answers.append((now, rtt, trip))
        self._sum += rtt
        self._trips += self._answers[-1][2]
        while self._answers[0][0] < now - max(1.0, 4 * mean_rtt):
            _, old, old_trip = self._answers.popleft()
            self._sum -= old
            self._trips -= old_trip

    def trip(self) -> float:
        """The mean round trip from the gate of the answers in the window, seconds (0 when too few)."""
        return self._trips / len(self._answers) if len(self._answers) >= 20 else 0.0

    def sustained(self, now: float, mean_rtt: float) -> float:
        """Answers/s x their mean latency over the window (0 when too few)."""
        span = max(1.0, 4 * mean_rtt)
        if len(self._answers) < 20 or now - self._answers[0][0] < 0.5 * span:
            return 0.0
        return self._sum / min(span, now - self._answers[0][0])
