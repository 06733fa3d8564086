"""Golden traces of the judge limiter: its limit over simulated time in the judgesim scenarios the tests use.

Each scenario below is one the judge tests run on ``judgesim`` (simulated time, deterministic): the
same servers, clients and seeds.  Recording one runs it with a sampler that reads, every
``SAMPLE_S`` simulated seconds, each client's limit and in-flight count on each endpoint (read only:
the run is the same with and without it), and summarises it: the mean limit, the share of what the
servers allowed that the clients were served, the share of requests refused, and the seconds to
re-adapt after each change.  ``golden/<scenario>.json`` holds what today's limiter does.

    python -m tests.contract.judge.goldens record [NAME ...]    # write golden/*.json (on purpose, after a limiter change)
    python -m tests.contract.judge.goldens compare [NAME ...]   # re-run and print before (stored) / after (now), per scenario
    python -m tests.contract.judge.goldens record --dir D        # write the traces to D instead (a candidate, not the goldens)
    python -m tests.contract.judge.goldens compare --after D    # before (stored) / after (the traces in D), without re-running

A test (``test_goldens.py``) checks that today's code reproduces the stored traces exactly, so a
limiter change shows up as a diff that must be re-recorded on purpose, with ``compare``'s table
showing what it did.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from qworker.judge.control.peers import MemoryBoard
from qworker.testing.prefixcache import PrefixCache
from tests.contract.judge.judgesim import Client, SemaphoreClient, Server, Sim

__all__ = ["Scenario", "SCENARIOS", "record", "load", "compare", "main"]

GOLDEN = Path(__file__).resolve().parent / "golden"
SAMPLE_S = 0.25  # seconds of simulated time between samples
DIGITS = 3


@dataclass(frozen=True)
class Scenario:
    """Servers (``judgesim.Server`` keyword arguments), clients ({"start": s, "n": tasks, **``Client`` keywords}),
    an optional tenant ({"start", "n", "concurrency", "stop"}: a ``SemaphoreClient``), run until ``until``
    simulated seconds or until every client is done; ``changes``: seconds at which the servers change
    (capacity, tenant, outage), for re-adapt times; ``source``: the test that runs it."""

    name: str
    source: str
    servers: list[dict]
    clients: list[dict]
    until: float = 3600.0
    board: bool = False
    tenant: Optional[dict] = None
    changes: list[float] = field(default_factory=list)
    quick: bool = False  # checked by the test on every run (the rest by ``record``/``compare``)


HARSH: dict = {"capacity": 64, "latency": 0.3, "sigma": 0.6, "refusal_latency": [0.05, 0.3], "load_slope": 0.2}
LOGN: dict = {"latency": 0.3, "sigma": 0.6}


def _scenarios() -> list[Scenario]:
    out: list[Scenario] = []
    add = out.append
    cap = "tests/contract/judge/test_capacity.py"
    for ra in ("ms", "s"):
        for seed in (1, 2, 3):
            add(Scenario(f"capacity-steps-{ra}-seed{seed}", f"{cap}::test_qworker_tracks_a_capacity_that_changes",
                         [{**HARSH, "seed": seed, "retry_after": ra, "capacity_steps": [[20.0, 16], [40.0, 64]]}],
                         [{"start": 0.0, "n": 20000}], until=60.0, changes=[20.0, 40.0], quick=(seed == 1 and ra == "ms")))
            add(Scenario(f"capacity-tenant-{ra}-seed{seed}", f"{cap}::test_qworker_tracks_a_capacity_that_changes",
                         [{**HARSH, "seed": seed, "retry_after": ra}], [{"start": 0.0, "n": 20000}], until=60.0,
                         tenant={"start": 20.0, "n": 10**5, "concurrency": 32, "stop": 40.0}, changes=[20.0, 40.0], quick=(seed == 1 and ra == "ms")))
        for seed in (1, 2, 3):
            moving = "test_capacity_that_returns_within_10_s_phases_is_found_within_2_s_with_few_refusals"
            add(Scenario(f"moving-step-{ra}-seed{seed}", f"{cap}::{moving}",
                         [{**HARSH, "seed": seed, "retry_after": ra, "capacity_steps": [[10.0, 16], [20.0, 64]]}],
                         [{"start": 0.0, "n": 20000}], until=30.0, changes=[10.0, 20.0], quick=(seed == 1 and ra == "s")))
            add(Scenario(f"moving-tenant-{ra}-seed{seed}", f"{cap}::{moving}",
                         [{**HARSH, "seed": seed, "retry_after": ra}], [{"start": 0.0, "n": 20000}], until=30.0,
                         tenant={"start": 10.0, "n": 10**5, "concurrency": 32, "stop": 20.0}, changes=[10.0, 20.0],
                         quick=(seed == 1 and ra == "s")))
        add(Scenario(f"capacity-quota-{ra}", f"{cap}::test_a_per_minute_quota_is_used_to_the_end_without_marking_the_endpoint_dead",
                     [{**HARSH, "seed": 1, "retry_after": ra, "quota_per_min": 6000}], [{"start": 0.0, "n": 30000}], until=180.0,
                     changes=[60.0, 120.0]))
    for how in ("429", "503", "connect"):
        add(Scenario(f"capacity-outage-both-{how}", f"{cap}::test_an_outage_of_every_endpoint_at_once_fails_nothing_and_recovers",
                     [{**HARSH, "seed": i, "outages": [[10.0, 14.0]], "outage_reply": how} for i in (1, 2)],
                     [{"start": 0.0, "n": 12000}], until=40.0, changes=[10.0, 14.0]))
    lim = "tests/contract/judge/test_limiter.py"
    for ra in ("ms", "s"):
        add(Scenario(f"limiter-cap64-lognormal-{ra}", f"{lim}::test_lognormal_latency_at_a_concurrency_cap",
                     [{"capacity": 64, **LOGN, "retry_after": ra}], [{"start": 0.0, "n": 5000}], quick=(ra == "ms")))
    add(Scenario("limiter-per-token", f"{lim}::test_per_token_latency_with_output_length_varying",
                 [{"capacity": 32, "latency": 0.002, "tokens_per_reply": "lognormal(4.8, 0.6)"}], [{"start": 0.0, "n": 5000}]))
    add(Scenario("limiter-queue64", f"{lim}::test_a_queueing_server_is_held_at_its_knee",
                 [{"mode": "queue", "capacity": 64, **LOGN}], [{"start": 0.0, "n": 5000}], quick=True))
    add(Scenario("limiter-bucket150-s", f"{lim}::test_a_token_bucket_with_whole_second_retry_after",
                 [{"rate": 150, **LOGN, "retry_after": "s"}], [{"start": 0.0, "n": 5000}], quick=True))
    add(Scenario("limiter-bucket150-headers", f"{lim}::test_rate_limit_headers_remove_the_start_up_burst_of_refusals",
                 [{"rate": 150, **LOGN, "retry_after": "s", "headers": True}], [{"start": 0.0, "n": 5000}]))
    add(Scenario("limiter-two-clients", f"{lim}::test_two_clients_share_one_endpoint_evenly_within_its_capacity",
                 [{"capacity": 64, **LOGN}], [{"start": 0.0, "n": 5000}, {"start": 0.0, "n": 5000}]))
    add(Scenario("limiter-random-503", f"{lim}::test_random_503s_do_not_collapse_the_limit",
                 [{"capacity": 64, **LOGN, "p_error": 0.05}], [{"start": 0.0, "n": 5000}]))
    add(Scenario("limiter-latecomer-metrics", f"{lim}::test_a_latecomer_on_a_queueing_server_gets_a_share_when_its_metrics_url_steers",
                 [{"mode": "queue", "capacity": 64, **LOGN}], [{"start": 0.0, "n": 40000, "metrics": True},
                                                              {"start": 20.0, "n": 40000, "metrics": True}], until=60.0, changes=[20.0]))
    add(Scenario("limiter-base-rebuilt", f"{lim}::test_a_base_measured_under_someone_elses_load_is_rebuilt_when_it_leaves",
                 [{"mode": "queue", "capacity": 64, **LOGN}], [{"start": 0.0, "n": 3000, "semaphore": 56}, {"start": 2.0, "n": 40000}],
                 until=60.0))
    tiers = "tests/contract/judge/test_tiers.py"
    prio = [{"priority": 0}, {"priority": 1}]
    add(Scenario("tiers-primary-has-room", f"{tiers}::test_a_lower_tier_with_room_takes_everything",
                 [{"capacity": 64, **LOGN, "seed": 1}, {"capacity": 64, "latency": 0.3, "seed": 2}],
                 [{"start": 0.0, "n": 3000, "endpoints": prio, "arrival_rate": 60}], until=600.0))
    for seed in (1, 2, 3):
        add(Scenario(f"tiers-fallback-seed{seed}", f"{tiers}::test_the_fallback_takes_only_the_overflow_of_a_saturated_primary",
                     [{"capacity": 32, **LOGN, "seed": seed}, {"capacity": 64, **LOGN, "seed": seed + 10}],
                     [{"start": 0.0, "n": 6000, "endpoints": prio}], until=600.0, quick=(seed == 1)))
    add(Scenario("tiers-queueing-primary", f"{tiers}::test_a_queueing_primary_runs_at_its_knee_and_the_rest_spills",
                 [{"mode": "queue", "capacity": 32, **LOGN, "seed": 4}, {"capacity": 64, **LOGN, "seed": 5}],
                 [{"start": 0.0, "n": 6000, "endpoints": prio, "metrics": True}], until=600.0))
    for how in ("connect", "429", "503"):
        add(Scenario(f"tiers-primary-down-{how}", f"{tiers}::test_traffic_moves_up_while_the_primary_is_down_and_returns_when_it_recovers",
                     [{"capacity": 64, **LOGN, "seed": 6, "outage": [5.0, 10.0], "outage_reply": how}, {"capacity": 64, **LOGN, "seed": 7}],
                     [{"start": 0.0, "n": 20000, "endpoints": prio, "arrival_rate": 150}], until=600.0, changes=[5.0, 10.0]))
    inflight = "tests/contract/judge/test_inflight.py"
    slow_path: dict = {"transit": [0.02, 0.02], "transit_jitter": 0.5}
    add(Scenario("inflight-batch64-slow-path", f"{inflight}::test_a_limit_equal_to_a_servers_batch_keeps_the_batch_full_when_the_way_to_the_server_takes_time",
                 [{"mode": "queue", "capacity": 64, "latency": 0.3, "seed": 3}], [{"start": 0.0, "n": 12000, "semaphore": 64, **slow_path}],
                 until=40.0, quick=True))
    add(Scenario("inflight-cap64-slow-path", f"{inflight}::test_a_limit_equal_to_a_servers_batch_keeps_the_batch_full_when_the_way_to_the_server_takes_time",
                 [{"capacity": 64, "latency": 0.3, "seed": 3}], [{"start": 0.0, "n": 12000, "semaphore": 64, **slow_path}], until=40.0))
    add(Scenario("inflight-tiers-slow-path", f"{inflight}::test_a_primary_of_capacity_32_with_room_at_its_server_keeps_its_tasks_from_the_fallback",
                 [{"capacity": 32, "latency": 0.3, "sigma": 0.3, "seed": 5}, {"capacity": 64, "latency": 0.3, "sigma": 0.3, "seed": 6}],
                 [{"start": 0.0, "n": 2400, "arrival_rate": 80, "endpoints": [{"priority": 0, "max_concurrency": 32}, {"priority": 1}],
                   "transit": [0.05, 0.05], "transit_jitter": 0.5}], until=600.0))
    outage = "tests/contract/judge/test_outage.py"
    replies: list[tuple[str, Optional[str]]] = [("429", "s"), ("429", None), ("503", "s"), ("503", None), ("connect", None), ("reset", None)]
    for reply, after in replies:
        add(Scenario(f"outage-2s-{reply}-{after or 'none'}", f"{outage}::test_a_two_second_outage_is_recovered_from_within_ten_seconds",
                     [{"capacity": 64, "latency": 0.5, "outage": [30.0, 32.0], "outage_reply": reply, "retry_after": after}],
                     [{"start": 0.0, "n": 6000}], changes=[30.0, 32.0], quick=(reply == "429" and after == "s")))
    add(Scenario("outage-cap-halves", f"{outage}::test_overload_at_a_concurrency_cap_is_not_taken_for_an_outage",
                 [{"capacity": 64, **LOGN, "capacity_steps": [[10.0, 32]]}], [{"start": 0.0, "n": 20000}], until=25.0, changes=[10.0]))
    add(Scenario("outage-refuses-for-good", f"{outage}::test_an_endpoint_refusing_everything_for_good_fails_what_waits_in_bounded_time",
                 [{"capacity": 64, "latency": 0.5, "outage": [0.0, 1e9], "outage_reply": "429", "retry_after": None}],
                 [{"start": 0.0, "n": 200, "dead_after_s": 3}], quick=True))
    peers = "tests/contract/judge/test_peers.py"
    kinds: dict[str, dict] = {
        "refuse": {"capacity": 64, **LOGN},
        "refuse-slowly": {"capacity": 64, **LOGN, "retry_after": "s", "refusal_latency": [0.05, 0.3], "load_slope": 0.2},
        "bucket": {"rate": 150, **LOGN, "retry_after": "s"},
        "queue": {"mode": "queue", "capacity": 64, **LOGN},
    }
    for kind, srv in kinds.items():
        for seed in (1, 2, 3):
            add(Scenario(f"peers-latecomer-{kind}-seed{seed}", f"{peers}::test_a_latecomer_gets_an_even_share_within_30_s",
                         [{**srv, "seed": seed}], [{"start": 0.0, "n": 60000}, {"start": 20.0, "n": 60000}], until=50.0, board=True,
                         changes=[20.0], quick=(seed == 1 and kind == "refuse")))
    add(Scenario("peers-latecomer-no-board", f"{peers}::test_without_the_board_the_latecomer_starves",
                 [{**kinds["refuse"], "seed": 1}], [{"start": 0.0, "n": 60000}, {"start": 20.0, "n": 60000}], until=50.0, changes=[20.0]))
    for kind in ("refuse", "bucket", "queue"):
        add(Scenario(f"peers-three-{kind}", f"{peers}::test_three_producers_split_in_thirds_and_the_rest_take_back_what_one_leaves",
                     [{**kinds[kind], "seed": 1}], [{"start": 0.0, "n": 60000}, {"start": 10.0, "n": 60000}, {"start": 20.0, "n": 1500}],
                     until=90.0, board=True, changes=[10.0, 20.0]))
        add(Scenario(f"peers-alone-{kind}", f"{peers}::test_a_producer_alone_runs_exactly_as_without_the_board",
                     [{**kinds[kind], "seed": 2}], [{"start": 0.0, "n": 6000}], board=True))
    prefix = "tests/contract/judge/test_prefix.py"
    for group in (8, 16):
        for routing in ("prefix", "round_robin", "capacity"):
            add(Scenario(f"fleet-{routing}-group{group}", f"{prefix}::test_prefix_affinity_beats_round_robin_and_free_capacity_on_grpo_groups",
                         [{"mode": "queue", "capacity": 16, **LOGN, "seed": 100 + i, "prefix": {"blocks": 20000, "prefill_s_per_token": 0.0002}}
                          for i in range(8)],
                         [{"start": 0.0, "n": 3000, "payload": f"grpo({group})", "metrics": True, "routing": routing}]))
    return out


SCENARIOS: dict[str, Scenario] = {s.name: s for s in _scenarios()}


def _server(kw: dict) -> Server:
    kw = dict(kw)
    if kw.get("tokens_per_reply") == "lognormal(4.8, 0.6)":  # test_limiter's per-token replies (about 150 tokens, 10x spread)
        kw["tokens_per_reply"] = lambda rng: max(1, int(rng.lognormvariate(4.8, 0.6)))
    if "prefix" in kw:  # a replica's prefix cache, as test_prefix builds it
        kw["prefix"] = PrefixCache(**kw["prefix"])
    for key in ("refusal_latency", "outage"):
        if key in kw:
            kw[key] = tuple(kw[key])
    if "outages" in kw:
        kw["outages"] = [tuple(x) for x in kw["outages"]]
    if "capacity_steps" in kw:
        kw["capacity_steps"] = [tuple(x) for x in kw["capacity_steps"]]
    return Server(**kw)


def _run(sc: Scenario) -> dict:
    """Run ``sc``; its samples and the facts its summary needs."""
    sim = Sim()
    servers = [_server(kw) for kw in sc.servers]
    board = MemoryBoard(clock=lambda: sim.t) if sc.board else None
    clients: list[Client] = []
    tenant: list[SemaphoreClient] = []
    def arrive(i: int, c: dict) -> Callable[[float], None]:
        kw = {k: v for k, v in c.items() if k not in ("start", "n")}
        if "payload" in kw:  # test_prefix's GRPO groups: "grpo(N)"
            from tests.contract.judge.test_prefix import grpo
            kw["payload"] = grpo(int(kw["payload"][5:-1]))
        return lambda t: clients.append(Client(sim, servers if len(servers) > 1 else servers[0], c["n"], name=f"c{i}-", board=board, **kw))

    for i, c in enumerate(sc.clients):
        sim.at(c["start"], arrive(i, c))
    if sc.tenant:
        tn = sc.tenant
        sim.at(tn["start"], lambda t: tenant.append(SemaphoreClient(sim, servers[0], tn["n"], tn["concurrency"], stop=tn["stop"])))
    samples: list[list] = []

    def sample(t: float) -> None:  # reads only: the run is the same without it
        samples.append([round(t, DIGITS), [[[round(e.limit.limit, DIGITS), e.in_flight] for e in c.gate.endpoints] for c in clients]])
        sim.at(t + SAMPLE_S, sample)

    sim.at(0.0, sample)
    end = 0.0
    while sim.events and sim.events[0][0] <= sc.until:
        t, _, fn = heapq.heappop(sim.events)
        sim.t = end = t
        fn(t)
        if len(clients) == len(sc.clients) and all(c.finished for c in clients):
            break
    return {"samples": samples, "end": end, "clients": clients, "servers": servers, "tenant": tenant}


def _allowed_per_s(sc: Scenario, servers: list[Server], t: float, service: list[float]) -> float:
    """Answers/s the servers allow the clients at ``t``: each server's capacity (less the tenant's 32 while it
    runs) over its mean service time, or its token bucket's rate, or its quota's; 0 during an outage; at most
    the rate at which tasks arrive, when every client is given one."""
    total = 0.0
    for srv, mean in zip(servers, service, strict=True):
        if any(a <= t < b for a, b in ([srv.outage] if srv.outage else []) + list(srv.outages)):
            continue
        if srv.rate is not None:
            total += srv.rate
            continue
        cap = srv.capacity_at(t) - (sc.tenant["concurrency"] if sc.tenant and sc.tenant["start"] <= t < sc.tenant["stop"] else 0)
        rate = cap / mean if mean else 0.0
        if srv.quota_per_min is not None:
            rate = min(rate, srv.quota_per_min / 60.0)
        total += rate
    if all(c.get("arrival_rate") for c in sc.clients):
        total = min(total, sum(c["arrival_rate"] for c in sc.clients if c["start"] <= t))
    return total


def summarise(sc: Scenario, run: dict) -> dict:
    """``mean_limit``: client 0's limit on endpoint 0, averaged over the samples; ``served_share``: the clients'
    answers / what the servers allowed from each client's start to the end; ``refused_share``: refusals /
    (answers + refusals); ``readapt_s``: per change, seconds until a 2 s window served >= 90% of what was
    allowed with <= 2% refused (None: never within the run)."""
    clients, servers, end = run["clients"], run["servers"], run["end"]
    service = [sum(s for _, s in srv.services) / len(srv.services) if srv.services else 0.0 for srv in servers]
    done = sorted(t for c in clients for t in c.done_at)
    refused = sorted(t for c in clients for t in c.refused_at)
    start = min(c["start"] for c in sc.clients)
    steps = [start + k * SAMPLE_S for k in range(int((end - start) / SAMPLE_S))]
    allowed = sum(_allowed_per_s(sc, servers, t, service) * SAMPLE_S for t in steps)
    limits = [s[1][0][0][0] for s in run["samples"] if s[1]]

    def readapt(at: float) -> Optional[float]:
        t = at
        while t + 2.0 <= end:
            n = sum(1 for x in done if t <= x < t + 2.0)
            r = sum(1 for x in refused if t <= x < t + 2.0)
            ok = sum(_allowed_per_s(sc, servers, t + k * SAMPLE_S, service) * SAMPLE_S for k in range(8))
            if ok > 0 and n >= 0.9 * ok and r <= 0.02 * max(1, n + r):
                return round(t - at, 2)
            t += SAMPLE_S
        return None

    return {"mean_limit": round(sum(limits) / len(limits), 2) if limits else None,
            "served_share": round(len(done) / allowed, 4) if allowed else None,
            "refused_share": round(len(refused) / max(1, len(done) + len(refused)), 4),
            "readapt_s": [readapt(at) for at in [start, *sc.changes]], "failed": sum(len(c.failed) for c in clients),
            "end_s": round(end, 3)}


def trace(sc: Scenario) -> dict:
    """The golden trace of ``sc`` as stored: scenario, summary, and samples downsampled to ``SAMPLE_S``."""
    run = _run(sc)
    return {"scenario": sc.name, "source": sc.source, "servers": sc.servers, "clients": sc.clients, "tenant": sc.tenant,
            "board": sc.board, "until": sc.until, "changes": sc.changes, "sample_s": SAMPLE_S,
            "columns": "[t, [per client: [per endpoint: [limit, in_flight]]]]",
            "summary": summarise(sc, run), "samples": run["samples"]}


def _dumps(doc: dict) -> str:
    head = {k: v for k, v in doc.items() if k != "samples"}
    text = json.dumps(head, indent=1, sort_keys=True)[:-2]
    rows = ",\n".join(json.dumps(s, separators=(",", ":")) for s in doc["samples"])
    return f'{text},\n "samples": [\n{rows}\n ]\n}}\n'


def record(names: list[str], where: Path = GOLDEN) -> None:
    where.mkdir(parents=True, exist_ok=True)
    for name in names:
        (where / f"{name}.json").write_text(_dumps(trace(SCENARIOS[name])))


def load(name: str, where: Path = GOLDEN) -> Optional[dict]:
    path = where / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def phase_limits(doc: dict) -> list[Optional[float]]:
    """Client 0's mean limit on endpoint 0 in each phase (from the start to the first change, between changes, after the last)."""
    bounds = [0.0, *doc["changes"], math.inf]
    out: list[Optional[float]] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        xs = [s[1][0][0][0] for s in doc["samples"] if s[1] and a <= s[0] < b]
        out.append(round(sum(xs) / len(xs), 1) if xs else None)
    return out


