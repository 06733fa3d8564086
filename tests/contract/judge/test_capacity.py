"""Capacity that changes, on a simulator harder than the real thing (simulated time).

Servers refuse after 50-300 ms (not 1-20), answer 20% slower at full load, and
change over time: capacity 64 -> 16 -> 64, a second tenant (a semaphore(32)
client) taking half of it for 20 s, a per-minute quota, outages on two
endpoints at once.  qworker must get >= 90% of what the server allows, with
<= 2% 429s over the run, re-adapted within 5 s of each change; beside it a
semaphore set to the initial capacity floods 429s.
"""

from __future__ import annotations

from typing import Callable

import pytest

from tests.contract.judge.judgesim import Client, SemaphoreClient, Server, Sim

CHANGES = [20.0, 40.0]
END = 60.0


def harsh(seed: int, **kw) -> Server:
    return Server(capacity=64, latency=0.3, sigma=0.6, seed=seed, refusal_latency=(0.05, 0.3), load_slope=0.2, **kw)


def allowed(server: Server, capacity: Callable[[float], float], a: float, b: float) -> float:
    """What the server allows in [a, b): its capacity over the mean service time of what it served then (answers/s)."""
    sv = [s for t, s in server.services if a <= t < b]
    return capacity((a + b) / 2) / (sum(sv) / len(sv))


def phases(c, server: Server, capacity: Callable[[float], float], changes: list[float] = CHANGES, end: float = END,
           settle: float = 5.0) -> list[dict]:
    """Per phase: what it allows, what the client got from ``settle`` s after the change on, and when it first held
    >= 90% of it over a 2 s window with <= 2% refusals (seconds after the change; None: never)."""
    out = []
    bounds = [0.0, *changes, end]
    for a, b in zip(bounds, bounds[1:], strict=False):
        al = allowed(server, capacity, a, b)
        got = sum(1 for t in c.done_at if a + settle <= t < b) / (b - a - settle)
        adapt, t = None, a
        while t + 2 <= b:
            n = sum(1 for x in c.done_at if t <= x < t + 2)
            r = sum(1 for x in c.refused_at if t <= x < t + 2)
            if n / 2 >= 0.9 * al and r <= 0.02 * (n + r):
                adapt = t - a
                break
            t += 0.25
        out.append({"allowed": al, "share": got / al, "adapt": adapt})
    return out


def refused_share(c, end: float = END) -> float:
    n = sum(1 for t in c.done_at if t < end)
    r = sum(1 for t in c.refused_at if t < end)
    return r / (n + r)


def step_run(seed: int, retry_after: str, semaphore: int = 0):
    server = harsh(seed, retry_after=retry_after, capacity_steps=[(20.0, 16), (40.0, 64)])
    sim = Sim()
    c = SemaphoreClient(sim, server, 20000, semaphore) if semaphore else Client(sim, server, 20000)
    sim.run([c], until=END)
    return c, phases(c, server, server.capacity_at)


def tenant_run(seed: int, retry_after: str, semaphore: int = 0):
    server = harsh(seed, retry_after=retry_after)
    sim = Sim()
    c = SemaphoreClient(sim, server, 20000, semaphore) if semaphore else Client(sim, server, 20000)
    tenant: list = []
    sim.at(20.0, lambda t: tenant.append(SemaphoreClient(sim, server, 10**5, 32, stop=40.0)))
    sim.run([c], until=END)
    return c, phases(c, server, lambda t: 32 if 20 <= t < 40 else 64)


@pytest.mark.parametrize("retry_after", ["ms", "s"])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("scenario", [step_run, tenant_run], ids=["64-16-64", "tenant"])
def test_qworker_tracks_a_capacity_that_changes(scenario, seed, retry_after):
    c, ph = scenario(seed, retry_after)
    assert not c.failed
    for p in ph:
        assert p["share"] >= 0.9, ph
    for p in ph[1:]:
        assert p["adapt"] is not None and p["adapt"] <= 5.0, ph
    assert refused_share(c) <= 0.02


PHASE_S = 10.0


def moving_run(scenario: str, seed: int, retry_after: str) -> tuple:
    """10 s phases: capacity 64 -> 16 -> 64 (``step``), or a semaphore(32) tenant beside it in the second (``tenant``)."""
    changes = [PHASE_S, 2 * PHASE_S]
    steps = [(PHASE_S, 16), (2 * PHASE_S, 64)] if scenario == "step" else None
    server = harsh(seed, retry_after=retry_after, capacity_steps=steps)
    sim = Sim()
    c = Client(sim, server, 20000)
    if scenario == "tenant":
        sim.at(PHASE_S, lambda t: SemaphoreClient(sim, server, 10**5, 32, stop=2 * PHASE_S))
    sim.run([c], until=3 * PHASE_S)
    capacity = server.capacity_at if scenario == "step" else (lambda t: 32 if PHASE_S <= t < 2 * PHASE_S else 64)
    return c, phases(c, server, capacity, changes, 3 * PHASE_S, settle=0.0)


