"""Where a queueing server's batch ends, from latency against the concurrency each request was sent at (no metrics URL).

A server that serves C requests at once and queues the rest (vLLM's and SGLang's
``--max-num-seqs``) answers a request sent with L requests in flight after about
``S x max(1, L / C)`` seconds, S being its service time: flat up to its batch, then
rising in proportion to what is in flight (Little's law; a FIFO queue's first burst
follows the same line).  ``BatchKnee`` fits that line to the answers, by the level
each was sent at, and says where the batch ends when the fit is clear.  The fit waits
for the answers from past the batch, which come a service time or more after the
rest; sooner, ``BurstOrder`` reads the order in which a burst sent from idle is
answered: a FIFO queue answers it in the order of its levels, a server serving the
whole burst at once in no order.  Both need the levels in the order the server saw
them; a burst whose requests reach it in another order (workers racing to send it)
shows neither, and ``Saturation`` reads it whole, at its mean level, against what is
sent while it is out: latency in proportion to the level is a server past its batch.
``BatchKnee`` reports any of their batches.

The fit listens from the start (and after ``clear``: an endpoint back from down), and
again from an answer to a request sent to a (nearly) idle server (sent at ``IDLE``
or under): only a burst from idle spreads its levels from 1 up, and the fit is
anchored on such answers.  Once ``WINDOW`` answers have gone by with none sent at
``IDLE`` or under, no fit can be made: it forgets what it kept and stops listening
until the next such answer (an answer sent above ``IDLE`` meanwhile costs a
comparison).  While it listens, each fit that finds the batch reports it again,
so the limiter keeps the limit at it on the answers of that burst and after.

Its meaning: **latency rising in proportion to the requests in flight past a level
is a queue past that level.**  Only answers sent at levels at least ``SPREAD`` apart
can show it, as a limit that starts above the batch sends them (levels 1 to the
starting limit in its first burst); then the latency baseline the ``Latency``
estimator learns from the first answers was measured in the server's queue, and a
gradient against it cannot see the queue.  So it speaks only of a batch below
``below`` (the limit the endpoint started at): a batch above that the ``Latency``
gradient finds.  And it reads only answers sent at ``below`` or under: above it,
requests go out while slow start raises the load (x1.5 per round trip), and each
meets more than the level it was sent at before it is answered.  A FIFO queue
answers it as its level says (what is sent after waits behind it), but a server
whose batch shares its compute (vLLM on CPU) slows it for every request that joins
after it, and there latency rises with the level faster than the server's own
curve, as a queue's would.  So a batch is found where ``RISE`` x it is ``below`` or
under.  Latency that rises slower than in proportion (a server that slows
under load but still serves more at once) does not fit the line and says nothing.
Units: seconds, requests.  Only the dispatcher thread calls it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from typing import Optional

__all__ = ["BatchKnee", "BurstOrder", "Saturation"]

BAND = math.log(1.1)  # answers are grouped per 10%-wide band of the level they were sent at
WINDOW = 512  # the latest answers the fit reads; with none of them sent at ``IDLE`` or under, it stops listening
MIN_ANSWERS = 32  # answers before a fit is tried
EVERY = 8  # answers between fits
SPREAD = 2.0  # the highest level read / the lowest: below this the levels say nothing of a knee
IDLE = 2.0  # the lowest level read, at most: the line is anchored on answers from a server with (nearly) nothing else to do
RISE = 1.5  # the top level over the knee found, at least: a shallower queue is the ``Latency`` gradient's to see
FIT = 0.6  # the line's squared error, at most this share of a flat latency's: the rise is the line, not noise
SIDE = 6  # answers at least, both at or under the knee and at ``RISE`` x it or more
AT_ONCE = 0.25  # a burst is sent at once when its sends span at most this share of the time to its first answer
SURE = 4.0  # the rise from under the knee to past it, at least this many standard errors (lognormal noise makes flukes)
QUEUED = 2.0  # a burst's order is read once it has been out this many times its first answer's latency (``BurstOrder``)
POOL = 16  # answers, at least, in each of the two pools ``Saturation`` compares
NEAR = 1.3  # the two pools' levels differ by this factor at least
PROPORTION = 1.1  # the knee read off two pools at most this factor over the lower level: latency rose in proportion
ROUNDS = 1.3  # the same for a burst from idle: a queue serves it in rounds of its batch, its mean latency over the line
STEP = 1.25  # past the batch at a level: the batch reported is this factor under it (the next level read)
SURE_RISE = 2.5  # the rise between the two pools, at least this many standard errors


class BurstOrder:
    """A burst sent at once from idle (levels 1 to N): whether its answers come back in the order of their levels.

    A server serving all N at once answers them in an order that has nothing to do
    with the level each was sent at; one that serves C and queues the rest in FIFO
    order answers levels 1 to C first, the rest a service time or more later.  So
    while the burst is out, the levels answered against those still out say whether
    the server queues long before the latencies of the levels past C are known
    (``BatchKnee``'s fit waits for them): a rank test (Mann-Whitney) on answered
    against outstanding levels, ``SURE`` standard errors or more.  The burst's
    answered levels then lie about evenly over 1 to C, so C is taken as twice their
    median (a few answers from past C, come back early, make it high rather than low).

    A burst opens at a request sent at ``IDLE`` or under and takes every request
    sent until its first answer; an answer belongs to it when sent (by the gate's clock)
    no later than its last request.  It is read only if it was sent at once: its sends
    span at most ``AT_ONCE`` of the time from its first send to its first answer.
    Requests sent one after another (rewards streamed as rollouts finish) come back in
    the order they were sent, queue or not, so their order says nothing.  Nor does the
    order alone: a server that takes a burst in one by one (a front end tokenising each
    in turn) and serves it all at once, or one whose step slows as each joins, answers
    it in order too, with no queue.  What a queue adds is the wait for a free slot: a
    request past the batch is answered no sooner than the first slot frees (the burst's
    first answer) plus its own service (no shorter, about, than that fastest one): out
    ``QUEUED`` times the first answer's latency at least.  So the order is read only
    once the burst has been out that long; before, those still out may just be in
    service.  A refusal ends it: refused requests are not queued ones.  Units: seconds,
    requests.
    """

    def __init__(self, below: float) -> None:
        self.below = below
        self.open = False  # sending the burst (no answer yet)
        self.closed_at = -math.inf  # its last request, sent before its first answer came
        self._first_send = self._last_send = -math.inf
        self._first_back = math.inf  # seconds from its first send to its first answer
        self._back: list[float] = []  # levels answered, sorted
        self._out: list[float] = []  # levels still outstanding, sorted
        self._u = 0.0  # pairs (answered, outstanding) with the answered one sent at the lower level (ties half)

    def end(self) -> None:
        self.open, self.closed_at = False, -math.inf
        self._back.clear()
        self._out.clear()
        self._u = 0.0

    def on_send(self, level: float, now: float) -> None:
        if self.open:  # (nothing answered yet: no pairs)
            bisect.insort(self._out, level)
            self._last_send = now
        elif level <= IDLE:
            self.end()
            self.open, self._first_send, self._last_send = True, now, now
            self._out.append(level)

    def on_answer(self, level: float, sent_at: float, latency: float) -> Optional[float]:
        """An answer to a request sent at ``sent_at`` at ``level``, after ``latency`` seconds: the batch (requests) when
        the burst's answers so far show a FIFO queue past one under ``below``, else None."""
        if self.open:  # its first answer: what is sent from now on is not in it
            self.open, self.closed_at = False, self._last_send
            self._first_back = sent_at + latency - self._first_send
            if self._last_send - self._first_send > AT_ONCE * (sent_at + latency - self._first_send):
                self.end()  # sent one after another: answered in the order sent, whatever the server does
                return None
        if not self._out or sent_at > self.closed_at:
            return None
        at = bisect.bisect_left(self._out, level)
        if at == len(self._out) or self._out[at] != level:
            return None  # (not one of the burst's levels: sent after it)
        del self._out[at]
        back, out = self._back, self._out
        # it moves from outstanding to answered: its pairs as the outstanding one go, its pairs as the answered one come
        self._u -= bisect.bisect_left(back, level) + 0.5 * (bisect.bisect_right(back, level) - bisect.bisect_left(back, level))
        self._u += len(out) - bisect.bisect_right(out, level) + 0.5 * (bisect.bisect_right(out, level) - bisect.bisect_left(out, level))
        bisect.insort(back, level)
        m, n = len(back), len(out)
        if m < SIDE or n < SIDE:
            return None
        z = (self._u - m * n / 2.0) / math.sqrt(m * n * (m + n + 1) / 12.0)
        if z < SURE or sent_at + latency - self._first_send < QUEUED * self._first_back:
            return None  # (not out long enough for those outstanding to be waiting for a slot)
        median = back[m // 2] if m % 2 else 0.5 * (back[m // 2 - 1] + back[m // 2])
        batch = 2.0 * median
        self.end()
        return batch if batch < self.below else None


class Saturation:
    """Fed by answers (latency, level sent at); says when latency rose in proportion to the level: a server past its batch.

    A server past its batch answers at the batch's rate whatever is in flight, so the
    latency of what is sent there rises in proportion to the level (Little's law).  From
    a server still under its batch at the lower of two levels, latency rises less: the
    knee read off the two, ``L_hi x R_lo / R_hi`` (geometric means of the levels and
    latencies), is the batch, above the lower level; from one past its batch at both, the
    knee read is the lower level itself.  So when the knee is within ``PROPORTION`` of the
    lower level and the rise is sure (``SURE_RISE`` standard errors), the server was past
    its batch there already (``saturated_at``): a limit under that level loses no answers
    per second, and only one under the batch shows where the batch is.  It reports a batch
    ``STEP`` under that level, and holds it (reports it again) until ``POOL`` answers to
    requests sent after the report are in: the next level compared.  Once the server was
    seen past its batch, a rise slower than in proportion places the batch at the knee (at
    most ``saturated_at``).  Before, such a rise (a batch that shares its compute, a server
    that slows under load) says nothing.

    It needs no answer from an idle server, nor levels in the order the server saw them:
    requests sent at one instant (one admission) reach the server in no set order (several
    workers race to send them), so each is read at the mean of their levels.  The first
    reading compares the latest burst sent at once from idle (the first request at
    ``IDLE`` or under), all of it answered (its first answers are its fastest), with
    answers to requests sent while it was out (a queue holding the burst holds them
    behind it; what is sent after it was answered may meet others' load instead), with
    ``ROUNDS`` for ``PROPORTION`` (a queue serves a burst in rounds of its batch: its mean
    latency lies over the line through its mean level).  Later readings compare the last
    ``POOL`` answers (at their level L) with the window's answers sent at L / ``NEAR`` or
    under, else at ``NEAR`` x L or over.  Only a batch under ``below`` is reported; a
    refusal forgets everything (``clear``: refused requests are not queued ones).  Units:
    seconds, requests.
    """

    def __init__(self, below: float) -> None:
        self.below = below
        self._answers: deque[tuple[float, float, float]] = deque(maxlen=WINDOW)  # (level read at, log latency, sent at)
        self._instant = (-math.inf, 0.0, 0)  # the latest send instant: (when, sum of its levels, sends)
        self._instants: dict[float, list[float]] = {}  # an instant of several sends -> [mean level, answers still out]
        self._since = -math.inf  # the last report: the next level compared is of requests sent after it
        self._count = 0
        self.saturated_at = math.inf  # the lowest level the server was seen past its batch at
        self.held: Optional[float] = None  # the batch reported last, until the answers sent at it say more
        self._burst = math.nan  # when the latest requests sent at once from an idle server were sent
        self._burst_out = 0  # its requests not yet answered
        self._burst_done = math.inf  # when its last call ended
        self._latest = -math.inf  # the latest time an answer came or a call ended

    def clear(self) -> None:
        """Forget every answer and reading (a refusal, an endpoint back from down)."""
        self._answers.clear()
        self._instants.clear()
        self._instant = (-math.inf, 0.0, 0)
        self._since = -math.inf
        self._count = 0
        self.saturated_at = math.inf
        self.held = None
        self._burst, self._burst_out, self._burst_done = math.nan, 0, math.inf

    def on_send(self, level: float, now: float) -> None:
        """A request sent at ``level`` at ``now`` (the gate's clock: one instant per admission)."""
        when, total, n = self._instant
        if now == self._burst:
            self._burst_out += 1
        if now == when:
            self._instant = (when, total + level, n + 1)
            self._instants[when] = [(total + level) / (n + 1), float(n + 1)]
            return
        got = self._instants.get(when)
        if got is not None and got[1] <= 0:  # the instant before this one, all of it ended
            del self._instants[when]
        self._instant = (now, level, 1)
        if level <= IDLE:
            self._burst, self._burst_out, self._burst_done = now, 1, math.inf
        if len(self._instants) > WINDOW:  # (instants whose answers never came: refused, timed out)
            self._instants.clear()

    def _level(self, level: float, sent_at: float) -> float:
        """The level an answer to a request sent at ``sent_at`` at ``level`` is read at (its instant's mean)."""
        got = self._instants.get(sent_at)
        return level if got is None else got[0]

    def ended(self, sent_at: float, now: Optional[float]) -> None:
        """A call sent at ``sent_at`` ended at ``now``, whatever its outcome (answered, refused, failed, or released
        unanswered, ``now`` None: when it was released is not known, the latest time seen stands for it): it is no
        longer out.  Called once per call sent, after its answer (if any) was read."""
        if now is not None:
            self._latest = max(self._latest, now)
        if sent_at == self._burst:
            self._burst_out -= 1
            if not self._burst_out:
                self._burst_done = self._latest if now is None else now
        got = self._instants.get(sent_at)
        if got is not None:
            got[1] -= 1
            if got[1] <= 0 and sent_at != self._instant[0]:
                del self._instants[sent_at]

    def on_answer(self, latency: float, level: float, sent_at: float, now: float) -> Optional[float]:
        """An answer to a request sent at ``sent_at`` at ``level``, after ``latency`` seconds; the batch to try (requests)
        when the latest answers show the server past its batch at a level under ``below``, else None."""
        self._latest = max(self._latest, now)
        if latency <= 0.0 or level < 1.0:
            return None
        self._answers.append((self._level(level, sent_at), math.log(latency), sent_at))
        self._count += 1
        if self._count % EVERY or len(self._answers) < 2 * POOL:
            return None
        n = len(self._answers)
        recent = list(itertools.islice(self._answers, n - POOL, n))
        first_sent = min(a[2] for a in recent)  # (answers come back out of the order they were sent in)
        if first_sent <= self._since:
            return self.held  # (the answers sent at it are still on their way: the batch reported holds)
        self.held = None
        if self.saturated_at == math.inf and (self._burst_out or not first_sent > self._burst
                                              or max(a[2] for a in recent) >= self._burst_done):
            return None  # (a burst's first answers are its fastest; what is sent after it is answered meets others' load)
        others = list(itertools.islice(self._answers, 0, n - POOL))
        mid = _mean(recent)[0]
        if self.saturated_at == math.inf:  # first, a burst from idle against what was sent after it
            lower = [a for a in others if a[2] == self._burst and a[0] <= mid / NEAR]
            if len(lower) < POOL:
                return None
            pool = lower
        else:
            lower = [a for a in others if a[0] <= mid / NEAR]
            pool = lower if len(lower) >= POOL else [a for a in others if a[0] >= NEAR * mid]
            if len(pool) < POOL:
                return None
        lo, hi = (pool, recent) if pool is lower else (recent, pool)
        (l_lo, x_lo, v_lo), (l_hi, x_hi, v_hi) = _mean(lo), _mean(hi)
        rise = x_hi - x_lo
        if rise < SURE_RISE * math.sqrt(v_lo / len(lo) + v_hi / len(hi)):
            return None
        knee = l_hi * math.exp(-rise)
        if knee <= (PROPORTION if self.saturated_at < math.inf else ROUNDS) * l_lo:  # in proportion: past the batch at the lower level already
            self.saturated_at = min(self.saturated_at, l_lo)
            batch = l_lo / STEP
        elif self.saturated_at < math.inf:  # slower, once seen past its batch: the batch is at the knee, at most that level
            batch = min(knee, self.saturated_at)
        else:
            return None  # (not in proportion, and never seen past its batch: nothing known yet)
        if batch >= self.below:
            return None
        self._since, self.held = now, batch
        return batch


def _mean(answers: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """(geometric mean level, mean log latency, variance of log latency) of ``answers``."""
    n = len(answers)
    level = math.exp(sum(math.log(a[0]) for a in answers) / n)
    x = sum(a[1] for a in answers) / n
    return level, x, sum((a[1] - x) ** 2 for a in answers) / max(1, n - 1)


class BatchKnee:
    """Fed by answers (latency, level sent at); ``on_answer`` returns the batch when the line is clear, else None."""

    def __init__(self, below: float) -> None:
        """``below``: only a batch under this many requests is reported (the limit the endpoint started at)."""
        self.below = below
        self.listening = True  # from the start or an answer sent at ``IDLE`` or under, until none such is left in the window
        self._idle = 0  # answers in the window sent at ``IDLE`` or under
        self._answers: deque[tuple[int, float, float]] = deque()  # (band, level, log latency), the latest ``WINDOW``
        self._bands: dict[int, list[float]] = {}  # band -> [answers, sum of levels, sum of log latencies, of their squares]
        self._count = 0
        self.burst = BurstOrder(below)  # the order a burst from idle comes back in: a queue seen before its latencies are
        self.saturation = Saturation(below)  # latency in proportion to the level: past the batch, idle answers or not
        self.source = ""  # what found the batch last reported: "burst" (``BurstOrder``), "saturation" or "fit"

    def on_send(self, level: float, now: float) -> None:
        """A request sent at ``level`` (requests at the server with it) at ``now``."""
        self.burst.on_send(level, now)
        self.saturation.on_send(level, now)

    def refused(self) -> None:
        """A refusal: the burst out is not read, nor the answers so far (refused requests are not queued ones: a server
        that refuses turns away what it cannot serve, and its latency says nothing of a batch)."""
        self.burst.end()
        self.saturation.clear()

    def clear(self, *, listen: bool = True) -> None:
        """Forget the answers (an endpoint back from down); ``listen``: whether to keep listening (False: no answer
        sent to an idle server is left in the window)."""
        self.listening = listen
        if listen:
            self.burst.end()
            self.saturation.clear()
        self._idle = 0
        self._answers.clear()
        self._bands.clear()
        self._count = 0

    def _add(self, band: int, level: float, x: float, sign: float) -> None:
        b = self._bands.setdefault(band, [0.0, 0.0, 0.0, 0.0])
        b[0] += sign
        b[1] += sign * level
        b[2] += sign * x
        b[3] += sign * x * x
        if b[0] <= 0.0:
            del self._bands[band]

    def ended(self, sent_at: float, now: Optional[float]) -> None:
        """A call sent at ``sent_at`` ended at ``now`` (None: not known), answered or not (``Saturation.ended``)."""
        self.saturation.ended(sent_at, now)

    def on_answer(self, latency: float, level: float, sent_at: float, now: Optional[float] = None) -> Optional[float]:
        """One answer (to a request sent at ``sent_at`` at ``level``, after ``latency`` seconds, come at ``now``,
        default ``sent_at + latency``): the batch (requests) if the burst out shows one under ``below``
        (``BurstOrder``), else if latency in proportion to the level does (``Saturation``, every answer at any level),
        else if, every ``EVERY`` answers, the fit's does (kept only while it listens, and only at ``below`` or under)."""
        batch = self.burst.on_answer(level, sent_at, latency)
        if batch is not None:
            self.source = "burst"
            return batch
        batch = self.saturation.on_answer(latency, level, sent_at, sent_at + latency if now is None else now)
        if batch is not None:
            self.source = "saturation"
            return batch
        idle = level <= IDLE
        if not self.listening and not idle or latency <= 0.0 or level < 1.0:
            return None
        self.listening = True
        read = level <= self.below  # (one sent above the starting limit only counts in the window: ``BatchKnee``)
        band, x = int(math.log(level) / BAND) if read else -1, math.log(latency)
        self._answers.append((band, level, x))
        if read:
            self._add(band, level, x, 1.0)
        self._idle += idle
        if len(self._answers) > WINDOW:
            band, level, x = self._answers.popleft()
            if band >= 0:
                self._add(band, level, x, -1.0)
            self._idle -= level <= IDLE
            if not self._idle:  # no answer sent to an idle server left: no fit can be made
                self.clear(listen=False)
                return None
        if not read:
            return None
        self._count += 1
        if self._count < MIN_ANSWERS or self._count % EVERY:
            return None
        self.source = "fit"
        return self.fit()

    def points(self) -> list[tuple[float, float, float]]:
        """(mean level, mean log latency, answers) per band of the answers kept, by level."""
        return sorted((lv / n, x / n, n) for n, lv, x, _ in self._bands.values())

    def fit(self) -> Optional[float]:
        """The batch C of the line ``log latency = log S + log max(1, level / C)`` fitted to the bands' means (C one of
        their levels, the best fit of those that qualify, the best of all being under ``below``), on answers that include some sent at ``IDLE`` or under
        (a latecomer's first answers, sent above others' load, come back fastest first and fake a rise): under ``below``, the top level ``RISE`` x C or more, the line
        explaining the rise (error <= ``FIT`` x a flat latency's), and the answers at or under C and at ``RISE`` x C or
        more differing by ``SURE`` standard errors or more (``SIDE`` answers each at least); None when none does."""
        points = self.points()
        if len(points) < 3:
            return None
        low, top = points[0][0], points[-1][0]
        if low > IDLE or top < SPREAD * low:
            return None
        total = sum(n for _, _, n in points)

        def error(knee: float) -> float:
            excess = [math.log(max(1.0, lv / knee)) for lv, _, _ in points]
            base = sum(n * (x - e) for (_, x, n), e in zip(points, excess, strict=True)) / total
            return sum(n * (x - base - e) ** 2 for (_, x, n), e in zip(points, excess, strict=True))

        flat = error(math.inf)
        if flat <= 0.0:
            return None
        fits = sorted((error(level), level) for level, _, _ in points)
        if fits[0][1] >= self.below:  # the line fits best with the batch where the ``Latency`` gradient finds it
            return None
        for err, knee in fits:  # the best fit that is sure
            if err > FIT * flat:
                break
            if knee < self.below and top >= RISE * knee and self._sure(knee):
                return knee
        return None

    def _sure(self, knee: float) -> bool:
        """Whether the answers sent at or under ``knee`` are faster than those sent at ``RISE`` x it or more, surely."""
        sides = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]  # (answers, sum, sum of squares) of log latency: under, past
        for n, lv, x, xx in self._bands.values():
            level = lv / n
            side = sides[0] if level <= knee else sides[1] if level >= RISE * knee else None
            if side is not None:
                side[0] += n
                side[1] += x
                side[2] += xx
        (n0, s0, q0), (n1, s1, q1) = sides
        if n0 < SIDE or n1 < SIDE:
            return False
        m0, m1 = s0 / n0, s1 / n1
        var = (q0 - n0 * m0 * m0 + q1 - n1 * m1 * m1) / max(1.0, n0 + n1 - 2)
        return m1 - m0 >= SURE * math.sqrt(max(var, 1e-12) * (1 / n0 + 1 / n1))
