"""Transport benchmark: qworker against the usual ways of farming out rewards.

The same workload (N no-op rewards, then N rewards that burn 1 ms of CPU) runs,
in one process on one machine, through:

  qworker          Producer(local_workers=W): submit_batch + gather
  mp.Pool.map      multiprocessing.Pool(W).map with its default chunking
  Manager (seed)   the seed design: W processes fed by a multiprocessing.Queue
                   write results to a Manager().dict(); every 0.1 s the caller
                   tests each pending key with `in` and reads those present
  Manager (bulk)   the same, but the caller polls len() every 0.1 s and then
                   reads every result with one copy(): the kindest variant
  bare zmq         the physical reference, no-op only: pyzmq + msgpack alone, PUSH
                   batches of 256 task dicts to W worker processes, results back
                   to a PULL sink (no hashing, futures, leases, credit or cache)
  Ray tasks        one @ray.remote task per reward, ray.get on all (Ray kept on
                   127.0.0.1; skipped with a note if Ray is not installed)

qworker alone also runs the no-op workload with a reward that returns a small flat
``extra`` with its score (``{"score": 1.0, "n": i, "tag": "ok"}``): each result then
carries a dict, which the producer decodes, caches and hands out ("no-op + extra").

It prints tasks/s (median of --repeats runs for the no-op workloads, one run for
the 1 ms one) and qworker's ratio to each, then qworker's single-task round
trip on an idle pool, the CPU the caller's thread spends waiting in gather, the
CPU per no-op task of the producer (its caller's and dispatcher's threads, the
garbage collector's share and its number of collections per 100k tasks) and of the
local pool's processes, for both no-op workloads, and the producer's memory per
pending task.

Then qworker across a real TCP socket on 127.0.0.1, with ``qworker-pool``
processes as on remote hosts: one pool of W workers in plain text, the same
with CURVE (encrypted and authenticated), and two pools sharing the W workers.

    python bench/transport.py                    # the full run: 100k tasks each
    python bench/transport.py --tasks 20000      # quicker
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Optional

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import median_rate, table  # noqa: E402

from qworker import Producer, reward  # noqa: E402
from qworker.rewards.diagnostic import noop, spin  # noqa: E402

REWARDS = {"noop": noop, "spin": spin}


@reward("bench_noop_extra")
def noop_extra(payload: dict) -> dict:
    """A no-op that returns a small flat extra with its score (the local pool imports this file to run it)."""
    return {"score": 1.0, "n": payload.get("i", 0), "tag": "ok"}


# -- the alternatives ---------------------------------------------------------
def run_qworker(p: Producer, reward: str, payloads: list) -> None:
    results = p.gather(p.submit_batch(reward, payloads))
    assert all(r.ok for r in results), next(r.error for r in results if not r.ok)


def run_pool_map(pool, reward: str, payloads: list) -> None:
    out = pool.map(REWARDS[reward], payloads)
    assert len(out) == len(payloads)


def _manager_worker(tasks, results, reward: str) -> None:
    fn = REWARDS[reward]
    while True:
        item = tasks.get()
        if item is None:
            return
        i, payload = item
        results[i] = fn(payload)


def run_manager_dict(workers: int, reward: str, payloads: list, *, bulk: bool) -> None:
    """Tasks go out on a multiprocessing.Queue; results come back in a Manager dict.

    ``bulk=False`` is the seed design: every 0.1 s the caller tests each pending
    key with ``in`` and reads the ones present (an IPC round trip per test and
    per read).  ``bulk=True`` is the most generous correct variant: poll the
    dict's length every 0.1 s, then read everything with one ``copy()``.
    """
    with mp.Manager() as manager:
        results = manager.dict()
        tasks = mp.Queue()
        procs = [mp.Process(target=_manager_worker, args=(tasks, results, reward)) for _ in range(workers)]
        for p in procs:
            p.start()
        for item in enumerate(payloads):
            tasks.put(item)
        out: dict = {}
        if bulk:
            while len(results) < len(payloads):
                time.sleep(0.1)
            out = results.copy()
        else:
            pending = set(range(len(payloads)))
            while pending:
                time.sleep(0.1)
                for i in list(pending):
                    if i in results:
                        out[i] = results[i]
                        pending.discard(i)
        assert len(out) == len(payloads)
        for _ in procs:
            tasks.put(None)
        for p in procs:
            p.join()


BARE_BATCH = 256  # dicts per message in the bare pipeline


def _bare_worker(tasks_endpoint: str, sink_endpoint: str) -> None:
    """The reference pipeline's worker: PULL batches of task dicts, run the reward, PUSH results to the sink."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    tasks, sink = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    tasks.connect(tasks_endpoint)
    sink.connect(sink_endpoint)
    sink.send(b"")  # hello: the producer sends nothing until every worker is connected
    while True:
        batch = msgpack.unpackb(tasks.recv())
        if not batch:
            break
        sink.send(msgpack.packb([[t["i"], noop(t)] for t in batch]))
    tasks.close()
    sink.close(linger=1000)
    ctx.term()


