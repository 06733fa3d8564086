"""What the limiter takes for capacity that came back (``qworker.judge.control.limiter``), in simulated time (no clock).

A refusal level sits under the capacity that refused: a limit held there without a refusal says only that
the capacity is still where it was.  Capacity that came back shows as the server answering more at once than
where it last refused, for a request sent after that refusal.
"""

from __future__ import annotations

from qworker.judge.control.limiter import AdaptiveLimit, Mode

RTT = 0.3  # seconds


def steady_below_a_capacity_seen(limit: float, *, high: float) -> AdaptiveLimit:
    lim = AdaptiveLimit(initial=limit)
    lim.mode = Mode.STEADY
    lim.rtt = RTT
    lim.memory.saw(high)
    return lim


def serve(lim: AdaptiveLimit, capacity: int, start: float, end: float) -> int:
    """A server holding ``capacity`` at once, from ``start`` to ``end`` seconds: each step the limit's whole
    requests are at it; one sent beyond the capacity is refused 0.1 s after it was sent.  Returns the refusals."""
    t, refused = start, 0
    while t < end:
        n = max(1, int(lim.limit))
        if n > capacity:
            lim.on_drop(n, t, sent_at=t - 0.1)
            refused += 1
        else:
            lim.on_success(RTT, n, t, level=n)
        t += RTT / n
    return refused


def test_a_limit_held_at_a_refusal_level_that_echoes_put_under_the_capacity_does_not_climb_back():
    # 64 seen; the capacity drops to 16 while 64 are at the server.  What we send as they drain is refused
    # (fresh refusals down to 19 at the server), then echoes put the refusal level at 14, under the 16.  The
    # limit held at 14-16 without a refusal says only that 16 still holds: it probes above, each crossing one
    # refusal, and does not climb back to 64 (a climb that would cost a burst of refusals).
    lim = steady_below_a_capacity_seen(64, high=64)
    for k, level in enumerate((65, 55, 40, 19)):  # each sent after the reaction to the one before: fresh
        lim.on_drop(level, 0.05 * k, sent_at=0.05 * k - 0.04)
    for k in range(5):  # sent before the last reaction: echoes
        lim.on_drop(18 - k, 0.2 + 0.01 * k, sent_at=0.12)
    assert lim.memory.refusal_level <= 14.5 and lim.limit <= 14
    refused = serve(lim, 16, 0.5, 6.0)
    assert lim.regains == 0 and lim.limit < 18, (lim.regains, lim.limit)
    assert 1 <= refused <= 5.5 / (2 * RTT)  # a probe every two round trips at most, each one refusal
    # and when the capacity comes back, the probe finds it within 2 s
    serve(lim, 64, 6.0, 8.0)
    assert lim.regains == 1 and lim.limit >= 60


def test_answers_to_requests_sent_before_the_last_refusal_are_no_evidence_that_the_capacity_came_back():
    # A tenant takes slots as ours drain: refused with 46 at the server at t=1, then (a round trip on, the limit
    # no longer holding) slow answers to requests sent before it with 50 at the server arrive: they say nothing
    # of the refusal, and the limit does not climb back
    lim = steady_below_a_capacity_seen(46, high=64)
    lim.on_drop(46, 1.0, sent_at=0.95)
    for k in range(100):
        t = 1.35 + k * 0.004
        lim.on_success(0.5, 44, t, level=50 if t - 0.5 < 1.0 else 44)
    assert lim.regains == 0 and lim.mode is not Mode.RECOVERING
