"""The adaptive limit against simulated endpoints (discrete events, no clock)."""

from __future__ import annotations

import copy
import heapq
import random
from typing import Optional

import pytest

from qworker.judge.control.limiter import AdaptiveLimit
from tests.contract.judge import judgesim
from tests.contract.judge.judgesim import Server


def simulate(
    n: int, *, capacity: int = 10**9, rate: Optional[float] = None, latency: float = 0.2, initial: float = 16,
    seed: int = 1, capacity_after: Optional[tuple[float, int]] = None,
) -> tuple[float, int, AdaptiveLimit]:
    """(requests/s, refusals, limiter) for a client that keeps ``limit`` in flight.

    The endpoint refuses beyond ``capacity`` requests in service, or beyond a
    token bucket of ``rate`` per second holding one second's worth.  Refusals
    come back after 1-20 ms, as they do on a loaded machine, so requests sent
    meanwhile are refused too.  ``capacity_after`` = (time, capacity) changes
    the capacity mid-run.
    """
    rng = random.Random(seed)
    lim = AdaptiveLimit(initial=initial)
    t, active, in_service, done, drops, queued = 0.0, 0, 0, 0, 0, n
    tokens, refilled = (rate or 0.0), 0.0
    events: list = []  # (time, sent_at, refused)
    while done < n:
        if capacity_after and t >= capacity_after[0]:
            capacity = capacity_after[1]
        while queued and active < int(lim.limit):
            queued -= 1
            active += 1
            refused = in_service >= capacity
            if rate is not None and not refused:
                tokens = min(rate, tokens + (t - refilled) * rate)
                refilled = t
                refused = tokens < 1.0
                tokens -= 0.0 if refused else 1.0
            in_service += 0 if refused else 1
            back = rng.uniform(0.001, 0.02) if refused else latency * rng.uniform(0.98, 1.05)
            heapq.heappush(events, (t + back, t, refused))
        t, sent_at, refused = heapq.heappop(events)
        active -= 1
        if refused:
            drops += 1
            queued += 1
            lim.on_drop(active + 1, t, sent_at=sent_at)
        else:
            in_service -= 1
            done += 1
            lim.on_success(t - sent_at, active + 1, t)
    return n / t, drops, lim


def test_holds_a_concurrency_cap_at_the_capacity_with_few_refusals():
    rate, drops, lim = simulate(20_000, capacity=64)
    assert rate > 0.97 * 320
    assert drops < 0.005 * 20_000
    assert 62 <= lim.limit <= 66


def test_converges_within_a_bounded_number_of_requests():
    # from 16, slow start reaches the capacity in a few round trips: within 1,000 requests
    rate, drops, lim = simulate(1000, capacity=64)
    assert lim.drops >= 1 and 58 <= lim.limit <= 66


def test_small_capacity():
    rate, drops, lim = simulate(2000, capacity=4, latency=0.1)
    assert rate > 0.85 * 40 and lim.limit <= 6


def test_a_rate_limit_is_found_with_few_refusals():
    # 200 requests/s with a one-second burst: Little's law gives 40 in flight at 200 ms
    rate, drops, lim = simulate(20_000, rate=200.0)
    assert rate > 0.95 * 200
    assert drops < 0.01 * 20_000
    assert 30 <= lim.limit <= 50


def test_a_capacity_that_halves_is_followed_down():
    rate, drops, lim = simulate(20_000, capacity=64, capacity_after=(10.0, 32))
    assert 30 <= lim.limit <= 34
    assert drops < 0.01 * 20_000


def ended_slow_start(level: int = 90, echoes: int = 0) -> AdaptiveLimit:
    """A limiter whose slow start just ended with a refusal at ``level`` (at t = 1 s), and ``echoes`` after it."""
    lim = AdaptiveLimit(initial=level)
    lim.on_success(0.2, level, 0.0)
    lim.on_drop(level, 1.0, sent_at=0.99)
    for k in range(echoes):  # refusals of requests sent before that reaction
        lim.on_drop(level - 1 - k, 1.001 + k * 0.001, sent_at=0.98)
    return lim


def test_a_lone_refusal_caps_without_a_cut():
    lim = AdaptiveLimit(initial=70)
    lim.slow_start = False
    lim.on_success(0.2, 70, 0.0)
    lim.on_drop(65, 5.0, sent_at=4.999)
    assert lim.limit == 64  # the capacity, not a tenth below it


def test_the_first_refusal_of_slow_start_goes_back_a_round_trip():
    lim = ended_slow_start(90)
    assert lim.limit == 60 and not lim.slow_start  # 90 / 1.5: the level of a round trip ago
    lim = AdaptiveLimit(initial=40)
    lim.limit = 90.0  # beyond twice the initial limit slow start grows x1.25
    lim.on_drop(90, 1.0, sent_at=0.99)
    assert lim.limit == 72


