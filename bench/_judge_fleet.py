"""Judge benchmark scenarios for tiers and replica fleets (run from ``bench/judge.py``: TIER, FLEET).

TIER   a primary (capacity 32, lognormal 0.3 s: 107 req/s) at priority 0 and a fallback
       (capacity 64: 213 req/s) at priority 1: the share each served, with every task
       submitted at once, and with tasks arriving at 80/s (75% of the primary's ceiling)
FLEET  8 queueing replicas of one model (batch 8, decode lognormal 0.3 s, a prefix cache:
       0.2 ms of prefill per prompt token that missed), GRPO-shaped traffic (groups of 8
       and 16 responses to one 3,000-token judge prompt): prefix-affinity routing (with and
       without the replicas' metrics URLs) against free-capacity routing, round-robin, and two
       hand-set aiohttp clients given the batch (64 slots round-robin; each whole group to one
       replica, 8 slots each); throughput, prefix-cache hit rate, time queued and at the replica

``python bench/_judge_fleet.py trace [GROUP] [SEED]`` traces one FLEET run of prefix routing (no metrics URL): every
0.5 s, per replica, what the gate holds in flight against its limit and what the replica serves and queues.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from typing import Callable, Optional

from _common import Server, free_port, post_with_backoff, table

from qworker import Producer

LOGNORMAL = ("--latency", "0.3", "--latency-dist", "lognormal", "--sigma", "0.6")
FILL = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "


def grpo_payloads(n: int, group: int, tag: str, prompt_chars: int = 12000, response_chars: int = 1200) -> list[dict]:
    """Task i: response i % group to prompt i // group (a GRPO group shares the judge prompt up to the response)."""
    filler = FILL * (prompt_chars // len(FILL) + 1)
    rfill = FILL * (response_chars // len(FILL) + 1)
    return [{"prompt": f"Question {tag}-{i // group}: " + filler[:prompt_chars],
             "response": f"answer {i // group}.{i % group} " + rfill[:response_chars], "ground_truth": "42"} for i in range(n)]


def run(servers: list[Server], payloads: list[dict], eps_extra: list[dict], judge_extra: dict, workers: int = 4,
        pace: Optional[Callable[[int], float]] = None, sample_s: Optional[float] = None) -> dict:
    """One producer scoring ``payloads`` on ``servers``; ``pace(i)``: when (s after the start) task i is submitted (None: all at once).
    ``sample_s``: every so many seconds, a sample in ``samples``: (s after the start, per endpoint (in flight at the gate,
    its limit, being served at the server, queued at the server))."""
    eps = [{"url": s.url, **x} for s, x in zip(servers, eps_extra, strict=True)]
    cfg = {"rewards": {"llm_judge": {"model": "judge", "endpoints": eps, "timeout_s": 60, "ceiling": 512, **judge_extra}}}
    samples: list[tuple[float, list[tuple[int, float, int, int]]]] = []
    with Producer(local_workers=workers, config=cfg) as p:
        p.wait_for_workers(workers, timeout=60)
        t0 = time.monotonic()
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(max(0.0, t0 + sample_s * (len(samples) + 1) - time.monotonic())):  # type: ignore[operator]
                judges = p.status()["judges"]
                rows = judges[0]["endpoints"] if judges else []
                at = [s.stats() for s in servers]
                samples.append((time.monotonic() - t0, [(r["in_flight"], r["limit"], a["in_flight"], a["waiting"])
                                                        for r, a in zip(rows, at, strict=False)]))

        sampler = threading.Thread(target=sample, daemon=True)
        if sample_s:
            sampler.start()
        if pace is None:
            futures = p.submit_batch("llm_judge", payloads)
        else:
            futures = []
            for i in range(0, len(payloads), 8):
                time.sleep(max(0.0, t0 + pace(i) - time.monotonic()))
                futures.extend(p.submit_batch("llm_judge", payloads[i:i + 8]))
        results = p.gather(futures, timeout=900)
        elapsed = time.monotonic() - t0
        stop.set()
        if sample_s:
            sampler.join(timeout=10)
    failed = [r for r in results if not r.ok]
    stats = [s.stats() for s in servers]
    return {"elapsed_s": elapsed, "completed": len(results) - len(failed), "failed": len(failed), "stats": stats,
            "first_error": failed[0].error if failed else None, "samples": samples}


def tiers(n: int, runs: int) -> list[list[object]]:
    rows = []
    for mode in ("all at once", "80/s arriving"):
        got = []
        for seed in range(1, runs + 1):
            servers = [Server(free_port(), *LOGNORMAL, "--capacity", "32", seed=seed),
                       Server(free_port(), *LOGNORMAL, "--capacity", "64", seed=seed + 100)]
            try:
                out = run(servers, [{"prompt": f"Q tier{seed}-{i}", "response": f"a {i}", "ground_truth": "y"} for i in range(n)],
                          [{"priority": 0}, {"priority": 1}], {}, pace=None if mode == "all at once" else (lambda i: i / 80.0))
            finally:
                for s in servers:
                    s.stop()
            served = [s["served"] for s in out["stats"]]
            requests = sum(s["requests"] for s in out["stats"])
            got.append({"rate": out["completed"] / out["elapsed_s"], "primary": served[0] / max(1, sum(served)),
                        "r429": sum(s["status_429"] for s in out["stats"]) / max(1, requests), "failed": out["failed"]})
            print(f"  TIER ({mode}), seed {seed}: {got[-1]['rate']:.0f} req/s, primary served {got[-1]['primary']:.1%}, "
                  f"fallback {1 - got[-1]['primary']:.1%}, 429s {got[-1]['r429']:.2%}, failed {out['failed']}", flush=True)
        med = lambda k, got=got: statistics.median(g[k] for g in got)  # noqa: E731
        rows.append([f"TIER: {mode}", len(got), f"{med('rate'):.0f}", f"{med('primary'):.1%}", f"{1 - med('primary'):.1%}",
                     f"{med('r429'):.2%}", max(g["failed"] for g in got)])
    print("\nTIER: primary capacity 32 (107 req/s) at priority 0, fallback capacity 64 (213 req/s) at priority 1; medians")
    print(table(["run", "runs", "req/s", "primary served", "fallback served", "429s / requests", "failed"], rows))
    return rows


FLEET_ARGS = (*LOGNORMAL, "--capacity", "8", "--queue", "--prefix-blocks", "20000", "--prefill-per-token", "0.0002")
# (row, how): qworker with a routing and with or without each replica's metrics URL, or a hand-set aiohttp client
SYSTEMS = (("prefix", ("qworker", "prefix", False)), ("prefix + metrics_url", ("qworker", "prefix", True)),
           ("capacity (default)", ("qworker", "capacity", False)), ("round_robin", ("qworker", "round_robin", False)),
           ("aiohttp 64 slots, round-robin", ("aiohttp", "round_robin", False)),
           ("aiohttp whole-group affinity", ("aiohttp", "group", False)))


async def _hand_set(urls: list[str], payloads: list[dict], group: int, how: str, slots: int) -> int:
    """A hand-set client over the replicas: ``round_robin``: ``slots`` in flight, request i to replica i mod R;
    ``group``: ``slots // R`` in flight per replica (its batch), group g (tasks g*group ...) to replica g mod R.
    The prompt is the one qworker sends (the default template).  Returns the failed count."""
    import asyncio

    import aiohttp

    from qworker.judge.prompt import DEFAULT_TEMPLATE, render

    per = max(1, slots // len(urls))
    sems = [asyncio.Semaphore(slots)] * len(urls) if how == "round_robin" else [asyncio.Semaphore(per) for _ in urls]
    failed = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=slots)) as session:
        async def one(i: int, body: dict) -> None:
            nonlocal failed
            r = i % len(urls) if how == "round_robin" else (i // group) % len(urls)
            if not await post_with_backoff(session, sems[r], urls[r], body, timeout_s=120):
                failed += 1

        await asyncio.gather(*(one(i, {"model": "judge", "max_tokens": 16, "messages": [
            {"role": "user", "content": render(DEFAULT_TEMPLATE, pl, "")}]}) for i, pl in enumerate(payloads)))
    return failed


def run_hand_set(servers: list[Server], payloads: list[dict], group: int, how: str, slots: int = 64) -> dict:
    import asyncio

    t0 = time.monotonic()
    failed = asyncio.run(_hand_set([s.url for s in servers], payloads, group, how, slots))
    return {"elapsed_s": time.monotonic() - t0, "completed": len(payloads) - failed, "failed": failed,
            "stats": [s.stats() for s in servers]}


def fleet(n: int, runs: int, replicas: int = 8, groups: tuple[int, ...] = (8, 16), only: tuple[str, ...] = ()) -> None:
    """``only``: these rows of ``SYSTEMS`` (default: all)."""
    systems = [(name, how) for name, how in SYSTEMS if not only or name in only]
    rows, ratios = [], []
    for group in groups:
        got: dict[str, list[dict]] = {name: [] for name, _ in systems}
        for seed in range(1, runs + 1):
            for name, (client, routing, metrics) in systems:  # paired: the same seeds for every system
                servers = [Server(free_port(), *FLEET_ARGS, seed=100 * seed + i) for i in range(replicas)]
                payloads = grpo_payloads(n, group, f"g{group}s{seed}")
                try:
                    if client == "aiohttp":
                        out = run_hand_set(servers, payloads, group, routing)
                    else:
                        eps = [{"metrics_url": f"http://127.0.0.1:{s.port}/metrics"} if metrics else {} for s in servers]
                        out = run(servers, payloads, eps, {"routing": routing})
                finally:
                    for s in servers:
                        s.stop()
                st = out["stats"]
                served = max(1, sum(s["served"] for s in st))
                r = {"rate": out["completed"] / out["elapsed_s"], "failed": out["failed"],
                     "hit": sum(s["hit_tokens"] for s in st) / max(1, sum(s["prompt_tokens"] for s in st)),
                     "queued_s": sum(s["mean_queued_s"] * s["served"] for s in st) / served,
                     "judge_s": sum((s["mean_queued_s"] + s["mean_service_s"]) * s["served"] for s in st) / served}
                got[name].append(r)
                print(f"  FLEET groups of {group}, seed {seed}, {name}: {r['rate']:.0f} req/s, hit rate {r['hit']:.1%}, "
                      f"at the replica {r['judge_s']:.3f} s/request ({r['queued_s']:.3f} queued), failed {r['failed']}", flush=True)
        for name, _ in systems:
            med = lambda k, rr=got[name]: statistics.median(g[k] for g in rr)  # noqa: E731
            rows.append([f"FLEET g{group}: {name}", len(got[name]), f"{med('rate'):.0f}", f"{med('hit'):.1%}",
                         f"{med('queued_s'):.3f}", f"{med('judge_s'):.3f}", max(g["failed"] for g in got[name])])
        for name, _ in systems[1:] if systems and systems[0][0] == "prefix" else []:
            paired = [a["rate"] / b["rate"] for a, b in zip(got["prefix"], got[name], strict=True)]
            lat = [a["judge_s"] / b["judge_s"] for a, b in zip(got["prefix"], got[name], strict=True)]
            ratios.append([f"FLEET g{group}: prefix / {name}", f"{statistics.median(paired):.2f}x",
                           ", ".join(f"{x:.2f}" for x in paired), f"{statistics.median(lat):.2f}x"])
    print(f"\nFLEET: {replicas} queueing replicas (batch 8, decode lognormal mean 0.3 s, prefix cache, 0.2 ms prefill per missed "
          f"prompt token: a 3,000-token prompt missed costs 0.6 s, twice the mean decode), {n} tasks at once, GRPO groups, "
          f"3,000-token judge prompt + 300-token response; qworker without a capacity hint (metrics URL only where named), "
          f"the aiohttp clients given the batch (8 per replica, 64 in all); at the replica: queued + served, mean; "
          f"medians of {runs} with paired seeds")
    print(table(["run", "runs", "req/s", "prefix hit rate", "queued s/req", "at the replica s/req", "failed"], rows))
    if ratios:
        print(table(["prefix routing (no metrics URL) against", "throughput (median)", "per seed", "at the replica (median)"], ratios))


def trace(group: int = 16, seed: int = 1, n: int = 1000, replicas: int = 8, every_s: float = 0.5) -> None:
    """One FLEET run of prefix routing without metrics URLs (the ``prefix`` row's seed ``seed``), sampled every ``every_s``:
    per replica, gate in flight / its limit / served at the replica + queued there; then each replica's answers."""
    servers = [Server(free_port(), *FLEET_ARGS, seed=100 * seed + i) for i in range(replicas)]
    try:
        out = run(servers, grpo_payloads(n, group, f"g{group}s{seed}"), [{} for _ in servers], {"routing": "prefix"}, sample_s=every_s)
    finally:
        for s in servers:
            s.stop()
    print(f"FLEET trace, groups of {group}, seed {seed}, prefix routing without metrics URLs: {out['completed'] / out['elapsed_s']:.0f} req/s; "
          f"per replica: in flight at the gate / its limit / served at the replica + queued there (the batch is 8)")
    print(table(["s", *(f"replica {i}" for i in range(replicas))],
                [[f"{t:.1f}", *(f"{g} / {lim:.0f} / {b}+{w}" for g, lim, b, w in row)] for t, row in out["samples"]]))
    print("answers per replica: " + ", ".join(str(s["served"]) for s in out["stats"]))


if __name__ == "__main__" and sys.argv[1:2] == ["trace"]:
    trace(*(int(a) for a in sys.argv[2:4]))
