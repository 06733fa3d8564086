"""Worker and pool faults: a SIGKILLed or SIGSTOPped local worker, tasks hanging in C, a SIGKILLed pool daemon."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from pathlib import Path

import psutil

from qworker import Producer
from tests.chaos_scenarios.measure import (
    Outcome,
    RestartWatch,
    Timeline,
    collect,
    count_lines,
    evaluations,
    lost_of,
    paid_twice,
    rerun_bound,
    unsent_bound,
)
from tests.chaos_scenarios.processes import HB, TEST_REWARDS, local_worker_pids, start_pool, stop_proc, wait_until


def worker_sigkill(tmp: Path, n: int) -> Outcome:
    log = tmp / "evals-worker-kill"
    with Producer(local_workers=2, reward_modules=[TEST_REWARDS], heartbeat_s=HB) as p:
        p.map("noop", [{"warm": i} for i in range(20)], timeout=60)
        futures = p.submit_batch("count_eval", [{"log": str(log), "i": i, "sleep_ms": 0.5} for i in range(n)])
        tl = Timeline(futures)
        wait_until(lambda: count_lines(log) >= n * 0.3, 120, "30% of the run")
        os.kill(local_worker_pids(p)[0], signal.SIGKILL)
        watch = RestartWatch(p)
        results = collect(p, futures, 120)
        status = p.status()
        replaced = watch.result()
    return Outcome("SIGKILL a worker", "SIGKILL of one of 2 local workers at 30% of the run", n, lost_of(results),
                   paid_twice(evaluations(log)), rerun_bound(0.0005), sum(r is not None and not r.ok for r in results), tl.stall(),
                   6 * HB, f"worker replaced after {replaced}", {"results": results, "status": status})


def worker_sigstop(tmp: Path, n: int, *, busy: bool) -> Outcome:
    log = tmp / f"evals-stop-{'busy' if busy else 'idle'}"
    payloads = [{"log": str(log), "i": i, "sleep_ms": 5} for i in range(n)]
    with Producer(local_workers=2, reward_modules=[TEST_REWARDS], heartbeat_s=HB) as p:
        p.map("noop", [{"warm": i} for i in range(20)], timeout=60)
        victim = local_worker_pids(p)[0]
        try:
            if busy:
                futures = p.submit_batch("count_eval", payloads)
                tl = Timeline(futures)
                wait_until(lambda: count_lines(log) >= n * 0.2, 120, "20% of the run")
                os.kill(victim, signal.SIGSTOP)
                watch = RestartWatch(p)
            else:
                os.kill(victim, signal.SIGSTOP)
                watch = RestartWatch(p)
                futures = p.submit_batch("count_eval", payloads)
                tl = Timeline(futures)
            results = collect(p, futures, 120)
            status = p.status()
            replaced = watch.result()
        finally:
            with contextlib.suppress(ProcessLookupError):  # the pool should have killed it
                os.kill(victim, signal.SIGCONT)
    return Outcome(f"SIGSTOP {'a busy' if busy else 'an idle'} worker",
                   f"SIGSTOP of one of 2 local workers {'at 20% of the run' if busy else 'before the tasks are submitted'}",
                   n, lost_of(results), paid_twice(evaluations(log)), rerun_bound(0.005) if busy else 0,
                   sum(r is not None and not r.ok for r in results), tl.stall(), 6 * HB + 1.0,
                   f"stopped worker killed and replaced after {replaced}", {"results": results, "status": status})


def hung_tasks(tmp: Path, n: int, hung: int) -> Outcome:
    """``hung`` tasks that hang in C past their 1 s limit, spread among ``n`` normal ones, on 2 workers."""
    log = tmp / "evals-hung"
    with Producer(local_workers=2, reward_modules=[TEST_REWARDS], heartbeat_s=HB) as p:
        p.map("noop", [{"warm": i} for i in range(20)], timeout=60)
        futures: list = []
        bad: set[int] = set()
        every = n // hung
        for i in range(n):
            futures.append(p.submit("count_eval", {"log": str(log), "i": i, "sleep_ms": 5}))
            if i % every == every // 2 and len(bad) < hung:
                bad.add(len(futures))
                futures.append(p.submit("gil_hang", {"n": i}))
        tl = Timeline(futures)
        results = collect(p, futures, 180)
    normal = [r for j, r in enumerate(results) if j not in bad]
    hung_results = [results[j] for j in sorted(bad)]
    return Outcome("hung tasks among normal ones", f"{hung} tasks hanging in C (GIL held, 1 s limit) among {n} normal 5 ms tasks",
                   n + hung, lost_of(normal) + sum(r is None for r in hung_results), paid_twice(evaluations(log)), hung * unsent_bound(0.005),
                   sum(r is not None and not r.ok for r in normal), tl.stall(), 1.0 + 6 * HB,
                   f"hung ones: {Counter(r.error_kind.value if r and r.error_kind else 'unresolved' for r in hung_results)}",
                   {"normal": normal, "hung": hung_results})


def pool_sigkill(tmp: Path, n: int) -> Outcome:
    """Two ``qworker-pool`` daemons over tcp://127.0.0.1; one is SIGKILLed mid-run."""
    log = tmp / "evals-pool-kill"
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0, heartbeat_s=HB, reward_modules=[TEST_REWARDS]) as p:
        a = start_pool(p.endpoint, "--workers", "1", "--id", "doomed")
        b = start_pool(p.endpoint, "--workers", "1", "--id", "survivor")
        try:
            p.wait_for_workers(2, timeout=60)
            futures = p.submit_batch("count_eval", [{"log": str(log), "i": i, "sleep_ms": 2} for i in range(n)])
            tl = Timeline(futures)
            wait_until(lambda: count_lines(log) >= n * 0.3, 120, "30% of the run")
            orphans = [c.pid for c in psutil.Process(a.pid).children()]
            a.kill()
            a.wait()
            killed_at = time.monotonic()
            results = collect(p, futures, 120)
            took = time.monotonic() - killed_at
            status = p.status()
            left = [pid for pid in orphans if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        finally:
            stop_proc(b)
    by = Counter(r.worker.split("/")[0] for r in results if r is not None)
    return Outcome("SIGKILL a pool daemon", "SIGKILL of one of 2 qworker-pool daemons (tcp://127.0.0.1) at 30% of the run",
                   n, lost_of(results), paid_twice(evaluations(log)), rerun_bound(0.002), sum(r is not None and not r.ok for r in results),
                   tl.stall(), 6 * HB, f"workers outliving it {len(left)}; done by the doomed pool {by['doomed']}",
                   {"results": results, "status": status, "orphans_left": left, "after_kill_s": took, "by_pool": by})