def test_echoes_cap_but_do_not_cut_again():
    lim = ended_slow_start(90, echoes=20)
    assert lim.limit == 60


def test_a_fresh_refusal_after_a_burst_cuts_again():
    lim = ended_slow_start(90, echoes=10)  # a burst: more than burst_drops
    lim.on_drop(58, 1.05, sent_at=1.04)  # sent after the reaction, still refused: a rate limit, or less capacity
    assert lim.limit == 29


def test_a_staircase_of_single_refusals_is_not_a_burst():
    lim = AdaptiveLimit(initial=70)
    lim.slow_start = False
    lim.on_success(0.2, 70, 0.0)
    for k in range(4):  # each one over what was left: the limit steps down, no cut
        lim.on_drop(68 - k, 5.0 + k * 0.01, sent_at=4.999 + k * 0.01)
    assert lim.limit == 64


def test_each_echo_lowers_the_level_to_recover_to():
    lim = AdaptiveLimit(initial=90)
    lim.on_success(0.2, 90, 0.0)
    lim.on_drop(70, 1.0, sent_at=0.99)
    for k in range(5):  # five more of the 70 were over the capacity, however many answers came back meanwhile
        lim.on_drop(50 - 5 * k, 1.001 + k * 0.001, sent_at=0.98)
    assert lim.last_drop_level == 65


def test_after_an_overload_it_climbs_back_one_per_round_trip():
    lim = ended_slow_start(90, echoes=10)
    lim.on_drop(58, 1.05, sent_at=1.04)  # halved to 29
    t = 1.3
    for _ in range(29):  # one round trip of answers
        t += 0.2 / 29
        lim.on_success(0.2, int(lim.limit), t)
    assert 29.5 <= lim.limit <= 30.5


def test_slow_start_slows_beyond_twice_the_initial_limit():
    lim = AdaptiveLimit(initial=16)
    t = 0.0
    for _ in range(16):
        t += 0.01
        lim.on_success(0.2, int(lim.limit), t)
    assert lim.limit == 24  # x1.5
    lim.limit = 40.0
    for _ in range(40):
        t += 0.01
        lim.on_success(0.2, int(lim.limit), t)
    assert lim.limit == 50  # x1.25


def test_a_timeout_cuts():
    lim = AdaptiveLimit(initial=64)
    lim.slow_start = False
    lim.on_success(0.2, 64, 0.0)
    lim.on_drop(64, 5.0, sent_at=4.0, timeout=True)
    assert lim.limit <= 0.9 * 64


def test_after_a_cut_it_climbs_straight_back_under_the_refused_level():
    lim = AdaptiveLimit(initial=100)
    lim.on_success(0.2, 100, 0.0)
    lim.on_drop(66, 1.0, sent_at=0.99)  # slow start ends: 44
    t = 1.0
    for _ in range(30):  # one round trip later, the answers say there is room again
        t += 0.21
        lim.on_success(0.2, int(lim.limit), t)
    assert 65 <= lim.limit < 65.1  # one under the refused level, then a slow probe


def test_queueing_is_seen_across_levels_and_cut_to_the_knee():
    # a server that serves 50 at once: 0.1 s up to 50 in flight, then latency grows with the level (Little's law)
    lim = AdaptiveLimit(initial=50)
    t = 0.0
    for _ in range(300):
        t += 0.002
        lim.on_success(0.1, 50, t, level=40)
    for _ in range(300):
        t += 0.002
        lim.on_success(0.2, 100, t, level=100)  # twice the knee: twice the latency
    assert lim.queue_cuts >= 1 and 45 <= lim.knee_level <= 60 and lim.limit <= 60


def test_latency_spread_alone_does_not_cut():
    # lognormal latency (sigma 0.6, a 10x spread between p1 and p99) at one steady level: no queue, no cut
    import math
    rng = random.Random(3)
    lim = AdaptiveLimit(initial=64)
    t = 0.0
    for _ in range(20_000):
        t += 1 / 213
        lim.on_success(0.3 * math.exp(0.6 * rng.gauss(0, 1) - 0.18), 64, t, level=64)
    assert lim.queue_cuts == 0 and lim.limit >= 64


def test_latency_per_output_token_is_used_when_replies_carry_it():
    lim = AdaptiveLimit(initial=32)
    rng = random.Random(5)
    t = 0.0
    for _ in range(2000):  # latency varies 20x with the output length; per token it is steady
        n = rng.randint(10, 200)
        t += 0.005
        lim.on_success(0.01 * n, 32, t, level=32, tokens=n)
    assert lim.base() == pytest.approx(0.01) and lim.queue_cuts == 0


