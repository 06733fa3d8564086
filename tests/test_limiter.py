"""The adaptive limit against a simulated endpoint (discrete events, no clock)."""

from __future__ import annotations

import heapq
import random

from qworker._limiter import AdaptiveLimit


def simulate(capacity: int, latency: float, n: int, seed: int = 1) -> tuple[float, int, AdaptiveLimit]:
    """Throughput (requests/s) and 429s of a client that keeps ``limit`` in flight."""
    rng = random.Random(seed)
    lim = AdaptiveLimit(initial=16)
    t, active, done, drops, queued = 0.0, 0, 0, 0, n
    events: list = []
    while done < n:
        while queued and active < int(lim.limit):
            queued -= 1
            refused = active >= capacity
            active += 1
            heapq.heappush(events, (t + (0.001 if refused else latency * rng.uniform(0.95, 1.05)), refused))
        t, refused = heapq.heappop(events)
        if refused:
            drops += 1
            queued += 1
            lim.on_drop(active, t)
        else:
            done += 1
            lim.on_success(latency, active, t)
        active -= 1
    return n / t, drops, lim


def test_converges_on_the_capacity_with_few_rejections():
    rate, drops, lim = simulate(capacity=64, latency=0.2, n=20_000)
    assert rate > 0.95 * 320
    assert drops < 0.01 * 20_000
    assert 58 <= lim.limit <= 68


def test_converges_within_a_bounded_number_of_requests():
    # from 16, slow start reaches the capacity in a few round trips: within 1,000 requests
    rate, drops, lim = simulate(capacity=64, latency=0.2, n=1000)
    assert lim.drops >= 1 and 55 <= lim.limit <= 70


def test_small_capacity():
    rate, drops, lim = simulate(capacity=4, latency=0.1, n=2000)
    assert rate > 0.85 * 40 and lim.limit <= 6


def test_latency_gradient_cuts_without_rejections():
    lim = AdaptiveLimit(initial=50)
    for i in range(50):
        lim.on_success(0.1, 50, i * 0.01)
    before = lim.limit
    for i in range(100):
        lim.on_success(0.5, 50, 1.0 + i * 0.05)  # the server queues: latency x5, for 5 s
    assert lim.limit < before * 0.7


def test_idle_limit_does_not_grow():
    lim = AdaptiveLimit(initial=32)
    for i in range(100):
        lim.on_success(0.1, 2, i * 0.01)  # only 2 in flight: the headroom is untested
    assert lim.limit == 32


def test_one_cut_per_round_trip_but_every_drop_caps():
    lim = AdaptiveLimit(initial=64)
    lim.on_success(0.2, 64, 0.0)
    lim.on_drop(65, 1.0)
    first = lim.limit
    assert first <= 0.9 * 65
    lim.on_drop(40, 1.01)  # same round trip: no second multiplicative cut, but capped below 40
    assert lim.limit <= 39
