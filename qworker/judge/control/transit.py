"""How many of an endpoint's calls in flight are at its server: the share of a call's time spent there.

The gate counts a call in flight from its admission to its result's return
(``Endpoint.in_flight``); the server counts it from the request's arrival to the
response's departure.  Between the two lie the dispatch to a worker, the
worker's queue, the result's batching and its way back: time in which the call
holds one of the gate's slots but none of the server's.  A limit read against
the gate's count leaves the server that much short of it (at a cap of 64, about
57 with 35 ms of transit on 300 ms calls), and tiers spill to a fallback while
the primary still has room.

Both ends of every call are measured: the worker measures the server's part
(``latency_s`` in the outcome: request sent -> response read) and the gate the
whole (admission -> result).  ``Transit`` keeps, over recent answers,

    ``share`` = sum of server seconds / sum of gate seconds

(each sum an exponentially weighted moving sum by answer, weight ``ALPHA``, over
the calls sent after the endpoint's first answer came back: the first round trip
carries the start, worker threads and connections being made and a whole burst
dispatched at once, not the steady path; learnt from, it would read a start-up
stall as transit and let the gate hold several times its limit at the server):
the fraction of the call-seconds in flight at the gate that the server saw.  By
Little's law on the two stretches of the same calls, the mean number at the
server is ``share`` x the mean number in flight at the gate, so the gate reads
its ``in_flight`` less floor(x - sqrt(x)), x = ``in_flight`` x (1 - ``share``) (the requests surely outside the
server: the expected number less one Poisson deviation), as the requests at the server now, and holds its
limit against that (``Endpoint.at_server``): a limit equal to a server's cap
fills the cap, and a tier spills only when its server is full.  ``share`` is 1
until an answer says otherwise (the gate's count, the cautious reading), and
it is an expectation: the number actually in transit varies around it, and the
limiter's refusal signals absorb what that costs at a hard cap.  Units: seconds,
a fraction in [``MIN_SHARE``, 1].  Only the dispatcher thread calls it.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["ALPHA", "Transit"]

ALPHA = 1.0 / 256  # weight of the newest answer in the moving sums: about the last 256 answers count (a stall of the
# dispatcher or a worker inflates a burst of answers' transit at once; a short window would swing with it)
MIN_SHARE = 0.01  # a floor on ``share``: the gate holds at most 100x its limit (a server answering in no time)


class Transit:
    """The share of a call's time in flight that its server saw (``share``), fed one answer at a time."""

    __slots__ = ("_first_at", "_gate_s", "_server_s", "_weight", "answers")

    def __init__(self) -> None:
        self._server_s = 0.0  # moving sum of the server's seconds per call
        self._gate_s = 0.0  # moving sum of the gate's seconds per call (admission -> result)
        self._weight = 0.0  # moving sum of ones: the sums over it are means
        # When the first answer came (the gate's clock).  Set once, never reset: only the first round trip carries
        # every worker's start at once.  An endpoint back from down is called by the same warm workers (no start to
        # leave out); a worker replaced later puts its first calls' start into the moving sums, lowering ``share``
        # for about the next 256 answers, in which the gate holds somewhat more than its limit at the server (a
        # refusing server says so, and the limiter follows; a limit given as a hint is overshot by that much).
        self._first_at: Optional[float] = None
        self.answers = 0

    def on_answer(self, gate_s: float, server_s: float, now: Optional[float] = None) -> None:
        """A call held ``gate_s`` seconds by the gate, ``server_s`` of them at the server (as its worker measured:
        request sent -> response read; clipped to ``[0, gate_s]``), answered at ``now`` (the gate's clock).  A call
        with no gate time says nothing; nor, given ``now``, does one sent (``now - gate_s``) before the first answer came."""
        if not gate_s > 0.0:
            return
        if now is not None:
            if self._first_at is None:
                self._first_at = now
            if now - gate_s < self._first_at:
                return
        server_s = min(gate_s, max(0.0, server_s))
        self._server_s += ALPHA * (server_s - self._server_s)
        self._gate_s += ALPHA * (gate_s - self._gate_s)
        self._weight += ALPHA * (1.0 - self._weight)
        self.answers += 1

    @property
    def share(self) -> float:
        """The fraction of the gate's call-seconds spent at the server (1.0 before any answer; at least ``MIN_SHARE``)."""
        if self._gate_s <= 0.0:
            return 1.0
        return max(MIN_SHARE, min(1.0, self._server_s / self._gate_s))

    @property
    def transit_s(self) -> float:
        """The mean seconds a recent call spent outside the server (admitted, not yet sent; read, not yet returned)."""
        return max(0.0, self._gate_s - self._server_s) / self._weight if self._weight else 0.0
