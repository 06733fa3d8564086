"""Judge benchmark scenarios for a capacity that changes (run from ``bench/judge.py``: STEP, TENANT).

STEP    capacity 64 -> 16 (at 10 s) -> 64 (at 20 s), lognormal 0.3 s, 429 with ``retry-after-ms``
TENANT  capacity 64; a second tenant (a semaphore(32) aiohttp client) runs from 10 s to 20 s

qworker (4 workers, no hint) beside the aiohttp client with a semaphore set to the initial
capacity (64).  Per phase: the client's answers/s from 3 s after the change to the next one,
against what the server allows (capacity / 0.3 s; for TENANT, 64 less the tenant's mean in
flight); the client's 429 share over the run; and when it first served >= 90% of what is
allowed over a 2 s window (seconds after the change).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
import urllib.request

from _common import Server, free_port, table

from qworker import Producer

LOGNORMAL = ("--latency", "0.3", "--latency-dist", "lognormal", "--sigma", "0.6")
PHASE_S = 10.0


def _admin(server: Server, capacity: int) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/admin/capacity", json.dumps({"capacity": capacity}).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        r.read()


async def _semaphore_client(url: str, n: int, concurrency: int, done_at: list, refused: list, stop: float = float("inf")) -> None:
    """``concurrency`` in flight; a 429 is retried after 0.1 s doubling (the bench's aiohttp client), until ``stop`` (monotonic)."""
    import aiohttp

    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def one(i: int) -> None:
            body = {"model": "judge", "messages": [{"role": "user", "content": f"Q {i} {id(done_at)}"}], "max_tokens": 16}
            for attempt in range(30):
                if time.monotonic() >= stop:
                    return
                try:
                    async with sem:
                        if time.monotonic() >= stop:
                            return
                        async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=60)) as resp:
                            await resp.read()
                            if resp.status == 200:
                                done_at.append(time.monotonic())
                                return
                            refused.append(time.monotonic())
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    pass
                await asyncio.sleep(min(2.0, 0.1 * 2**attempt))

        await asyncio.gather(*(one(i) for i in range(n)))


def _qworker(server: Server, n: int, done_at: list) -> dict:
    cfg = {"rewards": {"llm_judge": {"model": "judge", "endpoints": [{"url": server.url}], "timeout_s": 60, "ceiling": 512}}}
    with Producer(local_workers=4, config=cfg) as p:
        p.wait_for_workers(4, timeout=60)
        futures = p.submit_batch("llm_judge", [{"prompt": f"Q {i}", "response": "a", "ground_truth": "y"} for i in range(n)])
        for f in futures:
            f.add_done_callback(lambda _f: done_at.append(time.monotonic()))
        results = p.gather(futures, timeout=900)
    failed = [r.error for r in results if not r.ok]
    if failed:
        print(f"    {len(failed)} failed; first: {failed[0]}")
    return {"failed": len(failed)}


def one_run(scenario: str, system: str, seed: int, n: int) -> dict:
    server = Server(free_port(), *LOGNORMAL, "--capacity", "64", seed=seed)
    done_at: list[float] = []
    refused: list[float] = []
    tenant_done: list[float] = []
    tenant_refused: list[float] = []
    out: dict = {}
    t0 = time.monotonic()

    def drive() -> None:
        time.sleep(PHASE_S)
        if scenario == "STEP":
            _admin(server, 16)
            time.sleep(PHASE_S)
            _admin(server, 64)
        else:
            start = time.monotonic()
            asyncio.run(_semaphore_client(server.url, 4000, 32, tenant_done, tenant_refused, stop=start + PHASE_S))

    driver = threading.Thread(target=drive)
    try:
        driver.start()
        if system == "qworker":
            out = _qworker(server, n, done_at)
        else:
            asyncio.run(_semaphore_client(server.url, n, 64, done_at, refused))
        driver.join()
        st = server.stats()
    finally:
        server.stop()
    r429 = st["status_429"] - len(tenant_refused)  # the client's own
    ends = [0.0, PHASE_S, 2 * PHASE_S, 3 * PHASE_S]
    phases = []
    for k, (a, b) in enumerate(zip(ends, ends[1:], strict=False)):
        if scenario == "STEP":
            cap = 16.0 if k == 1 else 64.0
        else:  # what the tenant leaves: 64 less what it held (Little's law: its answers/s x 0.3 s)
            cap = 64.0 - 0.3 * sum(1 for t in tenant_done if a + 3 <= t - t0 < b) / (b - a - 3)
        ceiling = cap / 0.3
        got = sum(1 for t in done_at if a + 3 <= t - t0 < b) / (b - a - 3)
        adapt, x = None, a
        while x + 2 <= b:
            if sum(1 for t in done_at if x <= t - t0 < x + 2) / 2 >= 0.9 * ceiling:
                adapt = x - a
                break
            x += 0.25
        phases.append({"share": got / ceiling, "adapt": adapt})
    answers = sum(1 for t in done_at if t - t0 < 3 * PHASE_S)
    return {"phases": phases, "r429": r429 / max(1, r429 + len(done_at)), "answers": answers, "failed": out.get("failed", 0),
            "server_429": st["status_429"]}


def changes(n: int, runs: int, scenarios: list[str]) -> None:
    rows = []
    for scenario in scenarios:
        for system in ("qworker", "aiohttp"):
            got = []
            for seed in range(1, runs + 1):
                r = one_run(scenario, system, seed, n)
                got.append(r)
                print(f"  {scenario} {system} seed {seed}: " + "; ".join(
                    f"phase {k}: {p['share']:.0%} of allowed, adapted {p['adapt']}" for k, p in enumerate(r["phases"]))
                    + f"; 429s {r['r429']:.2%}, failed {r['failed']}", flush=True)
            med = lambda f, got=got: statistics.median(f(g) for g in got)  # noqa: E731
            adapt = [max((p["adapt"] if p["adapt"] is not None else float("inf")) for p in g["phases"][1:]) for g in got]
            rows.append([f"{scenario}: {'qworker (4 workers, no hint)' if system == 'qworker' else 'aiohttp + semaphore(64)'}", len(got),
                         *(f"{med(lambda g, k=k: g['phases'][k]['share']):.0%}" for k in range(3)),
                         f"{statistics.median(adapt):.2f}" if statistics.median(adapt) < float("inf") else "never",
                         f"{med(lambda g: g['r429']):.2%}", max(g["failed"] for g in got)])
    print("\nSTEP: capacity 64 -> 16 -> 64 (10 s each); TENANT: capacity 64, a semaphore(32) tenant from 10 to 20 s; "
          "share of what the server allows from 3 s after each change; medians of runs (paired seeds)")
    print(table(["run", "runs", "phase 1", "phase 2", "phase 3", "slowest re-adapt s", "429s / requests", "failed"], rows))
