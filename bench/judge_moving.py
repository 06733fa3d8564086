"""Judge benchmark on a second server model: capacity that moves, on ``tests/contract/judge/judgeserver.py``.

The server is not the project's mock judge nor its simulator: an asyncio HTTP server whose
capacity follows a wall-clock schedule (from its first request), that refuses with 429 after
50-300 ms with a whole-second ``Retry-After``, and answers in lognormal time (mean 0.3 s, sigma 0.6)
that grows 20% at full load.  Its own ledger says what it allowed in each phase: (capacity x
seconds - a tenant's slot-seconds) / the mean service time of what it served then.

  STEP    capacity 64 -> 16 -> 64 (a phase each)
  TENANT  capacity 64; a second tenant keeps 32 requests of its own from the end of phase 1 to the
          end of phase 2, taking each freed slot first, then leaves

  FILL    capacity 64 for the whole run, flat latency (0.3 s, no load slope): with a limit equal to
          the cap (``max_concurrency: 64``), how many requests does the server hold at once?
          ``FILL`` refuses past the cap; ``FILLQ`` queues past it (vLLM's --max-num-seqs batch).
          Reported from the server's ledger: the clients' mean requests in service (after 2 s).

In each run two such servers (same schedule, same seed) serve at once: one qworker Producer
(local workers, ``llm_judge`` pointed at its server, no capacity hint) and one aiohttp client with a
semaphore(64) and exponential backoff (0.1 s doubling to 2 s).  Per phase: what each was served as
a share of what its server allowed; 429s / requests over the schedule; re-adapt: seconds after each
change until a 2 s window was served >= 90% of that phase's allowed rate with <= 2% refused.
Medians over runs; run k of each scenario uses seed k for both systems.

    python bench/judge_moving.py              # 10 s phases, 3 runs
    python bench/judge_moving.py --runs 1     # under 2 minutes
    python bench/judge_moving.py --quick      # 5 s phases, 1 run
    python bench/judge_moving.py --only STEP --seed 2 --seed 5   # those seeds alone
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import table  # noqa: E402
from _judge_changes import _semaphore_client  # noqa: E402

from qworker import Producer  # noqa: E402

SERVER = Path(__file__).resolve().parent.parent / "tests" / "contract" / "judge" / "judgeserver.py"
CAPACITY, LATENCY = 64, 0.3


class JudgeProcess:
    """``judgeserver.py`` in a process of its own on a free port of 127.0.0.1, bounded to ``duration`` seconds."""

    def __init__(self, *args: str, duration: float) -> None:
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", "--duration", str(duration), *args],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"judgeserver did not start: {line!r}")
        self.base = line.split()[-1]
        self.url = f"{self.base}/v1/chat/completions"

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.base + path, timeout=10) as r:
            return json.load(r)

    def wait_past(self, seconds: float, bound: float) -> None:
        """Return once the server's schedule clock passed ``seconds``; raise after ``bound`` seconds of waiting."""
        deadline = time.monotonic() + bound
        while True:
            h = self.get("/health")
            if h["started"] and h["now_s"] >= seconds:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the judge server's clock did not pass {seconds} s within {bound} s (at {h['now_s']:.1f} s)")
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()


FILLS = ("FILL", "FILLQ")


def schedule_args(scenario: str, phase_s: float) -> list[str]:
    if scenario in FILLS:
        return ["--capacity", str(CAPACITY), "--horizon", str(3 * phase_s), "--latency", str(LATENCY), "--sigma", "0",
                "--load-slope", "0", "--refusal-latency", "0.05:0.3", "--retry-after", "s",
                "--mode", "queue" if scenario == "FILLQ" else "reject"]
    args = ["--capacity", str(CAPACITY), "--horizon", str(3 * phase_s), "--latency", str(LATENCY), "--sigma", "0.6",
            "--load-slope", "0.2", "--refusal-latency", "0.05:0.3", "--retry-after", "s"]
    if scenario == "STEP":
        return [*args, "--step", f"{phase_s}:16", "--step", f"{2 * phase_s}:{CAPACITY}"]
    return [*args, "--tenant", f"{phase_s}:{2 * phase_s}:0.5"]


