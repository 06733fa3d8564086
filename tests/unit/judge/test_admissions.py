"""``Admissions``: what a server admitted per second over a span, read from send and refusal instants (simulated time)."""

from __future__ import annotations

import pytest

from qworker.judge.control.estimators import ADMISSIONS_KEPT, ADMISSIONS_MIN, STORM_SHARE, Admissions


def _sends(a: Admissions, start: float, n: int, every: float) -> list[float]:
    times = [start + k * every for k in range(n)]
    for t in times:
        a.sent(t)
    return times


def test_the_rate_is_the_sends_in_the_span_less_the_refused_ones_per_second():
    a = Admissions()
    times = _sends(a, 0.0, 100, 0.01)  # 0.00 .. 0.99 s
    for t in times[::4]:
        a.refused(t)  # every fourth refused: 75 of the 100 admitted
    assert a.rate(0.0, 1.0) == pytest.approx(75 / 1.0)
    assert a.rate(0.5, 1.0) == pytest.approx(38 / 0.5)  # 50 sent in [0.5, 0.99], 12 of them refused (52, 56, .. 96)


def test_a_refusal_of_a_send_outside_the_span_does_not_count_against_it():
    a = Admissions()
    times = _sends(a, 0.0, 40, 0.05)
    a.refused(times[0])
    assert a.rate(1.0, 2.0) == pytest.approx(20 / 1.0)


def test_a_span_with_too_few_sends_or_none_says_nothing():
    a = Admissions()
    assert a.rate(0.0, 1.0) is None  # nothing sent yet
    _sends(a, 0.0, ADMISSIONS_MIN - 1, 0.1)
    assert a.rate(0.0, 1.0) is None
    a.sent(0.95)
    assert a.rate(0.0, 1.0) == pytest.approx(ADMISSIONS_MIN / 1.0)
    assert a.rate(1.0, 1.0) is None  # an empty span


def test_a_span_that_begins_before_the_oldest_send_kept_says_nothing():
    a = Admissions()
    _sends(a, 10.0, ADMISSIONS_KEPT + 10, 0.001)  # the first ten are no longer kept
    assert a.rate(10.0, 20.0) is None
    assert a.rate(10.0 + 0.0105, 20.0) is not None


def test_a_storm_that_admitted_less_than_the_storm_share_of_the_sends_says_nothing():
    a = Admissions()
    times = _sends(a, 0.0, 100, 0.01)
    admitted = int(STORM_SHARE * 100) - 1
    for t in times[admitted:]:
        a.refused(t)
    assert a.rate(0.0, 1.0) is None  # an outage or a tenant taking everything: no word on capacity
    b = Admissions()
    times = _sends(b, 0.0, 100, 0.01)
    for t in times[int(STORM_SHARE * 100):]:
        b.refused(t)  # exactly the storm share admitted: a token bucket's refill, still read
    assert b.rate(0.0, 1.0) == pytest.approx(STORM_SHARE * 100 / 1.0)
