"""A fleet of replicas whose batch is under the starting limit, reached through a transit that reorders each burst
(simulated time): the workers' send stamps let the gate read each answer at the level the server saw."""

from __future__ import annotations

import statistics

import pytest

from tests.contract.judge.judgesim import Client, Sim
from tests.contract.judge.test_prefix import HandSetClient, grpo, mean_judge_s, replicas

# Admission -> the worker's send: 0-60 ms (dispatch, a worker's queue, its threads on a busy host), so a burst the
# gate sends at once reaches a replica in an order of its own; the result's way back: 0-20 ms.
TRANSIT = (0.03, 0.01)
JITTER = 1.0


@pytest.mark.parametrize("group", [8, 16])
def test_a_fleet_reached_in_an_order_of_its_own_finds_each_replicas_batch_and_holds_no_deep_queue(group):
    """8 replicas (batch 8, under the starting limit of 32), no metrics URL, 1,000 GRPO tasks routed by prefix, every
    request's transit jittered and its worker stamping its send: the mean time a request spends at a replica is
    within 1.3x that of a hand-set client given the batch (64 slots over the 8 replicas, round-robin, no transit),
    on every seed, and the throughput (median of 3 seeds) within 10% of a hand-set client sending each whole group
    to one replica (8 slots each, no transit)."""
    n, batch = 1000, 8
    rates, times = [], []
    for seed in (1, 2, 3):
        servers = replicas(batch, seed)
        sim = Sim()
        c = Client(sim, servers, n, payload=grpo(group), routing="prefix", transit=TRANSIT, transit_jitter=JITTER, stamps=True)
        end = sim.run([c])
        assert not c.failed and len(c.done_at) == n
        rr = replicas(batch, seed)
        sim = Sim()
        sim.run([HandSetClient(sim, rr, n, group, "round_robin", slots=batch, shared=True)])  # type: ignore[list-item]
        whole = replicas(batch, seed)
        sim = Sim()
        whole_rate = n / sim.run([HandSetClient(sim, whole, n, group, "group", slots=batch)])  # type: ignore[list-item]
        times.append(mean_judge_s(servers) / mean_judge_s(rr))
        rates.append(n / end / whole_rate)
        assert times[-1] <= 1.3, (seed, times, [e.limit.limit for e in c.gate.endpoints])
    assert statistics.median(rates) >= 0.9, rates