class BarePipeline:
    """The physical reference: pyzmq + msgpack with nothing else (no hashing, futures, leases or credit).

    A PUSH socket sends batches of ``BARE_BATCH`` task dicts to ``workers`` processes, which send results
    back to a PULL sink; ``run`` sends from a thread of its own while the caller's thread collects.
    """

    def __init__(self, workers: int) -> None:
        import zmq

        self.dir = tempfile.mkdtemp(prefix="qworker-bare-")
        self.ctx = zmq.Context()
        self.push, self.sink = self.ctx.socket(zmq.PUSH), self.ctx.socket(zmq.PULL)
        self.push.bind(f"ipc://{self.dir}/tasks")
        self.sink.bind(f"ipc://{self.dir}/sink")
        self.procs = [mp.Process(target=_bare_worker, args=(f"ipc://{self.dir}/tasks", f"ipc://{self.dir}/sink")) for _ in range(workers)]
        for proc in self.procs:
            proc.start()
        for _ in self.procs:
            if not self.sink.poll(60_000):
                raise RuntimeError("a bare-pipeline worker did not connect within 60 s")
            self.sink.recv()

    def run(self, payloads: list) -> None:
        import threading

        import msgpack

        def send() -> None:
            for i in range(0, len(payloads), BARE_BATCH):
                self.push.send(msgpack.packb(payloads[i : i + BARE_BATCH]))

        sender = threading.Thread(target=send)
        sender.start()
        got = 0
        while got < len(payloads):
            if not self.sink.poll(60_000):
                raise RuntimeError(f"the bare pipeline stalled after {got} of {len(payloads)} results")
            got += len(msgpack.unpackb(self.sink.recv()))
        sender.join()

    def close(self) -> None:
        import msgpack

        for _ in self.procs:
            self.push.send(msgpack.packb([]))
        for proc in self.procs:
            proc.join(30)
        self.push.close(linger=0)
        self.sink.close(linger=0)
        self.ctx.term()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_ray(workers: int):
    try:
        import ray
    except ImportError:
        return None
    os.environ.update({"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"})
    ray.init(
        num_cpus=workers, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
        _temp_dir=tempfile.mkdtemp(prefix="ray-"), configure_logging=False,
    )

    @ray.remote
    def ray_reward(reward: str, payload):
        return REWARDS[reward](payload)

    return ray, ray_reward


def run_ray(ray_pair, reward: str, payloads: list) -> None:
    ray, fn = ray_pair
    out = ray.get([fn.remote(reward, p) for p in payloads])
    assert len(out) == len(payloads)


# -- qworker's own figures ----------------------------------------------------
def round_trip_ms(p: Producer, n: int = 2000) -> list[float]:
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        p.submit("noop", {"rtt": i}).result()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def _process_cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds so far of processes ``pids`` (psutil); NaN when none could be read."""
    total, read = 0.0, 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total, read = total + t.user + t.system, read + 1
    return total if read else float("nan")


def _thread_cpu_s(tid: Optional[int]) -> float:
    """User + system CPU seconds so far of this process's thread ``tid`` (its native id; psutil); NaN if not found."""
    for t in psutil.Process().threads():
        if t.id == tid:
            return t.user_time + t.system_time
    return float("nan")


