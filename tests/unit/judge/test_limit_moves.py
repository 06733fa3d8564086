"""The adaptive limit where capacity moves (``qworker.judge.control.limiter``), fed answers in simulated time (no clock)."""

from __future__ import annotations

from qworker.judge.control.limiter import AdaptiveLimit, Mode

RTT = 0.3  # seconds


def answer_at_the_limit(lim: AdaptiveLimit, start: float, end: float) -> float:
    """Answers from ``start`` to ``end`` seconds, each RTT long and sent with the limit's whole requests at the
    server (a server with room for all of them: none refused); returns ``end``."""
    t = start
    while t < end:
        n = max(1, int(lim.limit))
        lim.on_success(RTT, n, t, level=n)
        t += RTT / n
    return end


def steady(limit: float, *, high: float, refused_at: float) -> AdaptiveLimit:
    """A limit in steady state at ``limit``, refused a moment ago at ``refused_at`` in flight, that saw ``high``."""
    lim = AdaptiveLimit(initial=limit)
    lim.mode = Mode.STEADY
    lim.rtt = RTT
    lim.memory.saw(high)
    lim.memory.refused(refused_at, probing=False)
    lim.refusals_.last = 0.0
    return lim


def test_below_a_capacity_seen_before_the_probe_widens_until_the_capacity_that_came_back_is_found():
    # Refused at 17 with 64 seen before; the capacity is back (nothing refused any more): the probe above
    # the refusal level doubles each round trip, the server is seen holding more than where it refused, and
    # the limit climbs back to 64, all within 2 s (a probe of 0.15 a round trip would take 2 s to reach 17 alone).
    lim = steady(16, high=64, refused_at=17)
    t = answer_at_the_limit(lim, 0.01, 0.6)
    assert lim.limit < 17  # a round trip held, then 0.15, 0.3 a round trip: no jump
    answer_at_the_limit(lim, t, 2.0)
    assert lim.limit >= 60 and lim.regains == 1
    # At the highest capacity seen, the probe does not widen: there each crossing is a refusal
    at_high = steady(64, high=64, refused_at=65)
    answer_at_the_limit(at_high, 0.01, 2.0)
    assert 64 < at_high.limit <= 64 + 0.15 * 2.0 / RTT + 0.1 and at_high.regains == 0


def test_the_highest_capacity_seen_is_what_the_server_sustained_alone_in_steady_state():
    # No refusal ever came at one level twice (the only way it was learnt before): the answers say it
    lim = steady(40, high=0, refused_at=41)
    lim.memory.refusal_level = float("inf")  # nothing refused: the limit grows only as a probe would
    answer_at_the_limit(lim, 0.01, 3.0)
    assert 36 <= lim.memory.target() <= lim.limit


def test_a_capacity_known_from_answers_is_not_climbed_to_again_once_a_climb_to_it_was_refused():
    from qworker.judge.control.estimators import CapacityMemory, LimitConfig

    memory = CapacityMemory(LimitConfig())
    memory.held(60.0)  # the answers showed the server sustaining 60
    assert memory.below(30.0)  # so a limit of 30 climbs back
    memory.climb_refused(22.0)  # the climb was refused at 22: the capacity is gone, not returned
    assert not memory.below(30.0) and not memory.below(20.0) and memory.target() <= 22.0


def test_a_refused_climb_back_stops_bounding_the_capacity_once_the_server_holds_more_than_where_it_refused_since():
    # A climb back refused at 45 (a tenant still there) bounds the capacity known from answers (60) at 45.  Later
    # refusals put the level refused at 34; the server then answers more than that at once (the tenant left): the
    # bound lapses with the refusal it was (a limit of 35 climbs back to 60 again, as before the refused climb)
    from qworker.judge.control.estimators import CapacityMemory, LimitConfig

    memory = CapacityMemory(LimitConfig())
    memory.held(60.0)
    memory.climb_refused(45.0)
    memory.refused(34.0, probing=False, now=10.0)
    assert not memory.below(35.0) and memory.target() <= 45.0
    assert memory.outgrew(36.0, 11.0)  # sent after that refusal with 36 at the server, and answered
    memory.outgrown(11.0, RTT)
    assert memory.below(35.0) and memory.target() == 60.0
    # Little's law showing the server sustaining more than the bound lifts it too
    memory.climb_refused(40.0)
    memory.held(41.0)
    assert memory.target() == 60.0
