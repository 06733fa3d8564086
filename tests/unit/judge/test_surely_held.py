"""Evidence that a capacity came back is judged on the requests surely at the server, not on the gate's count."""

from __future__ import annotations

from qworker.judge.control.endpoint import Endpoint
from qworker.judge.control.health import Health
from qworker.judge.control.limiter import AdaptiveLimit, Mode


def endpoint(share: float, in_flight: int) -> Endpoint:
    limit = AdaptiveLimit(initial=16)
    e = Endpoint(index=0, url="http://judge", weight=1.0, limit=limit,
                 health=Health(url="http://judge", limiter=limit, error_budget=0.1, dead_after_s=30.0))
    for _ in range(2000):  # calls that spent ``share`` of their gate time at the server
        e.transit.on_answer(1.0, share)
    e.in_flight = in_flight
    return e


def test_requests_surely_at_the_server_leave_out_a_deviation_more_than_the_expected_transit():
    e = endpoint(0.9, 17)  # 1.7 expected outside
    assert e.at_server() == 17  # the expectation less a deviation: what the limit is held against
    assert e.surely_at_server() == 14  # the expectation plus a deviation, to the nearest whole request
    assert endpoint(1.0, 17).surely_at_server() == 17


def dropped_to_16() -> AdaptiveLimit:
    """A limiter that saw a capacity of 64, then was refused at 17 in flight (t = 10 s), in use at 16 since."""
    lim = AdaptiveLimit(initial=64)
    lim.slow_start = False
    lim.on_success(0.3, 64, 0.0)
    lim.memory.held(64.0)
    lim.on_drop(17, 10.0, sent_at=9.9)
    return lim


def run_at(lim: AdaptiveLimit, level: float, surely: float | None, until: float) -> None:
    t = 10.0
    while t < until:
        t += 0.3 / 17
        lim.on_success(0.3, 17, t, level=level, surely=surely)


def test_a_level_the_gate_counts_above_the_refusal_is_no_evidence_while_not_surely_at_the_server():
    lim = dropped_to_16()
    run_at(lim, 18, 16, until=13.0)  # the gate counted 18, of which 16 surely at the server: the cap may not have moved
    assert lim.regains == 0 and lim.mode is Mode.STEADY


def test_a_level_surely_held_above_the_refusal_is_evidence_that_the_capacity_came_back():
    lim = dropped_to_16()
    run_at(lim, 18, 18, until=13.0)
    assert lim.regains == 1