class CpuSplit:
    """Where the CPU goes during one ``run_qworker``: the producer's caller thread submitting and gathering, its
    dispatcher's thread, the garbage collector's share of the two, and the local pool's processes (its workers and
    supervisor; NaN where psutil cannot read them)."""

    def __init__(self, p: Producer, pool_pids: list[int]) -> None:
        self.tid = getattr(p._dispatcher, "native_id", None)
        self.pool_pids = pool_pids
        self.gc_s = 0.0
        self.collections = 0
        self._gc_t0 = 0.0
        self.us: dict[str, float] = {}

    def _thread_s(self) -> float:
        return _thread_cpu_s(self.tid)

    def _pool_s(self) -> float:
        return _process_cpu_s(self.pool_pids)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self.gc_s += time.perf_counter() - self._gc_t0
            self.collections += 1

    def __enter__(self) -> CpuSplit:
        gc.callbacks.append(self._on_gc)
        self.w0 = self._pool_s()
        self.c0, self.d0 = time.thread_time(), self._thread_s()
        return self

    def __exit__(self, *exc: object) -> None:
        self.caller_s, self.dispatcher_s = time.thread_time() - self.c0, self._thread_s() - self.d0
        self.pool_s = self._pool_s() - self.w0
        gc.callbacks.remove(self._on_gc)

    def per_task_us(self, n: int) -> dict[str, float]:
        return {"caller thread (hash, register, gather)": self.caller_s / n * 1e6,
                "dispatcher thread (queue, send, results)": self.dispatcher_s / n * 1e6,
                "of the two, garbage collection (wall)": self.gc_s / n * 1e6,
                f"the pool's {len(self.pool_pids)} processes (workers, supervisor)": self.pool_s / n * 1e6}


def gather_cpu_share(p: Producer, payloads: list) -> tuple[float, float]:
    """(caller-thread CPU seconds in gather, wall seconds in gather)."""
    futures = p.submit_batch("spin", payloads)
    c0, t0 = time.thread_time(), time.perf_counter()
    p.gather(futures)
    return time.thread_time() - c0, time.perf_counter() - t0


def pending_task_bytes(n: int) -> tuple[float, int]:
    """Producer memory per pending task, with no worker to take them; and the payload size."""
    payloads = [{"prompt": f"Question {i}: " + "x" * 120, "response": "y" * 200 + f" #### {i}", "ground_truth": str(i)} for i in range(n)]
    with Producer(local_workers=0) as p:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        futures = p.submit_batch("gsm8k", payloads)
        time.sleep(0.5)  # let the dispatcher queue them
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        size = len(__import__("msgpack").packb(payloads[0]))
        del futures
    return (after - before) / n, size


