"""Slow start against a token bucket (simulated time): its reserve carries the limit past the rate, and the refusals
that follow are cut by what the bucket admits, not by what its reserve let through."""

from __future__ import annotations

import pytest

from tests.contract.judge import judgesim
from tests.contract.judge.judgesim import Server

RATE, LATENCY = 150.0, 0.3  # 150 requests/s, one second's reserve; Little's law: 45 at once


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_slow_start_past_a_token_buckets_reserve_is_cut_to_the_rate_the_bucket_admits(seed):
    server = Server(rate=RATE, latency=LATENCY, sigma=0.6, seed=seed, retry_after="s")
    _, (c,), _ = judgesim.run(server, 1500)
    first = c.refused_at[0]  # the reserve ran out: slow start is well past the rate by now
    # A round trip and a half later the limit is where the rate holds (the answers then still count the reserve's)
    assert [lim for t, lim in c.limits if t <= first + 1.5 * LATENCY][-1] <= RATE * LATENCY
    # so the burst of refusals ends within the second, at fewer than a round trip's excess (more than 25 before)
    assert sum(1 for t in c.refused_at if t < first + 1.0) <= 20
    assert not c.failed


@pytest.mark.parametrize("seed", [1, 2])
def test_slow_start_past_a_deep_reserve_is_cut_to_the_rate_the_bucket_admits(seed):
    """A bucket of 50/s with 5 s of reserve (a per-minute quota holds up to 60): slow start runs far past the rate before the
    reserve is spent, and the answers then count the reserve's many; what the bucket admits (its refill, a share of
    what is sent) is the rate, not a storm."""
    server = Server(rate=50.0, reserve_s=5.0, latency=LATENCY, sigma=0.6, seed=seed, retry_after="s")
    _, (c,), _ = judgesim.run(server, 2000)
    first = c.refused_at[0]
    assert [lim for t, lim in c.limits if t <= first + 1.5 * LATENCY][-1] <= 1.5 * 50.0 * LATENCY
    assert sum(1 for t in c.refused_at if t < first + 1.0) <= 25
    assert not c.failed


@pytest.mark.parametrize("seed", [1, 2])
def test_a_short_storm_of_refusals_in_slow_start_is_not_read_as_the_capacity(seed):
    """A server of 200 slots refuses everything for a quarter second while slow start climbs: what it admitted meanwhile
    (nothing) says nothing of what it holds, so the cut stops where the answers' Little's law puts it (about half the
    level, not halving again with each refusal), and the 10 s after it run at 150 tasks/s at least (95 when the storm
    was read as the capacity)."""
    server = Server(capacity=200, latency=LATENCY, sigma=0.6, seed=seed, retry_after="s", outage=(1.8, 2.05), outage_reply="429")
    _, (c,), _ = judgesim.run(server, 12000)
    after = [lim for t, lim in c.limits if 2.05 <= t <= 2.05 + 3 * LATENCY]
    assert min(after) >= 40, f"the limit went down to {min(after):.1f} after the storm"
    assert judgesim.throughput(c.done_at, 5, 15) >= 150
    assert not c.failed