def test_idle_limit_does_not_grow():
    lim = AdaptiveLimit(initial=32)
    for i in range(100):
        lim.on_success(0.1, 2, i * 0.01)  # only 2 in flight: the headroom is untested
    assert lim.limit == 32


def test_every_refusal_caps_at_what_was_in_flight():
    lim = AdaptiveLimit(initial=64)
    lim.slow_start = False
    lim.on_success(0.2, 64, 0.0)
    lim.on_drop(40, 1.0, sent_at=0.999)
    assert lim.limit <= 39


def test_after_a_tenant_leaves_the_limit_climbs_back_within_three_seconds():
    # Capacity 64, seen as a cap (two lone refusals at 65).  A tenant takes half: the first refusal comes
    # while 41 were still in flight, and refusals of requests sent before it (echoes) follow, between
    # answers.  The tenant holds its half for 3 s (what goes over 32 is refused), then leaves and nothing
    # is refused: the limit must climb back to the capacity seen within 3 s, not wait for a refusal at the
    # level in flight at the first refusal (41), which the limit below it never reaches.
    lim = AdaptiveLimit(initial=64)
    lim.slow_start = False
    t = 0.0
    for k in (65, 65):
        for _ in range(200):
            t += 0.3 / 64
            lim.on_success(0.3, int(lim.limit), t)
        t += 0.5
        lim.on_drop(k, t, sent_at=t - 0.01)
    assert lim.high >= 60
    t += 0.5
    lim.on_drop(41, t, sent_at=t - 0.01)  # the tenant came
    for k in range(10):
        t += 0.01
        lim.on_success(0.3, 40 - k, t)
        lim.on_drop(40 - k, t, sent_at=t - 0.2)  # echoes
    tenant_left = t + 3.0
    while t < tenant_left:  # the tenant holds 32: a request over that is refused
        t += 0.3 / max(1, int(lim.limit))
        if int(lim.limit) > 32:
            lim.on_drop(int(lim.limit), t, sent_at=t - 0.1)
        else:
            lim.on_success(0.3, int(lim.limit), t)
    assert lim.limit <= 40
    while t < tenant_left + 3.0:  # answers at the limit, no refusal
        t += 0.3 / max(1, int(lim.limit))
        lim.on_success(0.3, int(lim.limit), t)
    assert lim.limit >= 0.9 * 64, (lim.limit, lim.refused_level)


def test_after_capacity_returns_the_limiters_own_load_is_not_read_as_queueing():
    # The latency at full capacity is 1.4 x that at half (the server, or the client's own overhead, is
    # slower with 64 in flight than with 32, with no queue).  A base learnt while a tenant held half the
    # capacity would read that as queueing once the tenant left and cut to the "knee" (about 50); the base
    # is learnt afresh once the limit has climbed back.
    lim = AdaptiveLimit(initial=64)
    lim.slow_start = False
    t = 0.0
    for _ in range(2):  # a concurrency cap of 64: two lone refusals at 65
        for _ in range(200):
            t += 0.3 / 64
            lim.on_success(0.3, int(lim.limit), t)
        t += 0.5
        lim.on_drop(65, t, sent_at=t - 0.01)
    t += 0.5
    lim.on_drop(33, t, sent_at=t - 0.01)  # the tenant takes half
    for _ in range(1500):  # it holds half: the limit sits at 32, answered in 0.3 s
        t += 0.3 / max(1, int(lim.limit))
        if lim.limit >= 33:
            lim.on_drop(int(lim.limit), t, sent_at=t - 0.01)
        else:
            lim.on_success(0.3, int(lim.limit), t)
    left = t
    while t < left + 20.0:  # it left: nothing refused; 0.42 s per answer above 40 in flight
        latency = 0.42 if lim.limit > 40 else 0.3
        t += latency / max(1, int(lim.limit))
        lim.on_success(latency, int(lim.limit), t)
    assert lim.limit >= 0.9 * 64 and lim.queue_cuts == 0, (lim.limit, lim.queue_cuts)


# ---- gates against simulated judge servers (tests/contract/judge/judgesim.py): the bench's targets, on simulated time ----

def against_semaphore(server: Server, n: int = 5000) -> tuple[float, float, judgesim.Server]:
    """(tasks/s with no capacity hint, tasks/s of a client holding exactly ``capacity`` in flight, the server)."""
    t_sem, _, _ = judgesim.run(copy.deepcopy(server), n, semaphore=server.capacity)
    t, clients, srv = judgesim.run(server, n)
    assert not clients[0].failed
    return n / t, n / t_sem, srv


def refused_share(srv: Server) -> float:
    return srv.stats["refused"] / srv.stats["requests"]