def sample_limit(p: Producer, server: JudgeProcess, horizon: float, rows: list) -> None:
    """Every 0.1 s until the schedule's horizon: (server seconds, limit, in flight, at the server, mode, refusal level,
    highest capacity seen, latency base, 429s, cooling, transit share), read from the producer's gate without locking (a trace, not a measure)."""
    offset: Optional[float] = None
    give_up = time.monotonic() + 120.0  # the schedule starts at the first request: none in 2 minutes is a broken run
    while True:
        if offset is None:
            h = server.get("/health")
            if h["started"]:
                offset = time.monotonic() - h["now_s"]
            elif time.monotonic() > give_up:
                raise RuntimeError("trace: the judge server's schedule never started (qworker sent no request in 120 s)")
            else:
                time.sleep(0.05)
                continue
        t = time.monotonic() - offset
        if t > horizon:
            return
        for g in p._dispatcher.scheduler.policies:  # (read only, racing the dispatcher: a trace)
            for e in getattr(g, "endpoints", []):
                lim = e.limit
                rows.append((round(t, 2), round(lim.limit, 1), e.in_flight, e.at_server(), lim.mode.value,
                             round(min(lim.memory.refusal_level, 9999), 1), round(lim.memory.high, 1), round(lim.base() or 0.0, 4),
                             e.health.counts["status_429"], e.cool_reason if e.cool_until > 0 else "", round(e.transit.share, 3)))
        time.sleep(0.1)


def run_qworker(server: JudgeProcess, n: int, horizon: float, workers: int, out: dict, cap: Optional[int] = None) -> None:
    """``cap``: the endpoint's ``max_concurrency`` (a limit equal to the server's cap), None: no hint.
    With ``QWORKER_BENCH_TRACE`` set, ``out["trace"]`` gets the limiter's samples (``sample_limit``)."""
    endpoint: dict = {"url": server.url, **({"max_concurrency": cap} if cap else {})}
    cfg = {"rewards": {"llm_judge": {"model": "judge", "endpoints": [endpoint], "timeout_s": 60, "ceiling": 512}}}
    tag = uuid.uuid4().hex[:8]  # fresh payloads: nothing answered from a cache
    with Producer(local_workers=workers, config=cfg) as p:
        p.wait_for_workers(workers, timeout=120)
        futures = p.submit_batch("llm_judge", [{"prompt": f"Q {tag} {i}", "response": "a", "ground_truth": "y"} for i in range(n)])
        if os.environ.get("QWORKER_BENCH_TRACE"):
            out["trace"] = []
            sample_limit(p, server, horizon, out["trace"])
        server.wait_past(horizon, horizon + 120)
        done = [f.result() for f in futures if f.done()]
        out["failed"] = sum(1 for r in done if not r.ok)
        out["first_error"] = next((r.error for r in done if not r.ok), None)


def run_aiohttp(server: JudgeProcess, n: int, horizon: float, out: dict) -> None:
    done_at: list[float] = []
    refused: list[float] = []
    asyncio.run(_semaphore_client(server.url, n, CAPACITY, done_at, refused, stop=time.monotonic() + horizon + 0.5))
    out["failed"] = 0


def readapt(ledger: dict, change: float, end: float, rate: float) -> Optional[float]:
    """Seconds after ``change`` until a 2 s window of bins before ``end`` was served >= 90% of ``rate``/s with <= 2% refused."""
    bins = {round(t / ledger["bin_s"]): (s, r) for t, s, r in ledger["bins"]}
    k, width = round(change / ledger["bin_s"]), round(2.0 / ledger["bin_s"])
    while (k + width) * ledger["bin_s"] <= end + 1e-9:
        served = sum(bins.get(j, (0, 0))[0] for j in range(k, k + width))
        refused = sum(bins.get(j, (0, 0))[1] for j in range(k, k + width))
        if served >= 0.9 * rate * 2.0 and refused <= 0.02 * max(1, served + refused):
            return k * ledger["bin_s"] - change
        k += 1
    return None


def summary(ledger: dict) -> dict:
    phases = ledger["phases"]
    served = sum(p["served"] for p in phases)
    refused = sum(p["refused"] for p in phases)
    held = [x[1] for x in ledger["in_flight"] if x[0] >= 2.0]  # the clients' requests in service, sampled every 0.1 s
    return {"shares": [p["served_share"] or 0.0 for p in phases], "held": statistics.mean(held) if held else 0.0,
            "r429": refused / max(1, served + refused),
            "readapt": [readapt(ledger, p["start"], p["end"], (p["allowed"] or 0.0) / (p["end"] - p["start"])) for p in phases[1:]],
            "tenant": [p["tenant_mean_slots"] for p in phases]}


