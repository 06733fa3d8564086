"""Prefix-affinity routing over a fleet of replicas with prefix caches (simulated time), and the prefix-cache model."""

from __future__ import annotations

import json
import random
import statistics
import urllib.request
from collections import Counter, defaultdict

import msgpack
import pytest

from qworker.engine.task import Pending
from qworker.judge.control.gate import Gate
from qworker.judge.control.routing import affinity_text
from qworker.testing import MockJudge
from qworker.testing.prefixcache import PrefixCache
from tests.contract.judge.judgesim import TRANSIT_S, Client, Server, Sim

FILL = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "


def grpo(group: int, prompt_chars: int = 12000, response_chars: int = 1200):
    """Task i: response i % group to prompt i // group (a GRPO group shares the judge prompt up to the response)."""
    def payload(i: int) -> dict:
        g, k = divmod(i, group)
        return {"prompt": f"Question {g}: " + (FILL * (prompt_chars // len(FILL) + 1))[:prompt_chars],
                "response": f"answer {g}.{k} " + (FILL * (response_chars // len(FILL) + 1))[:response_chars], "ground_truth": "42"}
    return payload


def fleet(routing: str, group: int, n: int = 3000, replicas: int = 8, seed: int = 1, arrival_rate=None) -> tuple[float, float, Client, list[Server]]:
    """(answers/s, prefix-cache hit rate, client, servers): queueing replicas (batch 16, decode 0.3 s lognormal) with prefix caches."""
    servers = [Server(mode="queue", capacity=16, latency=0.3, sigma=0.6, seed=100 * seed + i,
                      prefix=PrefixCache(blocks=20000, prefill_s_per_token=0.0002)) for i in range(replicas)]
    sim = Sim()
    c = Client(sim, servers, n, payload=grpo(group), metrics=True, routing=routing, arrival_rate=arrival_rate)
    end = sim.run([c])
    hit = sum(s.prefix.stats["hit_tokens"] for s in servers) / sum(s.prefix.stats["prompt_tokens"] for s in servers)
    assert not c.failed and len(c.done_at) == n
    return n / end, hit, c, servers


def replicas(batch: int, seed: int, n: int = 8) -> list[Server]:
    """``n`` queueing replicas (batch ``batch``, decode lognormal mean 0.3 s) with prefix caches (0.2 ms prefill per missed token)."""
    return [Server(mode="queue", capacity=batch, latency=0.3, sigma=0.6, seed=100 * seed + i,
                   prefix=PrefixCache(blocks=20000, prefill_s_per_token=0.0002)) for i in range(n)]


class HandSetClient:
    """A hand-set client given each replica's batch: ``slots`` in flight per replica, no adaptation.  ``"round_robin"``:
    task i to replica i mod R; ``"group"``: each whole group to one replica (group g to g mod R).  ``shared``: the
    ``slots`` x R slots are one pool, taken by the tasks in order as a slot frees anywhere (the bench's aiohttp client
    with a semaphore of 64 over 8 replicas), not ``slots`` per replica."""

    def __init__(self, sim: Sim, servers: list[Server], n: int, group: int, how: str, slots: int, shared: bool = False) -> None:
        self.sim, self.servers, self.n, self.slots, self.shared = sim, servers, n, slots, shared
        self.done_at: list[float] = []
        self.busy = [0] * len(servers)
        self.queues: list[list[Pending]] = [[] for _ in servers]
        self.order: list[int] = []  # shared: the replica of each task not yet sent, last first
        payload = grpo(group)
        for i in range(n):
            r = i % len(servers) if how == "round_robin" else (i // group) % len(servers)
            self.queues[r].append(Pending(f"h{i}".encode(), "llm_judge", {}, msgpack.packb(payload(i)), None, None, 0.0))
            self.order.append(r)
        for q in self.queues:
            q.reverse()
        self.order.reverse()
        for r in range(len(servers)):
            self.pump(r, sim.t)

    def pump(self, r: int, t: float) -> None:
        if self.shared:
            while sum(self.busy) < self.slots * len(self.servers) and self.order:
                self.send(self.order.pop(), t)
            return
        while self.busy[r] < self.slots and self.queues[r]:
            self.send(r, t)

    def send(self, r: int, t: float) -> None:
        p = self.queues[r].pop()
        self.busy[r] += 1
        self.servers[r].arrive(self.sim, t + TRANSIT_S / 2, lambda t_end, out, r=r: self.sim.at(
            t_end + TRANSIT_S / 2, lambda tt: self.answer(r, tt)), p)

    def answer(self, r: int, t: float) -> None:
        self.busy[r] -= 1
        self.done_at.append(t)
        self.pump(r, t)

    @property
    def finished(self) -> bool:
        return len(self.done_at) >= self.n


def at_the_replica_p50(servers: list[Server]) -> float:
    """The median seconds a request spent at its replica (queued + served)."""
    return statistics.median(w + s for srv in servers for (_, w), (_, s) in zip(srv.waits, srv.services, strict=True))


def mean_judge_s(servers: list[Server]) -> float:
    """Mean seconds a request spent at the judge (queued + served)."""
    return sum(s.stats["queued_s"] + s.stats["service_s"] for s in servers) / sum(s.stats["served"] for s in servers)


def prefix_without_metrics(batch: int, seed: int, n: int, group: int) -> tuple[float, list[Server], Client]:
    """``n`` GRPO tasks routed by prefix, no metrics URL, to 8 replicas of ``batch``: (tasks/s, the replicas, the client);
    every task done and none failed."""
    servers = replicas(batch, seed)
    sim = Sim()
    c = Client(sim, servers, n, payload=grpo(group), routing="prefix")
    end = sim.run([c])
    assert not c.failed and len(c.done_at) == n
    return n / end, servers, c


def test_the_prefix_cache_hits_leading_blocks_and_evicts_the_least_recent():
    c = PrefixCache(blocks=8, prefill_s_per_token=0.001, block_chars=64)
    a, b = "A" * 256 + "x" * 64, "A" * 256 + "y" * 64  # 4 shared blocks, 1 own
    assert c.serve(a) == pytest.approx(0.08)  # 320 chars = 80 tokens, all missed
    assert c.serve(b) == pytest.approx(0.016)  # only its last block
    assert c.hit_rate() == pytest.approx(64 / 160)
    c.serve("B" * 640)  # 10 blocks: more than the cache holds, evicting all of a's
    assert c.serve(a) == pytest.approx(0.08)
    assert len(c.lru) == 8


def test_the_affinity_text_is_the_prompt_up_to_the_response():
    payload = grpo(8)(3)
    text = affinity_text({}, payload)
    assert "Question 0:" in text and "answer 0." not in text and text.endswith("Model's answer:\n")
    assert affinity_text({}, grpo(8)(5)) == text != affinity_text({}, grpo(8)(9))
    # a template that starts with the response shares nothing before it
    assert affinity_text({"prompt_template": "{response}\n{prompt}"}, payload) == "\x00"
    assert affinity_text({"prompt_template": "no placeholders"}, payload).endswith(payload["prompt"])


def test_a_group_goes_to_one_replica_when_the_fleet_has_room():
    _, hit, c, _ = fleet("prefix", 8, n=1600, arrival_rate=100)
    groups = defaultdict(set)
    for i, (_, route) in enumerate(c.sends):  # nothing waits, so sends are in submission order: task i is in group i // 8
        groups[i // 8].add(route)
    together = sum(1 for s in groups.values() if len(s) == 1) / len(groups)
    # the rest were split by the load bound (a replica 16 over the least loaded one)
    assert together > 0.75
    assert hit > 0.7  # of at most 7/8 of the shared prefix's share of the prompt (0.79)
    assert fleet("round_robin", 8, n=1600, arrival_rate=100)[1] < 0.05


@pytest.mark.parametrize("group", [8, 16])
def test_prefix_affinity_beats_round_robin_and_free_capacity_on_grpo_groups(group):
    ratios, hits = [], []
    for seed in (1, 2, 3):  # paired: each routing meets the same servers' draws
        rates = {r: fleet(r, group, seed=seed) for r in ("prefix", "round_robin", "capacity")}
        ratios.append(min(rates["prefix"][0] / rates["round_robin"][0], rates["prefix"][0] / rates["capacity"][0]))
        hits.append((rates["prefix"][1], rates["round_robin"][1]))
        assert mean_judge_s(rates["prefix"][3]) <= mean_judge_s(rates["round_robin"][3])  # equal or better latency
    assert statistics.median(ratios) >= 1.3, (ratios, hits)
    assert all(p > r + 0.2 for p, r in hits)


def test_one_hot_prefix_is_spread_by_the_load_bound():
    servers = [Server(mode="queue", capacity=16, latency=0.3, sigma=0.6, seed=i, prefix=PrefixCache()) for i in range(4)]
    sim = Sim()
    c = Client(sim, servers, 3000, payload=grpo(10**6), metrics=True, routing="prefix")  # one prompt for all
    sim.run([c])
    shares = Counter(route for _, route in c.served)
    assert not c.failed and len(shares) == 4
    assert min(shares.values()) / len(c.served) > 0.15


def test_a_replica_that_goes_down_hands_its_groups_on_and_nothing_fails():
    servers = [Server(mode="queue", capacity=16, latency=0.3, sigma=0.6, seed=i, prefix=PrefixCache(),
                      outage=(3.0, 8.0) if i == 0 else None, outage_reply="connect") for i in range(4)]
    sim = Sim()
    c = Client(sim, servers, 4000, payload=grpo(8), metrics=True, routing="prefix")
    sim.run([c])
    assert not c.failed and len(c.done_at) == 4000
    assert len([t for t, route in c.sends if route == 0 and 3.5 < t < 8.0]) <= 8  # probes only
    assert [t for t, route in c.served if route == 0 and t > 9.0]  # back after the outage


def test_prefix_routing_sends_each_task_once_and_each_group_to_one_replica():
    g = Gate({"model": "m", "endpoints": [{"url": f"http://r{i}"} for i in range(4)], "routing": "prefix"})
    tasks = [Pending(bytes([i]) * 16, "llm_judge", {}, msgpack.packb(grpo(4)(i)), None, None, 0.0) for i in range(64)]
    g.queue.extend(tasks)
    sent, failed = g.admit(0.0, 10**6)
    assert not failed and len(sent) == 64 and len({p.key for p in sent}) == 64
    by_group = defaultdict(set)
    for i, p in enumerate(tasks):
        by_group[i // 4].add(g.route(p))
    assert all(len(s) == 1 for s in by_group.values())


def test_the_mock_judge_serves_cached_prefixes_faster():
    judge = MockJudge(capacity=8, latency_s=0.01, prefix_blocks=1000, prefill_per_token_s=0.0005).start()
    try:
        def ask(text: str) -> None:
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()
            req = urllib.request.Request(judge.url, body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200
                r.read()
        shared = "Q" * 4000
        ask(shared + "first answer")
        ask(shared + "second answer")
        with urllib.request.urlopen(judge.url.replace("/v1/chat/completions", "/stats"), timeout=5) as r:
            stats = json.load(r)
        assert stats["prompts"] == 2 and stats["hits"] == 1
        assert 0.45 < stats["prefix_hit_rate"] < 0.5
        # the miss paid ~1000 tokens of prefill (0.5 s), the hit only its own tail
        assert stats["mean_service_s"] < 0.5
    finally:
        judge.stop()


@pytest.mark.parametrize("group", [8, 16])
def test_without_metrics_prefix_routing_finds_each_replicas_batch_and_keeps_its_queue_short(group):
    """Replicas whose batch (8) is under the limit's starting point (32), no metrics URL: the limiter finds the
    batch from latency alone, so the replicas hold no deep queue: the time at a replica is within 1.3x that of a
    hand-set client given the batch (64 slots round-robin), and the throughput that of a hand-set client sending
    each whole group to one replica (within 5%: the simulation's draws differ by routing)."""
    n, batch = 3000, 8
    for seed in (1, 2):
        rate, servers, c = prefix_without_metrics(batch, seed, n, group)
        at_replica = at_the_replica_p50(servers)
        limits = [e.limit.limit for e in c.gate.endpoints]
        hand = {}
        for how in ("round_robin", "group"):
            hs = replicas(batch, seed)
            sim = Sim()
            h = HandSetClient(sim, hs, n, group, how, slots=batch)
            hand[how] = (n / sim.run([h]), at_the_replica_p50(hs))  # type: ignore[list-item]
        assert at_replica <= 1.3 * hand["round_robin"][1], (seed, at_replica, hand, limits)
        assert rate >= 0.95 * hand["group"][0], (seed, rate, hand, limits)
        assert max(limits) <= 2 * batch, limits  # (started at 32 each)


@pytest.mark.parametrize("group", [8, 16])
def test_a_fleets_first_burst_sends_each_group_whole_to_one_replica(group):
    """Every replica's starting limit filled at once (8 x 32 tasks): the load bound chooses where each group begins,
    and the rest of the group follows it there rather than being split when that replica passes the bound."""
    g = Gate({"model": "m", "endpoints": [{"url": f"http://r{i}"} for i in range(8)], "routing": "prefix"})
    tasks = [Pending(i.to_bytes(4, "big") * 4, "llm_judge", {}, msgpack.packb(grpo(group)(i)), None, None, 0.0) for i in range(256)]
    g.queue.extend(tasks)
    sent, failed = g.admit(0.0, 10**6)
    assert not failed and len(sent) == 256
    by_group = defaultdict(set)
    for i, p in enumerate(tasks):
        by_group[i // group].add(g.route(p))
    assert all(len(s) == 1 for s in by_group.values()), {k: v for k, v in by_group.items() if len(v) > 1}


@pytest.mark.parametrize("group", [8, 16])
def test_without_metrics_a_fleets_replicas_hold_no_deep_queue_from_the_first_burst_on(group):
    """Replicas with a batch (8) under the starting limit (32), no metrics URL, 1,000 tasks (125 a replica, so the first
    burst's queue weighs): the mean time a request spends at a replica is within 1.3x that of a hand-set client given the
    batch (64 slots over the 8 replicas, round-robin), and the throughput within 8% of a hand-set client sending each
    whole group to one replica (the first burst still queues: the batch is known a service time after it)."""
    n, batch = 1000, 8
    for seed in (1, 2, 3):
        rate, servers, c = prefix_without_metrics(batch, seed, n, group)
        at_replica = mean_judge_s(servers)
        rr = replicas(batch, seed)
        sim = Sim()
        sim.run([HandSetClient(sim, rr, n, group, "round_robin", slots=batch, shared=True)])  # type: ignore[list-item]
        whole = replicas(batch, seed)
        sim = Sim()
        whole_rate = n / sim.run([HandSetClient(sim, whole, n, group, "group", slots=batch)])  # type: ignore[list-item]
        assert at_replica <= 1.3 * mean_judge_s(rr), (seed, at_replica, mean_judge_s(rr))
        assert rate >= 0.92 * whole_rate, (seed, rate, whole_rate)


SERVED = {"status": 200, "failure": "", "latency_s": 0.3, "retry_after_s": None, "completion_tokens": 12, "ratelimit": None}


def test_prompts_sent_again_after_their_groups_are_answered_are_placed_by_the_load_bound_afresh():
    """Two groups that the first burst put on one replica (8 replicas, 16 groups of 16, 32 each), all answered; then
    the same two prompts again (a second epoch, new responses) with the fleet idle: the load bound places them afresh,
    on two replicas (a replica holding one group's 16 is over the bound while the others hold nothing), each whole,
    rather than both following the replica they went to before."""
    g = Gate({"model": "m", "endpoints": [{"url": f"http://r{i}", "max_concurrency": 32} for i in range(8)],
              "routing": "prefix", "initial_concurrency": 32})

    def burst(groups: list[int], tag: str) -> dict[int, set[int]]:
        tasks = [Pending(f"{tag}-{k}-{j}".encode(), "llm_judge", {}, msgpack.packb({**grpo(16)(16 * k + j), "response": f"{tag} {j}"}),
                         None, None, 0.0) for k in groups for j in range(16)]
        g.queue.extend(tasks)
        sent, failed = g.admit(0.0, 10**6)
        assert not failed and len(sent) == len(tasks)
        routes: dict[int, set[int]] = defaultdict(set)
        for p in tasks:
            routes[int(msgpack.unpackb(p.payload)["prompt"].split(":")[0].split()[1])].add(g.route(p))
        random.Random(tag).shuffle(sent)  # answered in no order (a server serving all of them at once)
        for p in sent:
            assert not g.settle(p, SERVED, None, 0.5)
        return routes

    first = burst(list(range(16)), "first")
    assert all(len(r) == 1 for r in first.values()), first
    by_replica: dict[int, list[int]] = defaultdict(list)
    for k, r in first.items():
        by_replica[next(iter(r))].append(k)
    pair = next(ks for ks in by_replica.values() if len(ks) == 2)
    again = burst(pair, "again")
    assert all(len(r) == 1 for r in again.values()) and again[pair[0]] != again[pair[1]], (first, again)


@pytest.mark.parametrize("group", [8, 16])
def test_without_metrics_a_burst_that_reaches_the_replicas_out_of_order_builds_no_runaway_queue(group):
    """Replicas with a batch (8) under the starting limit (32), no metrics URL, and each request dispatched after
    0-20 ms (workers racing to send a burst): each replica's share of the first burst reaches it in an order other
    than the levels it was sent at, so neither the order of its answers nor their latency by level shows the batch.
    The latency of the burst as a whole, against what was sent while it was out, does: the replicas' limits come
    down near their batch instead of slow start running on, and the mean time a request spends at a replica stays
    within 2x that of a hand-set client given the batch (64 slots over the 8 replicas, round-robin), medians of 3
    seeds (without it: 3-4x, the limits near 47)."""
    n, batch = 2000, 8
    ratios, limits = [], []
    for seed in (1, 2, 3):
        servers = replicas(batch, seed)
        sim = Sim()
        c = Client(sim, servers, n, payload=grpo(group), routing="prefix", transit=(0.01, 0.002), transit_jitter=1.0)
        sim.run([c])
        assert not c.failed and len(c.done_at) == n
        rr = replicas(batch, seed)
        sim = Sim()
        sim.run([HandSetClient(sim, rr, n, group, "round_robin", slots=batch, shared=True)])  # type: ignore[list-item]
        ratios.append(mean_judge_s(servers) / mean_judge_s(rr))
        limits.extend(e.limit.limit for e in c.gate.endpoints)
    assert statistics.median(ratios) <= 2.0, (ratios, limits)
    assert statistics.median(limits) <= 2 * batch, limits


def test_a_failed_call_in_the_first_burst_does_not_stop_its_batch_being_read():
    """As above (group 16), with replicas that answer 3% of requests with a 503 (no Retry-After: an error, neither
    served nor refused): most replicas fail a call of their first burst.  The burst is read once every call of it has
    ended, whatever the outcome, so the limits still come down near the batch (without counting failed calls as ended:
    never, on a replica kept busy, the limits near 47)."""
    n, batch = 2000, 8
    limits = []
    for seed in (1, 2, 3):
        servers = replicas(batch, seed)
        for s in servers:
            s.p_error = 0.03
        sim = Sim()
        c = Client(sim, servers, n, payload=grpo(16), routing="prefix", transit=(0.01, 0.002), transit_jitter=1.0)
        sim.run([c])
        assert len(c.done_at) + len(c.failed) == n
        limits.extend(e.limit.limit for e in c.gate.endpoints)
    assert statistics.median(limits) <= 2 * batch, limits