@pytest.mark.parametrize("retry_after", ["ms", "s"])
def test_lognormal_latency_at_a_concurrency_cap(retry_after):
    rate, ideal, srv = against_semaphore(Server(capacity=64, latency=0.3, sigma=0.6, retry_after=retry_after))
    assert rate >= 0.97 * ideal and rate >= 0.9 * 64 / 0.3
    assert refused_share(srv) <= 0.01


def test_per_token_latency_with_output_length_varying():
    tokens = lambda rng: max(1, int(rng.lognormvariate(4.8, 0.6)))  # noqa: E731  (about 150 tokens, 10x spread)
    rate, ideal, srv = against_semaphore(Server(capacity=32, latency=0.002, tokens_per_reply=tokens))
    assert rate >= 0.97 * ideal and refused_share(srv) <= 0.01


def test_a_queueing_server_is_held_at_its_knee():
    rate, ideal, srv = against_semaphore(Server(mode="queue", capacity=64, latency=0.3, sigma=0.6))
    assert rate >= 0.97 * ideal
    assert srv.stats["queued_s"] <= 0.25 * srv.stats["service_s"]  # mean time queued <= a quarter of the service time


def test_a_token_bucket_with_whole_second_retry_after():
    t, (c,), srv = judgesim.run(Server(rate=150, latency=0.3, sigma=0.6, retry_after="s"), 5000)
    assert 5000 / t >= 0.95 * 150 and not c.failed
    assert refused_share(srv) <= 0.01


def test_rate_limit_headers_remove_the_start_up_burst_of_refusals():
    t, (c,), srv = judgesim.run(Server(rate=150, latency=0.3, sigma=0.6, retry_after="s", headers=True), 5000)
    assert 5000 / t >= 0.95 * 150
    assert srv.stats["refused"] <= 5


def test_two_clients_share_one_endpoint_evenly_within_its_capacity():
    t, clients, srv = judgesim.run(Server(capacity=64, latency=0.3, sigma=0.6), 5000, clients=2)
    first = min(max(c.done_at) for c in clients)
    shares = [sum(1 for x in c.done_at if x <= first) for c in clients]
    assert sum(shares) / first >= 0.9 * 64 / 0.3
    assert all(0.75 <= s / (sum(shares) / 2) <= 1.25 for s in shares), shares
    assert refused_share(srv) <= 0.02


def test_random_503s_do_not_collapse_the_limit():
    server = Server(capacity=64, latency=0.3, sigma=0.6, p_error=0.05)
    rate, ideal, srv = against_semaphore(server)
    assert rate >= 0.95 * ideal  # the semaphore client suffers the same errors


def _window(clients: list, server: Server, lo: float, hi: float) -> tuple[list[float], float, float]:
    """(each client's share of the answers in (lo, hi], mean seconds queued at the server, mean service seconds)."""
    counts = [sum(1 for x in c.done_at if lo < x <= hi) for c in clients]
    waits = [w for t, w in server.waits if lo < t <= hi]
    service = server.stats["service_s"] / max(1, len(server.waits))
    return [n / max(1, sum(counts)) for n in counts], sum(waits) / max(1, len(waits)), service


def test_a_latecomer_on_a_queueing_server_gets_a_share_when_its_metrics_url_steers():
    # The second producer starts while the first holds the whole server: both read running/waiting
    # from the server, cut in proportion to what they hold, and converge; the queue stays at about the next batch.
    server = Server(mode="queue", capacity=64, latency=0.3, sigma=0.6)
    clients = judgesim.run_staggered(server, 40000, [0.0, 20.0], until=60.0, metrics=True)
    shares, queued, service = _window(clients, server, 40.0, 60.0)
    assert shares[1] >= 0.3, shares
    assert queued <= 1.3 * service  # (a batch queued: ``ServerLoad``)
    done = sum(1 for c in clients for x in c.done_at if 40.0 < x <= 60.0) / 20.0
    assert done >= 0.9 * 64 / 0.3


def test_a_base_measured_under_someone_elses_load_is_rebuilt_when_it_leaves():
    # Another client holds 56 of a 64-wide queueing server when this one starts, so the latencies of
    # its lowest levels, its base, include that queue.  Once the other leaves, answers come back far
    # faster than that base; the base is rebuilt from them and the queue shrinks (without the
    # rebuild: limit 132, queued 0.76 x the service time).
    server = Server(mode="queue", capacity=64, latency=0.3, sigma=0.6)
    background, = judgesim.run_staggered(server, 3000, [0.0], until=0.0, semaphore=56)
    clients = judgesim.run_staggered(server, 40000, [2.0], until=60.0, sim=background.sim)
    assert max(background.done_at) < 40.0
    _, queued, service = _window(clients, server, 40.0, 60.0)
    limit = clients[0].gate.endpoints[0].limit
    assert limit.rebases >= 1 and limit.limit < 1.5 * 64
    assert queued <= 0.5 * service
