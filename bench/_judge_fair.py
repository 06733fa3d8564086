"""Judge benchmark: producers that share an endpoint without a service (run from ``bench/judge.py``: FAIR).

Two producers (4 workers each, in one process: each has its own gate, as two
trainers on one host do) call one mock judge; the second starts ``LATE_S``
after the first, while the first holds the whole endpoint.  Three servers:

  cap     capacity 64, lognormal 0.3 s, 429 past it (retry-after-ms)
  bucket  9,000 requests/min (150/s), 429 with whole-second Retry-After
  queue   a queueing server, 64 served at once, never refuses, no metrics URL

Beside: the same producers with ``coordinate: false`` (each on its own limit,
as before), and two aiohttp clients with a semaphore(64) each (the endpoint's
capacity, set by hand, unaware of each other).  Printed per run: the second's
share of the answers in windows after it started, both together against what
the server allows, 429s / requests; medians over runs with paired seeds.
``burn``: that many processes spinning on the CPU beside every run (a loaded
host), started before the producers and stopped after.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial

from _common import Server, free_port, run_together, table
from _judge_changes import LOGNORMAL, _semaphore_client

from qworker import Producer

LATE_S = 5.0
WINDOWS = [(2.0, 5.0), (5.0, 10.0), (10.0, 20.0)]  # seconds after the second started
SERVERS = {
    "cap": ((*LOGNORMAL, "--capacity", "64"), 64 / 0.3),
    "bucket": ((*LOGNORMAL, "--capacity", "1000", "--rpm", "9000", "--retry-after", "seconds"), 150.0),
    "queue": ((*LOGNORMAL, "--capacity", "64", "--queue"), 64 / 0.3),
}


def _producer(url: str, n: int, tag: str, coordinate: bool, start_at: float, done_at: list, failed: list) -> None:
    cfg = {"rewards": {"llm_judge": {"model": "judge", "endpoints": [{"url": url}], "timeout_s": 60, "ceiling": 512,
                                     "coordinate": coordinate}}}
    with Producer(local_workers=4, config=cfg) as p:
        p.wait_for_workers(4, timeout=60)
        time.sleep(max(0.0, start_at - time.monotonic()))
        futures = p.submit_batch("llm_judge", [{"prompt": f"Q {tag} {i}", "response": "a", "ground_truth": "y"} for i in range(n)])
        for f in futures:
            f.add_done_callback(lambda _f: done_at.append(time.monotonic()))
        failed.extend(r.error for r in p.gather(futures, timeout=900) if not r.ok)


def _aiohttp(url: str, n: int, start_at: float, done_at: list, refused: list) -> None:
    time.sleep(max(0.0, start_at - time.monotonic()))
    asyncio.run(_semaphore_client(url, n, 64, done_at, refused))


@contextlib.contextmanager
def burners(count: int) -> Iterator[None]:
    """``count`` processes that spin on the CPU while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(10)


def one_run(kind: str, system: str, seed: int, n: int, burn: int = 0) -> dict:
    args, allowed = SERVERS[kind]
    server = Server(free_port(), *args, seed=seed)
    done: list[list[float]] = [[], []]
    failed: list[str] = []
    start = time.monotonic() + 8.0  # both producers' pools are up before the first starts
    counts = (int(n * 1.5), n)
    try:
        with burners(burn):
            if system == "aiohttp":
                run_together(*(partial(_aiohttp, server.url, counts[i], start + i * LATE_S, done[i], []) for i in range(2)))
            else:
                run_together(*(partial(_producer, server.url, counts[i], f"{seed}{i}", system == "qworker", start + i * LATE_S,
                                       done[i], failed) for i in range(2)))
        st = server.stats()
    finally:
        server.stop()
    late = start + LATE_S
    shares, rates = [], []
    for a, b in WINDOWS:
        c = [sum(1 for t in d if late + a < t <= late + b) for d in done]
        shares.append(c[1] / max(1, sum(c)))
        rates.append(sum(c) / (b - a))
    return {"shares": shares, "of_allowed": statistics.median(rates) / allowed, "r429": st["status_429"] / max(1, st["requests"]),
            "failed": len(failed), "queued": st.get("mean_queued_s", 0.0) / max(1e-9, st.get("mean_service_s", 0.0)) if kind == "queue" else None}


def fair(n: int, runs: int, burn: int = 0, skip: tuple[str, ...] = ()) -> None:
    """``skip``: server kinds (cap, bucket, queue) and systems (alone, aiohttp) not to run."""
    rows = []
    names = {"qworker": "qworker (coordinate, the default)", "alone": "qworker, coordinate: false", "aiohttp": "aiohttp + semaphore(64) each"}
    for kind in (k for k in SERVERS if k not in skip):
        for system in (s for s in ("qworker", "alone", "aiohttp") if s not in skip):
            got = []
            for seed in range(1, runs + 1):
                r = one_run(kind, system, seed, n, burn)
                got.append(r)
                print(f"  FAIR {kind} {names[system]} seed {seed}: second's share "
                      + ", ".join(f"{a:g}-{b:g} s {s:.2f}" for (a, b), s in zip(WINDOWS, r["shares"], strict=True))
                      + f"; together {r['of_allowed']:.0%} of allowed, 429s {r['r429']:.2%}, failed {r['failed']}"
                      + ("" if r["queued"] is None else f", queued/service {r['queued']:.2f}"), flush=True)
            med = lambda f, got=got: statistics.median(f(g) for g in got)  # noqa: E731
            rows.append([f"FAIR {kind}: {names[system]}", len(got), *(f"{med(lambda g, k=k: g['shares'][k]):.2f}" for k in range(len(WINDOWS))),
                         f"{med(lambda g: g['of_allowed']):.0%}", f"{med(lambda g: g['r429']):.2%}",
                         "" if kind != "queue" else f"{med(lambda g: g['queued']):.2f}", max(g["failed"] for g in got)])
    print(f"\nFAIR: {burn} CPU burners beside; a second producer starts {LATE_S:g} s after the first, which holds the whole endpoint; the second's share of the "
          "answers (even: 0.50) in windows after it started; both together against what the server allows (median window); "
          "medians of runs (paired seeds)")
    print(table(["run", "runs", *(f"share {a:g}-{b:g} s" for a, b in WINDOWS), "together", "429s / requests", "queued/service", "failed"], rows))