def _fmt(x: object) -> str:
    if x is None:
        return "-"
    if isinstance(x, list):
        return "/".join("never" if v is None else f"{v:g}" for v in x)
    return f"{x:.1%}" if isinstance(x, float) and x <= 2 else f"{x}"


def compare(names: list[str], after: Optional[Path] = None) -> str:
    """A table: per scenario, the stored summary and today's (or the traces under ``after``), and whether the samples are the same."""
    headers = ["scenario", "mean limit", "limit by phase", "served / allowed", "refused", "re-adapt s (start/changes)", "samples"]
    rows = []
    for name in names:
        before = load(name)
        now = load(name, after) if after is not None else trace(SCENARIOS[name])
        if now is None:
            rows.append([name, "-", "-", "-", "-", "-", f"no trace under {after}"])
            continue
        b, a = (before or {}).get("summary", {}), now["summary"]
        pair = lambda k, b=b, a=a: f"{_fmt(b.get(k))} -> {_fmt(a.get(k))}" if b.get(k) != a.get(k) else _fmt(a.get(k))  # noqa: E731
        same = "new" if before is None else "same" if before["samples"] == now["samples"] else "CHANGED"
        lb, la = (phase_limits(before) if before else None), phase_limits(now)
        by_phase = _fmt(la) if lb == la else f"{_fmt(lb)} -> {_fmt(la)}"
        rows.append([name, pair("mean_limit"), by_phase, pair("served_share"), pair("refused_share"), pair("readapt_s"), same])
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in [headers, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("record", "compare", "list"))
    ap.add_argument("names", nargs="*", help="scenarios (default: all)")
    ap.add_argument("--dir", type=Path, default=GOLDEN, help="record: where to write the traces (default: the goldens)")
    ap.add_argument("--after", type=Path, default=None, help="compare: read the after traces from this directory instead of re-running")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in SCENARIOS]
    if unknown:
        print(f"goldens: no scenario named {', '.join(unknown)} (see: python -m tests.contract.judge.goldens list)", file=sys.stderr)
        return 2
    names = args.names or list(SCENARIOS)
    if args.command == "list":
        print("\n".join(f"{n}{'  (quick)' if SCENARIOS[n].quick else ''}  {SCENARIOS[n].source}" for n in names))
    elif args.command == "record":
        record(names, args.dir)
        print(f"recorded {len(names)} traces under {args.dir}")
    else:
        print(compare(names, args.after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
