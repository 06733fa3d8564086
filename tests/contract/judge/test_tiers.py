"""Priority tiers: a higher tier gets traffic only while every lower tier is saturated or down (simulated time)."""

from __future__ import annotations

import math

import pytest

from qworker._exceptions import ConfigError
from qworker.judge.control.gate import Gate
from qworker.judge.control.registry import JudgeGates
from tests.contract.judge.judgesim import Client, Server, Sim


def tiers(servers: list[Server], n: int, until: float = 600.0, **kw) -> Client:
    sim = Sim()
    c = Client(sim, servers, n, endpoints=[{"priority": i} for i in range(len(servers))], **kw)
    sim.run([c], until)
    return c


def share(c: Client, endpoint: int, start: float = 0.0, end: float = math.inf) -> float:
    got = [e for t, e in c.served if start <= t < end]
    return sum(1 for e in got if e == endpoint) / max(1, len(got))


@pytest.mark.parametrize("value", ["1", 1.5, True, [0], 10**6, -(10**6), math.nan])
def test_priority_must_be_a_whole_number_in_bounds(value):
    with pytest.raises(ConfigError, match="priority"):
        Gate({"model": "m", "endpoints": [{"url": "http://a", "priority": value}]})


def test_priority_is_a_known_key_and_defaults_to_zero():
    g = Gate({"model": "m", "endpoints": [{"url": "http://a"}, {"url": "http://b", "priority": 2}, {"url": "http://c", "priority": -1}]})
    assert [e.priority for e in g.endpoints] == [0, 2, -1]
    assert [[e.index for e in t] for t in g.router.tiers] == [[2], [0], [1]]
    assert g.snapshot(0.0)["endpoints"][1]["priority"] == 2


def test_routing_is_checked_and_one_per_gate():
    with pytest.raises(ConfigError, match="routing"):
        Gate({"model": "m", "endpoints": [{"url": "http://a"}], "routing": "random"})
    gates = JudgeGates()
    gates.for_params({"model": "m", "endpoints": [{"url": "http://a"}], "routing": "prefix"})
    with pytest.raises(ConfigError, match="routing"):
        gates.for_params({"model": "m", "endpoints": [{"url": "http://a"}]})


def test_a_lower_tier_with_room_takes_everything():
    # 60 tasks/s against a primary that serves 213/s: the fallback is never needed
    c = tiers([Server(capacity=64, latency=0.3, sigma=0.6, seed=1), Server(capacity=64, latency=0.3, seed=2)], 3000, arrival_rate=60)
    assert not c.failed and len(c.done_at) == 3000
    assert share(c, 1) < 0.005
    assert c.overflow_with_room == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_fallback_takes_only_the_overflow_of_a_saturated_primary(seed):
    primary, fallback = Server(capacity=32, latency=0.3, sigma=0.6, seed=seed), Server(capacity=64, latency=0.3, sigma=0.6, seed=seed + 10)
    c = tiers([primary, fallback], 6000)
    assert not c.failed
    assert c.overflow_with_room == 0  # never sent above a tier that had room
    # the primary runs full: its share of the answers is about its share of the capacity (32 of 96)
    assert share(c, 0, 2.0, 15.0) > 0.9 * 32 / 96
    assert primary.stats["refused"] / primary.stats["requests"] < 0.03


def test_a_queueing_primary_runs_at_its_knee_and_the_rest_spills():
    primary, fallback = Server(mode="queue", capacity=32, latency=0.3, sigma=0.6, seed=4), Server(capacity=64, latency=0.3, sigma=0.6, seed=5)
    c = tiers([primary, fallback], 6000, metrics=True)
    assert not c.failed
    assert 0.85 * 32 / 96 < share(c, 0, 3.0, 15.0) < 0.5
    # its queue is the next batch (``ServerLoad``): a request waits there about one batch's service, not more
    assert primary.stats["queued_s"] / primary.stats["service_s"] < 1.3


@pytest.mark.parametrize("how", ["connect", "429", "503"])
def test_traffic_moves_up_while_the_primary_is_down_and_returns_when_it_recovers(how):
    outage = (5.0, 10.0)
    primary = Server(capacity=64, latency=0.3, sigma=0.6, seed=6, outage=outage, outage_reply=how)
    fallback = Server(capacity=64, latency=0.3, sigma=0.6, seed=7)
    c = tiers([primary, fallback], 20000, arrival_rate=150)
    assert not c.failed
    assert share(c, 1, 0.0, 5.0) < 0.01  # 150/s fits the primary
    assert share(c, 1, 6.0, 10.0) > 0.95  # down: the fallback serves
    # back: within 4 s the primary serves nearly everything again
    assert share(c, 0, outage[1] + 4.0, outage[1] + 20.0) > 0.98