def tcp_rates(n: int, workers: int, repeats: int, *, pools: int = 1, curve: bool = False) -> dict[str, tuple[float, list[float]]]:
    """no-op and 1 ms CPU tasks/s through remote-style pools over tcp://127.0.0.1 (CURVE if asked)."""
    from qworker.transport.security import create_keys

    opts: dict = {}
    flags: list[str] = []
    keydir = tempfile.mkdtemp(prefix="qworker-keys-")
    try:
        if curve:
            allowed = os.path.join(keydir, "allowed")
            os.makedirs(allowed)
            server_pub, server_sec = create_keys(os.path.join(keydir, "producer"), "producer")
            pool_pub, pool_sec = create_keys(os.path.join(keydir, "pool"), "pool")
            shutil.copy(pool_pub, allowed)
            opts = {"curve_secret_key": server_sec, "curve_allowed_keys": allowed}
            flags = ["--curve-secret-key", pool_sec, "--curve-server-key", server_pub]
        with Producer(bind="tcp://127.0.0.1:0", local_workers=0, **opts) as p:
            per_pool = [workers // pools + (1 if k < workers % pools else 0) for k in range(pools)]
            procs = [subprocess.Popen([sys.executable, "-m", "qworker", "pool", "--connect", p.endpoint, "--workers", str(k),
                                       "--id", f"bench-{i}", "--log-level", "WARNING", *flags]) for i, k in enumerate(per_pool)]
            try:
                p.wait_for_workers(workers, timeout=60)
                out = {}
                for name, reward, extra, reps in (("no-op", "noop", {}, repeats), ("1 ms CPU", "spin", {"ms": 1}, 1)):
                    batches = iter([[{"i": i, "rep": r, "tcp": pools, "curve": curve, **extra} for i in range(n)] for r in range(reps)])
                    out[name] = median_rate(n, lambda reward=reward, batches=batches: run_qworker(p, reward, next(batches)), reps)
                return out
            finally:
                for proc in procs:
                    proc.send_signal(signal.SIGTERM)
                for proc in procs:
                    proc.wait(60)
    finally:
        shutil.rmtree(keydir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="runs of the no-op workload per system (median reported)")
    ap.add_argument("--skip", action="append", default=[],
                    help="skip a system (bare, pool, manager, ray, tcp), the 1 ms CPU workload (cpu) or qworker's no-op + extra (extra)")
    args = ap.parse_args()
    n, w = args.tasks, args.workers
    print(f"transport benchmark: {n} tasks per workload, {w} workers, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")

    workloads = {"no-op": ("noop", [{"i": i} for i in range(n)], args.repeats), "1 ms CPU": ("spin", [{"i": i, "ms": 1} for i in range(n)], 1)}
    if "cpu" in args.skip:
        del workloads["1 ms CPU"]
    rates: dict[str, dict[str, float]] = {}
    spread: dict[str, dict[str, list[float]]] = {}

    def record(system: str, workload: str, rate: float, runs: list[float]) -> None:
        rates.setdefault(system, {})[workload] = rate
        spread.setdefault(system, {})[workload] = runs
        print(f"  {system:<14} {workload:<9} {rate:>10,.0f} tasks/s   runs: {', '.join(f'{r:,.0f}' for r in runs)}", flush=True)

    producer_us: dict[str, float] = {}  # producer process CPU per task, median over runs
    extra_rate: Optional[float] = None  # qworker's no-op + extra tasks/s
    # the no-op runs' producer CPU per task, by where it went, and collections per 100k tasks (median over runs)
    split: dict[tuple[str, str], list[float]] = {}
    qworker_workloads = dict(workloads)
    if "extra" not in args.skip:  # qworker alone: the no-op payloads, each result carrying a small flat extra
        qworker_workloads["no-op + extra"] = ("bench_noop_extra", workloads["no-op"][1], args.repeats)
    with Producer(local_workers=w) as p:
        pool_pids = [p._pool.pid, *(c.pid for c in psutil.Process(p._pool.pid).children(recursive=True))] if p._pool is not None else []
        for name, (reward, payloads, repeats) in qworker_workloads.items():
            # fresh payloads per repeat, so no run is answered from the cache
            batches = iter([[dict(x, rep=r) for x in payloads] for r in range(repeats)])
            cpu_runs: list[float] = []

            def one_run(reward: str = reward, batches=batches, cpu_runs: list[float] = cpu_runs, name: str = name) -> None:
                c0 = time.process_time()  # the producer's process: the caller's and the dispatcher's threads
                if not name.startswith("no-op"):
                    run_qworker(p, reward, next(batches))
                else:
                    with CpuSplit(p, pool_pids) as cpu:
                        run_qworker(p, reward, next(batches))
                    for part, us in cpu.per_task_us(n).items():
                        split.setdefault((name, part), []).append(us)
                    split.setdefault((name, "garbage collections per 100k tasks"), []).append(cpu.collections / n * 1e5)
                cpu_runs.append((time.process_time() - c0) / n * 1e6)

            rate, runs = median_rate(n, one_run, repeats)
            if name in workloads:
                record("qworker", name, rate, runs)
            else:  # no other system runs it: not a column of the comparison
                extra_rate = rate
                print(f"  {'qworker':<14} {name} {rate:>10,.0f} tasks/s   runs: {', '.join(f'{r:,.0f}' for r in runs)}", flush=True)
            producer_us[name] = statistics.median(cpu_runs)
        rtt = round_trip_ms(p)
        cpu_s, wall_s = (0.0, 1.0) if "cpu" in args.skip else gather_cpu_share(p, [{"i": i, "ms": 1, "cpu": 1} for i in range(min(n, 20_000))])
        status = p.status()["producer"]

    if "bare" not in args.skip:
        bare = BarePipeline(w)
        try:
            payloads = workloads["no-op"][1]
            record("bare zmq", "no-op", *median_rate(n, lambda: bare.run(payloads), args.repeats))
        finally:
            bare.close()
    if "pool" not in args.skip:
        with mp.Pool(w) as pool:
            for name, (reward, payloads, repeats) in workloads.items():
                record("mp.Pool.map", name, *median_rate(n, lambda reward=reward, payloads=payloads: run_pool_map(pool, reward, payloads), repeats))
    if "manager" not in args.skip:
        for name, (reward, payloads, repeats) in workloads.items():
            record("Manager (seed)", name, *median_rate(n, lambda reward=reward, payloads=payloads: run_manager_dict(w, reward, payloads, bulk=False), repeats))
        for name, (reward, payloads, repeats) in workloads.items():
            record("Manager (bulk)", name, *median_rate(n, lambda reward=reward, payloads=payloads: run_manager_dict(w, reward, payloads, bulk=True), repeats))
    ray_pair = None if "ray" in args.skip else start_ray(w)
    if ray_pair is not None:
        run_ray(ray_pair, "noop", [{"warm": i} for i in range(1000)])
        for name, (reward, payloads, _) in workloads.items():
            record("Ray tasks", name, *median_rate(n, lambda reward=reward, payloads=payloads: run_ray(ray_pair, reward, payloads), 1))
        ray_pair[0].shutdown()
    elif "ray" not in args.skip:
        print("  Ray tasks: skipped, ray is not installed (pip install ray)")

    per_task, payload_size = pending_task_bytes(min(n, 100_000))
    tcp: dict[str, dict[str, tuple[float, list[float]]]] = {}
    if "tcp" not in args.skip:
        for label, kw in (("tcp, 1 pool", {}), ("tcp + CURVE, 1 pool", {"curve": True}), ("tcp, 2 pools", {"pools": 2})):
            tcp[label] = tcp_rates(n, w, args.repeats, **kw)
            print(f"  qworker {label:<20} " + "   ".join(f"{k} {r:,.0f} tasks/s (runs {', '.join(f'{x:,.0f}' for x in runs)})"
                                                       for k, (r, runs) in tcp[label].items()), flush=True)

    print("\nthroughput, tasks/s (median), and qworker's ratio to each")
    headers = ["system"] + [f"{k} tasks/s" for k in workloads] + [f"qworker / it, {k}" for k in workloads]
    rows = []
    for system, by in rates.items():
        rows.append([system] + [f"{by[k]:,.0f}" if k in by else "-" for k in workloads]
                    + [f"{rates['qworker'][k] / by[k]:.2f}x" if k in by else "-" for k in workloads])
    print(table(headers, rows))

    print("\nqworker on an idle pool and while waiting")
    print(table(["measure", "value"], [
        *([] if extra_rate is None else [["no-op + extra tasks/s (median)", f"{extra_rate:,.0f}"]]),
        ["single-task round trip p50", f"{statistics.median(rtt):.3f} ms"],
        ["single-task round trip p99", f"{statistics.quantiles(rtt, n=100)[98]:.3f} ms"],
        *([] if "cpu" in args.skip else [["caller thread CPU in gather", f"{100 * cpu_s / wall_s:.2f}% ({cpu_s * 1000:.1f} ms CPU over {wall_s:.2f} s)"]]),
        *[[f"producer process CPU per {k} task", f"{us:.1f} us"] for k, us in producer_us.items()],
        *[[f"  {name}: {part}", f"{statistics.median(v):.0f}" if part.startswith("garbage") else f"{statistics.median(v):.1f} us"]
          for (name, part), v in split.items()],
        ["producer memory per pending task", f"{per_task:,.0f} bytes (payload itself: {payload_size} bytes msgpack)"],
        ["duplicate results dropped", str(status["duplicate_results"])],
    ]))
    if tcp:
        base = tcp["tcp, 1 pool"]
        print(f"\nqworker over tcp://127.0.0.1 with qworker-pool processes ({w} workers in all), tasks/s (median), and the ratio to 1 plain pool")
        print(table(["transport", *[f"{k} tasks/s" for k in workloads], *[f"vs plain, {k}" for k in workloads]], [
            [label, *[f"{by[k][0]:,.0f}" for k in workloads], *[f"{by[k][0] / base[k][0]:.2f}x" for k in workloads]]
            for label, by in tcp.items()
        ]))


if __name__ == "__main__":
    from _common import recorded

    with recorded("transport"):  # the printed tables also go to docs/bench/transport.md
        main()
