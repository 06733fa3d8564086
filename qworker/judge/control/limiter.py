"""An adaptive concurrency limit for one endpoint: estimators combined by a mode state machine.

The algorithm only; ``gate`` enforces it.  Units: seconds (the gate's clock),
requests at the server (as the server counts them: ``Endpoint.at_server``).  Only the dispatcher thread calls it.  Little's law gives the target:
a judge serving C requests at once with latency R sustains C/R requests/s, and
holding exactly C in flight gets all of it.

Each signal has its estimator (``estimators``): ``Refusals`` (429s, overload
503s, timeouts: echo, lone, burst, outage), ``Latency`` (queueing against a
baseline re-learnt as the capacity moves), ``ServerLoad`` (a metrics URL's
running/waiting), ``CapacityMemory`` (refusal level, knee, highest capacity
seen; expiring) and ``Throughput`` (Little's law on recent answers).  The limit
moves only here, by mode:

==========  ============================================  ============  ==========================================
mode        event                                         to            the limit
==========  ============================================  ============  ==========================================
PROBING     an answer, in use, no queue                   PROBING       + ``slow_start_step`` (x1.5 per round trip)
PROBING     a fresh refusal                               HOLDING       the level of a round trip ago (/1.5)
PROBING     ``adopt`` before its first answer, its peers  STEADY        their largest limit; their refusal level
            already refused (``peers``)                                 is its own
STEADY      an answer, in use                             STEADY        +1 to the refusal level/knee, then a probe
                                                                        (x2 per round trip without a refusal under
                                                                        a capacity seen: ``CapacityMemory.under``)
STEADY      a lone refusal                                HOLDING       capped at what was in flight, less one
STEADY      a burst (a reaction that did not suffice)     HOLDING       what recent answers sustained, >= half; in
                                                                        the refusals that ended slow start, no more
                                                                        than what the server admits (``_admitted``:
                                                                        then a capacity seen and the refusal level)
STEADY      a timeout                                     HOLDING       ``backoff`` x what was in flight
any         a hung request: a timeout, a request sent     (the same)    (the same): the server answered, and
            once it was overdue by ``hang`` x the                       fast, while that one request was lost:
            longest recent answer, and by the longest                   the load did not refuse it
            reply at the answers' pace, answered
            (``Hangs``)
STEADY      the server answered more at once than where   RECOVERING    climbs +2 per answer (x3 per round trip)
            it last refused (``outgrew``; as many for a                 to the highest capacity seen
            request out alone above it), then in use
            for ``wait`` round trips with no refusal;
            below ``regain`` x the highest capacity seen
HOLDING     a round trip with no refusal                  STEADY        (no growth meanwhile; echoes only cap)
RECOVERING  reached its target                            STEADY        (PROBING after ``reset``)
RECOVERING  a fresh refusal                               HOLDING       as STEADY; refused as it began, the next
                                                                        climb back waits longer
any         for a round trip, everything sent refused     OUTAGE        only capped (the levels meanwhile are not kept)
            (a round trip known: one answer at least)
OUTAGE      an answer to a request sent a round trip or   RECOVERING    back to what held before the refusals began
            more after the refusals began
OUTAGE      an answer to one sent less than that after    HOLDING       (it was not an outage)
not OUTAGE  queueing (latency or metrics), once per trip  STEADY        the knee: latency's x ``queue_target``;
                                                                        metrics', ``ServerLoad``'s allowance queued
not OUTAGE  a burst from idle answered in the order of    STEADY        the batch x ``queue_target`` (one more at
            its levels, or latency rising in proportion                 least); the latency base is learnt afresh
            to the level, past a batch under the starting
            limit (``batch.BatchKnee``; no fresh metrics)
any         ``reset`` (an endpoint back from down)        RECOVERING    from ``initial`` to the limit it had
==========  ============================================  ============  ==========================================

A burst needs a known round trip too.  The latency baseline is re-learnt when
the capacity moves (a burst cut, a climb back, an outage's end, a reset), from
the answers after the climb (none are kept while RECOVERING): a base measured at
one capacity read at another would take the limiter's own load for queueing.
While a metrics URL's reading is fresh it replaces the latency signal.  With peers (``peers``), ``adopt``
takes what other producers learnt, and ``answers_scale`` (the endpoint's load over this producer's) scales
Little's law and the climbs back (to the refusal level or knee, and RECOVERING): each answer stands for that
many of the endpoint's, so a limit judged against every producer's load climbs back per round trip as one
producer's alone does.  So does the probe above the refusal level: producers that share one limit probe it
as one client, ``probe`` per round trip for the endpoint, not ``probe`` / producers (the limit they share
being the lowest of theirs, a probe per own answer found a capacity the start-up burst left under, or that
moved, that many times slower).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Optional

from .batch import BatchKnee
from .estimators import (
    LOAD_FRESH_S,
    Admissions,
    CapacityMemory,
    Hangs,
    Latency,
    LimitConfig,
    Probes,
    QueueReading,
    RefusalKind,
    Refusals,
    ServerLoad,
    Throughput,
)
from .limit_trace import install

__all__ = ["AdaptiveLimit", "LOAD_FRESH_S", "LimitConfig", "Mode"]


class Mode(enum.Enum):
    PROBING = "probing"  # slow start: no refusal nor queueing seen yet
    STEADY = "steady"  # at or climbing back to where the capacity is
    HOLDING = "holding"  # a round trip after a refusal: answers to requests sent before it say nothing
    RECOVERING = "recovering"  # climbing x2 per round trip to a level known to hold
    OUTAGE = "outage"  # every request refused for a round trip: not a capacity signal


class AdaptiveLimit:
    """The limit (``limit``, requests) and its mode, moved by what the estimators say of each answer."""

    def __init__(self, *, initial: Optional[float] = None, ceiling: Optional[float] = None, config: Optional[LimitConfig] = None,
                 reply_tokens: Optional[int] = None) -> None:
        """``reply_tokens``: the longest reply a request may get (the request's ``max_tokens``; None: not known; ``Hangs``)."""
        cfg = config or LimitConfig()
        if initial is not None:
            cfg = dataclasses.replace(cfg, initial=initial)
        if ceiling is not None:
            cfg = dataclasses.replace(cfg, ceiling=ceiling)
        self.config = cfg
        self.limit = max(cfg.floor, min(cfg.ceiling, cfg.initial))
        self.mode = Mode.PROBING
        self.rtt = 0.0  # EWMA of successful round trips, seconds
        self.refusals_ = Refusals(cfg)
        self.latency = Latency(cfg)
        self.load = ServerLoad(cfg)
        self.memory = CapacityMemory(cfg)
        self.throughput = Throughput()
        self.probes = Probes()
        self.admissions = Admissions()
        self.batch = BatchKnee(below=self.limit)  # a queueing server's batch under the starting limit, without metrics
        self.answers_scale = 1.0  # the endpoint's load / this client's, at least 1: its answers are that share (``peers``)
        self.peers = 0  # other producers sharing the endpoint, as the last notes said (``peers``): 0, alone
        self.queue_cuts = 0
        self.regains = 0
        self.hangs = Hangs(cfg, reply_tokens)
        self._last_cut = -math.inf
        # when the episode of refusals that ended slow start began (inf: none now; it ends after a round trip without a
        # refusal, at a fresh lone refusal after slow start, and on ``reset``)
        self._episode_at = math.inf
        self._target = 0.0  # RECOVERING: the level climbed to
        self._then = Mode.STEADY  # RECOVERING: the mode once there
        self._regaining = False  # RECOVERING: because the capacity came back (not after an outage or reset)
        self._climb_from = 0.0  # RECOVERING: the limit the climb began at
        self._held: Optional[tuple[float, float, float, Mode]] = None  # (limit, refusal level, knee, mode) before a run of refusals
        self._why = ""  # what moved the limit last (``limit_trace`` reports it; nothing else reads it)

    # what others read ----------------------------------------------------------
    @property
    def slow_start(self) -> bool:
        return self.mode is Mode.PROBING

    @slow_start.setter
    def slow_start(self, on: bool) -> None:
        self.mode = Mode.PROBING if on else Mode.STEADY

    @property
    def drops(self) -> int:
        return self.refusals_.drops

    @property
    def refusals(self) -> int:
        """Fresh refusals so far (not echoes, not an outage's)."""
        return self.refusals_.fresh

    @property
    def outages(self) -> int:
        return self.refusals_.outages

    @property
    def high(self) -> float:
        return self.memory.high

    @property
    def refused_level(self) -> float:
        return self.memory.refused_level

    @property
    def last_drop_level(self) -> float:
        return self.memory.refusal_level

    @last_drop_level.setter
    def last_drop_level(self, level: float) -> None:
        self.memory.refusal_level = level

    @property
    def knee_level(self) -> float:
        return self.memory.knee

    @property
    def gradient(self) -> float:
        return self.latency.gradient

    @property
    def rebases(self) -> int:
        return self.latency.rebases

    def base(self) -> Optional[float]:
        return self.latency.base()

    def regaining_to(self) -> float:
        """The level this limit climbs back to as capacity returned (0: not climbing so)."""
        return self._target if self.mode is Mode.RECOVERING and self._regaining else 0.0

    def sustained(self, now: float) -> float:
        """Little's law on the recent answers: the concurrency that carried them (0 when too few), times ``answers_scale``."""
        return self.answers_scale * self.throughput.sustained(now, self.rtt)

    def _admitted(self, now: float) -> Optional[float]:
        """In the episode of refusals that ended slow start, the concurrency the endpoint admits now, as the gate counts
        it (None: not in one, or too few sends yet): what it admitted per second since the episode began
        (``Admissions``, up to a refusal's way back before now) times the recent answers' mean round trip from the
        gate, times ``answers_scale``."""
        admitted = self.admissions.rate(self._episode_at, now - self.probes.span())
        trip = self.throughput.trip()
        return None if admitted is None or not trip else self.answers_scale * admitted * trip

    def _round_trip(self) -> float:
        return self.rtt or 0.05

    def _reach(self, now: float) -> float:
        """How far above the refusal level the probe goes per round trip now: ``probe``; under a capacity seen
        (``CapacityMemory.under``: a concurrency cap by more than a refusal at it leaves, any other by ``regain``),
        doubling for each round trip since the last refusal (after the round trip that refusal holds), up to
        ``probe_max``.

        A refusal level under a capacity seen before measures a capacity that moved and may move back (a
        tenant that leaves, a replica that returns): each round trip the server holds it without a refusal,
        the search above it widens (an exponential search, as slow start's), so a return is found within a
        few round trips; a refusal starts it again.  Each search that finds the capacity unchanged costs a
        refusal: ``probe`` and ``probe_max`` trade how often that happens (at a capacity that moved for good:
        every few round trips) against how soon a return is found.  At the highest capacity seen, the probe
        stays slow: there it only tracks a capacity that holds, and each crossing costs a refusal.  A refusal
        level that echoes put a few under a concurrency cap seen (an overshoot while another client's requests
        drained) is under it: the probe doubles back to it rather than creeping for tens of round trips."""
        cfg = self.config
        quiet = (now - max(self.refusals_.last, self._last_cut)) / self._round_trip() - 1.0
        if quiet <= 0.0 or not self.memory.under(self.limit):  # both endpoint-wide: the limit already counts peers
            return cfg.probe
        return min(cfg.probe_max, cfg.probe * 2.0 ** min(quiet, 16.0))

    def _outgrew(self, level: float, arrived: float, sent_at: float) -> bool:
        """Whether an answer to a request sent at ``sent_at`` (the gate's clock; ``arrived``: when it reached the server)
        with ``level`` at the server shows it holding more than where it last refused (``CapacityMemory.outgrew``),
        or as many, for a request that was out alone above the refusal level (``Probes.alone``; a producer alone:
        the requests its peers send are not seen here)."""
        mem = self.memory
        if mem.outgrew(level, arrived):
            return True
        return self.peers == 0 and mem.outgrew(level, arrived, alone=True) and self.probes.alone(sent_at)

    def _in_use(self, in_flight: float) -> bool:
        """Growth is earned only by a limit that is in use."""
        return in_flight >= self.limit - max(2.0, self.limit / 8)

    # transitions -------------------------------------------------------------
    def _cut(self, to: float, now: float, mode: Mode) -> None:
        self._last_cut = now
        self.mode = mode
        self.limit = max(self.config.floor, min(self.limit, to))

    def _recover_to(self, target: float, then: Mode, *, regaining: bool) -> None:
        if target > self.limit:
            self.mode, self._target, self._then, self._regaining = Mode.RECOVERING, min(self.config.ceiling, target), then, regaining
            self._climb_from = self.limit
        else:
            self.mode = then

    def _on_queue(self, reading: QueueReading, now: float, why: str) -> None:
        if not reading.queueing or self.mode is Mode.OUTAGE or now - self._last_cut < self._round_trip():
            return
        self._why = why
        self.memory.queued(max(self.config.floor, reading.knee))
        self.queue_cuts += 1
        self._cut(self.memory.knee, now, Mode.STEADY)
        self.latency.restart()  # judge the cut on answers sent after it

    def _on_batch(self, batch: Optional[float], now: float) -> None:
        """Latency rose in proportion to the level past ``batch`` (``BatchKnee``): a queue there.  The limit goes to
        the batch plus a tenth, one request at least (a slot the server frees is refilled from its queue, not after a
        round trip through the client), and the latency base, learnt in that queue, is learnt afresh at it (meanwhile
        the fit, on the answers it keeps, holds the limit there)."""
        if batch is None:
            return
        target = batch + max(1.0, (self.config.queue_target - 1.0) * batch)
        if target >= self.limit or self.mode is Mode.OUTAGE or now - self._last_cut < self._round_trip():
            return
        self._on_queue(QueueReading(True, target), now, f"batch:{self.batch.source} {batch:g}")
        self.latency.relearn()

    # signals -----------------------------------------------------------------
    def on_send(self, level: float, now: float) -> None:
        """A request sent at ``now`` with ``level`` at the server (every producer's, itself included)."""
        self.batch.on_send(level, now)
        self.admissions.sent(now)
        if level > self.memory.refusal_level:
            self.probes.sent(now)

    def on_ended(self, sent_at: float, now: Optional[float]) -> None:
        """A call sent at ``sent_at`` (``on_send``'s ``now``) ended at ``now`` (None: not known), whatever its outcome,
        after any ``on_success`` or ``on_drop`` for it.  The caller calls it once for every ``on_send`` (the gate does,
        in ``settle`` and ``_release``): a call never ended keeps a burst from being read."""
        self.batch.ended(sent_at, now)

    def on_server_load(self, running: float, waiting: float, in_flight: float, now: float, held: Optional[float] = None) -> None:
        """A metrics URL says ``running`` requests are being served and ``waiting`` are queued (all clients);
        ``in_flight``: at the server, and ``held``: in flight at the gates (default ``in_flight``), both of this
        producer and the peers it knows of.  Queueing past what refills the batch cuts to the knee; a queue short of
        it lets the limit grow by what it lacks (one at least; x1.5 in slow start)."""
        cfg = self.config
        reading = self.load.reading(running, waiting, in_flight, now, held)
        if reading.queueing:
            self._on_queue(reading, now, "queue:metrics")
            return
        below = self.memory.refusal_level - 1.0
        if self._in_use(in_flight) and self.limit < below and self.mode in (Mode.PROBING, Mode.STEADY):
            step = self.limit * cfg.slow_start_step if self.mode is Mode.PROBING else max(1.0, reading.room)
            self.limit = min(cfg.ceiling, self.limit + step, below)
            self.memory.raise_knee(self.limit)

    def on_success(self, rtt: float, in_flight: float, now: float, *, level: Optional[float] = None, tokens: Optional[int] = None,
                   sent_at: Optional[float] = None, surely: Optional[float] = None) -> None:
        """A request answered normally after ``rtt`` seconds.

        ``in_flight``: requests outstanding now, this one included; ``level``:
        requests outstanding when it was sent (default ``in_flight``); ``surely``: of those, the ones surely at
        the server when it got there (default ``level``: the evidence that the server held more than where it
        refused is judged on these, not on a count that may include answers on their way back); ``tokens``: its
        ``usage.completion_tokens`` when the reply said; ``sent_at``: when the gate sent it (default ``now - rtt``).
        """
        cfg = self.config
        sent_level = float(level if level is not None else in_flight)
        sent = now - rtt if sent_at is None else sent_at  # when the gate sent it
        self.hangs.on_answer(sent, now, tokens)
        self.rtt = rtt if self.rtt == 0.0 else 0.9 * self.rtt + 0.1 * rtt
        self.throughput.on_answer(now, rtt, self.rtt, now - sent)
        trip = self._round_trip()
        outage = self.refusals_.on_answer(now, now - rtt, trip)
        if outage and self._held is not None:
            # An answer to a request sent after the refusals began, they having been an outage: back to what held before
            limit, self.memory.refusal_level, self.memory.knee, mode = self._held
            self.latency.relearn()
            self._recover_to(limit, Mode.PROBING if mode is Mode.PROBING else Mode.STEADY, regaining=False)
        elif self.mode is Mode.OUTAGE and not self.refusals_.run:  # answered within a round trip of the run's start
            self.mode = Mode.HOLDING
        if not self.refusals_.run:
            self._held = None
        if self.mode is Mode.OUTAGE:  # an answer to a request sent before the outage: the refusals go on
            return
        if self.mode is not Mode.RECOVERING:  # (the base is learnt where the climb ends, not on the way)
            reading = self.latency.on_answer(rtt, sent_level, tokens)
            if reading is not None and not self.load.fresh(now):  # the knee, plus a queue of a tenth of it
                self._on_queue(QueueReading(reading.queueing, reading.knee * cfg.queue_target), now,
                                f"queue:latency knee={reading.knee:.1f} g={self.latency.gradient:.2f}")
            if not self.load.fresh(now):
                self._on_batch(self.batch.on_answer(rtt, sent_level, sent, now), now)
        used = self._in_use(in_flight)
        if self.mode is Mode.HOLDING and now - self.refusals_.last >= trip:
            self.mode = Mode.STEADY
            self._episode_at = math.inf  # a round trip without a refusal: the episode is over
        if self.mode is Mode.STEADY and self.peers == 0 and now - self._last_cut >= max(1.0, 4 * trip):
            # What the server sustained (Little's law on the answers of the last round trips, no more than this
            # limit allowed), once those answers are all from after slow start and the last cut: a burst
            # (slow start's overshoot, a token bucket's first second) is not a capacity.  Alone only: with
            # peers, the endpoint's capacity is what they note together (``adopt``)
            self.memory.held(min(self.sustained(now), self.limit))
        if self.mode is Mode.STEADY and self._outgrew(sent_level if surely is None else float(surely), now - rtt, sent):
            # The server held more than where it last refused (this request was sent with that many at it), or,
            # sent with no other out above the refusal level, as many: the capacity that refused is no longer
            # there; what was seen above it is evidence enough to climb to
            self.memory.outgrown(now, trip)
        self.memory.in_use(used and self.mode is Mode.STEADY)  # (evidence lapses while the limit is not in use)
        if self.mode is Mode.STEADY and self.memory.stale(now, trip, self.limit):
            # In use for round trips with no refusal, below a capacity seen before: it came back (a tenant
            # left, a replica returned).  Climb back x2 per round trip to it, on a base learnt afresh.
            self.regains += 1
            self.latency.relearn()
            self._recover_to(self.memory.target(), Mode.STEADY, regaining=True)
        if self.mode is Mode.RECOVERING:
            if used:
                self.limit = min(cfg.ceiling, self._target, self.limit + (2.0 if self._regaining else 1.0) * self.answers_scale)
            if self.limit >= self._target:
                if self._regaining:
                    self.memory.regained(self.limit)
                    self.latency.relearn()
                self.mode, self._regaining = self._then, False
            return
        if self.mode is Mode.HOLDING or self.load.fresh(now) or not used:
            return  # after a refusal, while a metrics URL steers (``on_server_load``), or with the limit not in use
        queueing = self.latency.queueing
        mem = self.memory
        below = mem.refusal_level - 1.0
        if self.mode is Mode.PROBING:
            if queueing:
                return
            grown = self.limit + (cfg.slow_start_step if self.limit < 2 * cfg.initial else cfg.slow_start_step / 2)
        elif self.limit < min(below, mem.knee):  # back to where the capacity was: one per success
            grown = min(self.limit + self.answers_scale * (1.0 / self.limit if mem.overshot else 1.0), below, mem.knee)
        elif queueing:
            return
        elif self.limit < below:  # above the knee of a queueing server: one per round trip
            grown = min(self.limit + self.answers_scale / self.limit, below)
            mem.raise_knee(grown)
        else:  # probe: the same per round trip for every client of the endpoint (producers sharing a limit are one),
            # doubling each round trip it holds
            grown = self.limit + self.answers_scale * self._reach(now) / max(1.0, self.limit)
        self.limit = min(cfg.ceiling, grown)

    def on_drop(self, in_flight: float, now: float, sent_at: float, *, timeout: bool = False) -> None:
        """The endpoint refused a request sent at ``sent_at`` (429/503), or it timed out.

        ``in_flight`` counts the requests outstanding, this one included.  A timeout that hung (``Hangs``) changes
        nothing here.
        """
        if timeout and self.hangs.hung(sent_at):  # (the mode table): not the load; nothing moves (the gate decides it
            # first, as Kind.HUNG, and then does not call here: this keeps the limiter whole on its own)
            return
        cfg = self.config
        recovering = self.mode is Mode.RECOVERING
        held = (max(self.limit, self._target) if recovering else self.limit, self.memory.refusal_level, self.memory.knee,
                self._then if recovering else self.mode)
        trip = self._round_trip()
        r = self.refusals_.on_refusal(in_flight, now, sent_at, trip, timeout=timeout)
        self.batch.refused()
        if not timeout:
            self.probes.refused(now - sent_at)
            self.admissions.refused(sent_at)
        if r.kind is RefusalKind.STALE:
            return
        if self.refusals_.run == 1:  # the first of a run: what held before it, should it be an outage
            self._held = held
        if r.kind is RefusalKind.LONE:  # an episode begins: what the server admits in it is read after slow start only
            self._episode_at = now if self.mode is Mode.PROBING else math.inf
        if r.kind is RefusalKind.ECHO:
            self.memory.echoed(r.level)
        elif self.mode is not Mode.OUTAGE:  # (an outage's refusals only cap: they say nothing of the capacity)
            level = max(1.0, min(float(in_flight), self.limit))
            probing = self.mode is Mode.PROBING
            if self.mode is Mode.RECOVERING and self._regaining:
                self.memory.climb_refused(level)
                if in_flight <= self._climb_from + 1.0:
                    # refused as the climb back began: the evidence that capacity came back was wrong (a climb refused
                    # higher up found some of it: not all came back, and the evidence was right)
                    self.memory.regain_refused()
            self.memory.refused(float(in_flight), probing=probing, now=now)
            step = cfg.slow_start_step if self.limit < 2 * cfg.initial else cfg.slow_start_step / 2
            self._why = f"refusal:{r.kind.value}" + (":probing" if probing else "")
            if probing:  # the level of a round trip ago was the last one known to hold
                self._cut(level / (1.0 + step), now, Mode.HOLDING)
            elif r.kind is RefusalKind.TIMEOUT:
                self._cut(cfg.backoff * level, now, Mode.HOLDING)
            elif r.kind is RefusalKind.BURST and self.rtt:  # (with no answer yet, "within a round trip" means nothing)
                # What the endpoint accepts (Little's law: answers/s x latency, less a twentieth for their noise), or
                # half when that is unknown.  Past slow start, no more than it admits now (``_admitted``): the
                # answers lag a round trip and, past a token bucket's reserve, count what the reserve let through.
                # What it admits is a capacity seen, and where it refuses (growth above it is a probe).
                accepts = 0.95 * self.sustained(now)
                admitted = self._admitted(now)  # (None in a storm: ``Admissions.rate``)
                if admitted is not None:
                    accepts = min(accepts, admitted) if accepts else admitted
                self._cut(max(cfg.backoff_again * level, min(level, accepts)), now, Mode.HOLDING)
                if admitted is not None:
                    self.memory.admits(admitted, self.limit)
                self.memory.overshot = True
                self.latency.relearn()
            elif r.kind is RefusalKind.LONE and r.exact_level:  # two lone refusals at one level: a concurrency cap
                self.memory.capped(self.memory.refusal_level)
            elif r.kind is RefusalKind.LONE and r.same_level:  # about one level (a bucket's vary): a capacity seen
                self.memory.saw(self.memory.refusal_level)
        if self.mode is not Mode.OUTAGE:
            # (no outage before a round trip is known: the first refusals of a latecomer to a full server are not one)
            self.mode = Mode.OUTAGE if self.rtt and self.refusals_.in_outage(now, trip) else Mode.HOLDING
            self._regaining = False
        self.cap(in_flight)

    def adopt(self, level: float, high: float, regain: float = 0.0, refused: float = 0.0) -> None:
        """What other producers of the endpoint learnt (``peers``): their largest limit ``level``, taken
        before this limit's first answer; the highest capacity they saw (``high``); ``regain``, the
        level one of them climbs back to as capacity returned, which this limit climbs to as well; and
        ``refused``, every producer's requests in flight at the last refusal one of them took (0: none yet).

        A level taken after the peers were refused is what their refusals left, not a slow-start guess: the
        limit leaves slow start with their refusal level (growth above it is the probe), so its first refusal
        caps it as any refusal does rather than cutting it to a level of a round trip ago it never had (a cut
        that, the lowest limit being every producer's, would be theirs too)."""
        if self.rtt == 0.0 and not self.drops:
            if level > self.limit:
                self.limit = min(self.config.ceiling, level)
            if refused >= 1.0 and level >= 1.0 and self.mode is Mode.PROBING:  # (below the initial limit too: theirs)
                self.limit = max(self.config.floor, min(self.limit, level))
                self.memory.refused(refused, probing=False)
                self.mode = Mode.STEADY
        self.memory.saw(high)
        if regain > self.limit and self.mode is Mode.STEADY:
            self._recover_to(regain, Mode.STEADY, regaining=True)

    def cap(self, in_flight: float) -> None:
        """The refused request's slot is not reused until something finishes."""
        self.limit = max(self.config.floor, min(self.limit, in_flight - 1))

    def reset(self) -> None:
        """Back to slow start (an endpoint that came back after being down): x2 per round trip to the limit it had, then x1.5."""
        cfg = self.config
        old = self.limit
        self.refusals_.reset()
        self._held = None
        self._episode_at = math.inf
        self.limit = max(cfg.floor, min(cfg.ceiling, cfg.initial))
        self._last_cut = -math.inf
        self.memory.forget()
        self.latency.relearn()
        self.hangs = Hangs(cfg, self.hangs.reply_tokens)  # answers from before it went down say nothing of how fast it answers now
        self.load.forget()
        self.batch.clear()
        self.mode = Mode.PROBING
        self._recover_to(old, Mode.PROBING, regaining=False)


install(AdaptiveLimit)  # a debug trace of every change, only with QWORKER_LIMIT_TRACE set