@pytest.mark.parametrize("retry_after", ["ms", "s"])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("scenario", ["step", "tenant"])
def test_capacity_that_returns_within_10_s_phases_is_found_within_2_s_with_few_refusals(scenario, seed, retry_after):
    # The whole of each phase counts, the seconds spent finding the new capacity included.  Capacity that
    # returns (a step back up, a tenant leaving) can only be found by probing above where it was refused,
    # and each probe that finds it still there is a refusal: found within 1.5 s, the phase after it is served
    # at >= 85% (the seconds before it at the old capacity), every other phase at >= 90%.  A step down is
    # re-adapted to within 3 s (the tenant takes its half over seconds, as its retries find free slots).
    c, ph = moving_run(scenario, seed, retry_after)
    assert not c.failed
    assert ph[0]["share"] >= 0.9 and ph[1]["share"] >= 0.9 and ph[2]["share"] >= 0.85, ph
    assert ph[2]["adapt"] is not None and ph[2]["adapt"] <= 1.5, ph
    if scenario == "step":
        assert ph[1]["adapt"] is not None and ph[1]["adapt"] <= 3.0, ph
    assert refused_share(c, 3 * PHASE_S) <= 0.02, ph


def test_a_tenant_that_leaves_after_a_climb_back_to_the_old_capacity_was_refused_is_still_found_within_1_5_s():
    # Seed 148 (Retry-After in seconds): while the tenant holds its half, a retry pause of its lets a climb back
    # begin, refused at 45; once the tenant leaves, the server holding more than where it last refused is the
    # evidence that the capacity came back, up to the 64 seen before (not only to the 45 of the refused climb)
    c, ph = moving_run("tenant", 148, "s")
    assert not c.failed
    assert ph[2]["share"] >= 0.85 and ph[2]["adapt"] is not None and ph[2]["adapt"] <= 1.5, ph


def test_a_semaphore_at_the_initial_capacity_floods_refusals_when_it_drops():
    c, ph = step_run(1, "ms", semaphore=64)
    assert refused_share(c) > 0.2
    c, ph = tenant_run(1, "ms", semaphore=64)
    assert refused_share(c) > 0.1


@pytest.mark.parametrize("retry_after", ["ms", "s"])
def test_a_per_minute_quota_is_used_to_the_end_without_marking_the_endpoint_dead(retry_after):
    # 6,000 a minute in fixed windows, against a server that could serve 12,800: spent ~28 s into each minute,
    # then 429 with a Retry-After to the minute's end.  That is not an outage: nothing fails.
    server = harsh(1, retry_after=retry_after, quota_per_min=6000)
    sim = Sim()
    c = Client(sim, server, 30000)
    sim.run([c], until=180.0)
    assert not c.failed
    assert sum(1 for t in c.done_at if t < 180.0) >= 0.99 * 3 * 6000
    assert refused_share_until(c, 180.0) < 0.02


def refused_share_until(c, end: float) -> float:
    n = sum(1 for t in c.done_at if t < end)
    r = sum(1 for t in c.refused_at if t < end)
    return r / (n + r)


@pytest.mark.parametrize("how", ["429", "503", "connect"])
def test_an_outage_of_every_endpoint_at_once_fails_nothing_and_recovers(how):
    servers = [harsh(i, outages=[(10.0, 14.0)], outage_reply=how) for i in (1, 2)]
    sim = Sim()
    c = Client(sim, servers, 12000)
    sim.run([c], until=40.0)
    assert not c.failed
    before = sum(1 for t in c.done_at if 5.0 <= t < 10.0) / 5.0
    after = sum(1 for t in c.done_at if 20.0 <= t < 25.0) / 5.0
    assert after >= 0.9 * before


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_capacity_that_dropped_for_good_is_not_climbed_back_to_on_answers_still_on_their_way_back(seed):
    # 30 ms (+-90%) of dispatch and return around each call: the gate's count of what was at the server when a
    # request got there includes answers already on their way back, so a request sent one over the refusal level
    # is often served at a cap that has not moved.  Evidence that the capacity came back is judged on the requests
    # surely at the server: none here, so no climb back to 64 (each one refused within a round trip, a burst of
    # refusals), and the capacity seen before is still remembered for when it does come back.
    server = harsh(seed, retry_after="s", capacity_steps=[(10.0, 16)])
    sim = Sim()
    c = Client(sim, server, 30000, transit=(0.03, 0.03), transit_jitter=0.9)
    sim.run([c], until=40.0)
    lim = c.gate.endpoints[0].limit
    assert lim.regains == 0
    assert lim.memory.target() >= 0.9 * 64


def test_reply_lengths_drawn_apart_from_latency_do_not_make_its_spread_read_as_queueing():
    # A refusing cap whose replies report 8-24 tokens drawn apart from their latency (as judgeserver.py's do):
    # divided by them, latency spreads more than it does itself, and the ratio of two 128-answer means (recent,
    # and slow start's lower levels, ~6% faster here) crossed 1.3 by chance: a cut of 15-20% for seconds (the
    # limit climbs back one per round trip above the knee it set), on 6 of these 12 runs of a minute.  Judged by
    # latency itself (the lengths do not explain it), 2.
    cuts = 0
    for seed in range(1, 13):
        server = harsh(seed, retry_after="s", reply_tokens=lambda rng: 8 + rng.randrange(17))
        sim = Sim()
        c = Client(sim, server, 30000)
        sim.run([c], until=60.0)
        cuts += c.gate.endpoints[0].limit.queue_cuts > 0
    assert cuts <= 2