def one_run(scenario: str, seed: int, phase_s: float, workers: int) -> dict:
    horizon = 3 * phase_s
    n = int(CAPACITY / LATENCY * horizon * 1.3)
    args = [*schedule_args(scenario, phase_s), "--seed", str(seed)]
    servers = {name: JudgeProcess(*args, duration=horizon + 300) for name in ("qworker", "aiohttp")}
    outs: dict[str, dict] = {"qworker": {}, "aiohttp": {}}
    try:
        cap = CAPACITY if scenario in FILLS else None
        threads = [threading.Thread(target=run_qworker, args=(servers["qworker"], n, horizon, workers, outs["qworker"], cap)),
                   threading.Thread(target=run_aiohttp, args=(servers["aiohttp"], n, horizon, outs["aiohttp"]))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        res = {name: {**summary(s.get("/ledger")), **outs[name]} for name, s in servers.items()}
        trace = os.environ.get("QWORKER_BENCH_TRACE")
        if trace:
            ledger = servers["qworker"].get("/ledger")
            with open(f"{trace}-{scenario}-{seed}.json", "w") as f:
                json.dump({"limit": outs["qworker"].get("trace", []), "server": ledger["in_flight"], "bins": ledger["bins"]}, f)
        return res
    finally:
        for s in servers.values():
            s.stop()


def fmt_s(x: Optional[float]) -> str:
    return "never" if x is None else f"{x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs of each scenario (medians are reported); run k uses seed k")
    ap.add_argument("--phase-s", type=float, default=10.0, help="seconds per phase")
    ap.add_argument("--workers", type=int, default=4, help="qworker's local workers")
    ap.add_argument("--quick", action="store_true", help="5 s phases, 1 run")
    ap.add_argument("--only", choices=("STEP", "TENANT", *FILLS), action="append", default=[])
    ap.add_argument("--seed", type=int, action="append", default=[], help="run these seeds (repeatable) instead of 1..runs")
    args = ap.parse_args()
    runs, phase_s = (1, 5.0) if args.quick else (args.runs, args.phase_s)
    seeds = args.seed or list(range(1, runs + 1))
    runs = len(seeds)
    if runs < 1 or not 1.0 <= phase_s <= 60.0:
        ap.error(f"--runs must be >= 1 and --phase-s in [1, 60] (got {runs}, {phase_s})")
    print(f"judge benchmark on judgeserver.py: {phase_s:g} s phases, {runs} run(s), {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}", flush=True)
    rows, fills = [], []
    for scenario in args.only or ["STEP", "TENANT", *FILLS]:
        got: dict[str, list[dict]] = {"qworker": [], "aiohttp": []}
        for seed in seeds:
            t0 = time.monotonic()
            r = one_run(scenario, seed, phase_s, args.workers)
            for name, x in r.items():
                got[name].append(x)
                print(f"  {scenario} seed {seed} {name}: " + ", ".join(f"phase {k + 1} {s:.0%}" for k, s in enumerate(x["shares"]))
                      + f" of allowed; held {x['held']:.1f} of {CAPACITY} at once; 429s {x['r429']:.2%}; re-adapt {' / '.join(fmt_s(a) for a in x['readapt'])} s; failed {x['failed']}"
                      + (f" (first: {x['first_error']})" if x.get("first_error") else ""), flush=True)
            print(f"    ({time.monotonic() - t0:.0f} s wall; tenant's mean slots by phase: "
                  f"{', '.join(f'{v:.1f}' for v in r['qworker']['tenant'])})", flush=True)
        for name, xs in got.items():
            med = statistics.median
            readapts = [[a if a is not None else float("inf") for a in x["readapt"]] for x in xs]
            cell = lambda v: "never" if v == float("inf") else f"{v:.2f}"  # noqa: E731
            if scenario in FILLS:
                fills.append([f"{scenario}: " + (f"qworker ({args.workers} workers, max_concurrency {CAPACITY})" if name == "qworker"
                                                 else f"aiohttp + semaphore({CAPACITY})"), len(xs),
                              f"{med(x['held'] for x in xs):.1f}", f"{med(x['held'] for x in xs) / CAPACITY:.0%}",
                              f"{med(statistics.mean(x['shares']) for x in xs):.0%}", f"{med(x['r429'] for x in xs):.2%}", max(x["failed"] for x in xs)])
                continue
            rows.append([f"{scenario}: " + (f"qworker ({args.workers} workers, no hint)" if name == "qworker" else "aiohttp + semaphore(64)"),
                         len(xs), *(f"{med(x['shares'][k] for x in xs):.0%}" for k in range(3)), f"{med(x['r429'] for x in xs):.2%}",
                         *(cell(med(r[k] for r in readapts)) for k in range(2)), max(x["failed"] for x in xs)])
    if fills:
        print(f"\nFILL / FILLQ: a cap of {CAPACITY} (refusing / queueing past it), flat 0.3 s latency, a limit equal to the cap; "
              "the clients' requests in service at once by the server's ledger (after 2 s); medians over runs")
        print(table(["run", "runs", "held at once", "of the cap", "served / allowed", "429s / requests", "failed"], fills))
    if not rows:
        return
    print(f"\nSTEP: capacity 64 -> 16 -> 64; TENANT: a tenant takes 32 of 64 in phase 2, then leaves ({phase_s:g} s phases). "
          "Share of what the server allowed in each phase, by its own ledger; medians over runs (paired seeds)")
    print(table(["run", "runs", "phase 1", "phase 2", "phase 3", "429s / requests", "re-adapt s, change 1", "change 2", "failed"], rows))


if __name__ == "__main__":
    from _common import recorded

    with recorded("judge_moving"):  # the printed tables also go to docs/bench/judge_moving.md
        main()
