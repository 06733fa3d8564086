"""Where a queueing server's batch ends, from latency against the concurrency each request was sent at (no metrics URL).

A server that serves C requests at once and queues the rest (vLLM's and SGLang's
``--max-num-seqs``) answers a request sent with L requests in flight after about
``S x max(1, L / C)`` seconds, S being its service time: flat up to its batch, then
rising in proportion to what is in flight (Little's law; a FIFO queue's first burst
follows the same line).  ``BatchKnee`` fits that line to the answers, by the level
each was sent at, and says where the batch ends when the fit is clear.

Its meaning: **latency rising in proportion to the requests in flight past a level
is a queue past that level.**  Only answers sent at levels at least ``SPREAD`` apart
can show it, as a limit that starts above the batch sends them (levels 1 to the
starting limit in its first burst); then the latency baseline the ``Latency``
estimator learns from the first answers was measured in the server's queue, and a
gradient against it cannot see the queue.  So it speaks only of a batch below
``below`` (the limit the endpoint started at): a batch above that the ``Latency``
gradient finds.  Latency that rises slower than in proportion (a server that slows
under load but still serves more at once) does not fit the line and says nothing.
Units: seconds, requests.  Only the dispatcher thread calls it.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Optional

__all__ = ["BatchKnee"]

BAND = math.log(1.1)  # answers are grouped per 10%-wide band of the level they were sent at
WINDOW = 512  # the latest answers the fit reads (a batch that moved is seen once the old answers are gone)
MIN_ANSWERS = 32  # answers before a fit is tried
EVERY = 8  # answers between fits
SPREAD = 2.0  # the highest level read / the lowest: below this the levels say nothing of a knee
IDLE = 2.0  # the lowest level read, at most: the line is anchored on answers from a server with (nearly) nothing else to do
RISE = 1.5  # the top level over the knee found, at least: a shallower queue is the ``Latency`` gradient's to see
FIT = 0.6  # the line's squared error, at most this share of a flat latency's: the rise is the line, not noise
SIDE = 6  # answers at least, both at or under the knee and at ``RISE`` x it or more
SURE = 4.0  # the rise from under the knee to past it, at least this many standard errors (lognormal noise makes flukes)


class BatchKnee:
    """Fed by answers (latency, level sent at); ``on_answer`` returns the batch when the line is clear, else None."""

    def __init__(self, below: float) -> None:
        """``below``: only a batch under this many requests is reported (the limit the endpoint started at)."""
        self.below = below
        self.found = 0  # fits that reported a batch
        self._answers: deque[tuple[int, float, float]] = deque()  # (band, level, log latency), the latest ``WINDOW``
        self._bands: dict[int, list[float]] = {}  # band -> [answers, sum of levels, sum of log latencies, of their squares]
        self._count = 0

    def clear(self) -> None:
        """Forget the answers (an endpoint back from down)."""
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

    def on_answer(self, latency: float, level: float) -> Optional[float]:
        """Keep one answer; every ``EVERY`` answers, the batch (requests) if the answers show one under ``below``."""
        if latency <= 0.0 or level < 1.0:
            return None
        band, x = int(math.log(level) / BAND), math.log(latency)
        self._answers.append((band, level, x))
        self._add(band, level, x, 1.0)
        if len(self._answers) > WINDOW:
            self._add(*self._answers.popleft(), -1.0)
        self._count += 1
        if self._count < MIN_ANSWERS or self._count % EVERY:
            return None
        batch = self.fit()
        if batch is not None:
            self.found += 1
        return batch

    def fit(self) -> Optional[float]:
        """The batch C of the line ``log latency = log S + log max(1, level / C)`` fitted to the bands' means (C one of
        their levels, the best fit of those that qualify, the best of all being under ``below``), on answers that include some sent at ``IDLE`` or under
        (a latecomer's first answers, sent above others' load, come back fastest first and fake a rise): under ``below``, the top level ``RISE`` x C or more, the line
        explaining the rise (error <= ``FIT`` x a flat latency's), and the answers at or under C and at ``RISE`` x C or
        more differing by ``SURE`` standard errors or more (``SIDE`` answers each at least); None when none does."""
        points = sorted((lv / n, x / n, n) for n, lv, x, _ in self._bands.values())  # (mean level, mean log latency, answers)
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
