"""Where the CPU goes, machine-wide, for no-op tasks: an embedded ``Producer`` against ``qworker serve`` with N clients.

On a machine of few cores, throughput is bounded by the CPU every process spends per task together, and by the
busiest thread that holds a process's GIL.  This runs the same no-op workload as ``bench/service.py`` (``--tasks``
per run, in requests of ``--batch``, ``--workers`` local workers), and reads, before and after each run, every thread
of every process taking part (``/proc/PID/task/TID/schedstat`` and ``status``): its CPU time, the time it was runnable
but waiting for a CPU, and its voluntary and involuntary context switches.  It prints, per process and per thread, microseconds of CPU and context switches
per task (the median of ``--repeats`` runs), and the sum of all processes, so the client runs' extra CPU per task
over the embedded producer can be read part by part.

Threads are named by their OS name (``ZMQbg/IO/0`` and ``ZMQbg/Reaper`` are libzmq's), the process's first thread
``main``, and its other threads by OS name and start order (in ``qworker serve`` the busiest is the dispatcher; in a
client, its I/O thread).  The times are the scheduler's (``/proc/PID/task/TID/schedstat``: ns on a CPU, and ns
runnable on a run queue while another thread had the CPU).

    python bench/service_cpu.py                     # 40k tasks, embedded and 4 clients, 3 runs each
    python bench/service_cpu.py --clients 1,4 --tasks 20000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import service as svc  # noqa: E402
from _common import counts, free_port, table  # noqa: E402

Stats = tuple[float, int, int, float]  # CPU s, voluntary and involuntary context switches, s runnable but waiting for a CPU
Sample = dict[tuple[str, int], tuple[str, Stats]]  # (process label, tid) -> (thread label, its stats so far)


def thread_stats(pid: int) -> dict[int, tuple[str, Stats]]:
    """tid -> (OS thread name, (CPU s, voluntary and involuntary context switches, s spent runnable waiting for a CPU))
    for every thread of ``pid``: the times from ``schedstat`` (ns, where ``stat``'s are 10 ms clock ticks)."""
    out: dict[int, tuple[str, Stats]] = {}
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ran, waited = (int(x) / 1e9 for x in f.read().split()[:2])
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        vol = invol = 0
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                vol = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                invol = int(line.split()[1])
        out[tid] = (name, (ran, vol, invol, waited))
    return out


def sample(procs: dict[str, int]) -> Sample:
    """Every thread of every process in ``procs`` (label -> pid)."""
    out: Sample = {}
    for label, pid in procs.items():
        py = 0
        zmq_seen: dict[str, int] = {}  # a process of two ZeroMQ contexts (``qworker serve``) has two of each
        for tid, (name, stats) in thread_stats(pid).items():
            if tid == pid:
                tname = "main"
            elif name.startswith("ZMQbg"):
                k = zmq_seen[name] = zmq_seen.get(name, 0) + 1
                tname = name if k == 1 else f"{name}#{k}"
            else:
                py += 1
                tname = f"{name}-{py}"
            out[(label, tid)] = (tname, stats)
    return out


def diff(before: Sample, after: Sample) -> dict[tuple[str, str], Stats]:
    """(process label, thread label) -> its stats between two samples."""
    out: dict[tuple[str, str], Stats] = {}
    for key, (tname, now) in after.items():
        was = before.get(key, (tname, (0.0, 0, 0, 0.0)))[1]
        prev = out.get((key[0], tname), (0.0, 0, 0, 0.0))  # (two threads of one label add up, never replace)
        out[(key[0], tname)] = (prev[0] + now[0] - was[0], prev[1] + now[1] - was[1], prev[2] + now[2] - was[2],
                                prev[3] + now[3] - was[3])
    return out


def processes(kind: str, root: int, clients: list[int]) -> dict[str, int]:
    """Label -> pid: the producer's process (embedded: this one; else the service), its pool's, and the clients."""
    out = {kind: root}
    for i, pid in enumerate(svc.pool_pids(root)):
        out[f"pool-{i}"] = pid
    for i, pid in enumerate(clients):
        out[f"client-{i}"] = pid
    return out


COLUMNS = ["CPU us/task", "voluntary cs/task", "involuntary cs/task", "runnable, waiting for a CPU, us/task"]


def report(title: str, n: int, runs: list[dict[tuple[str, str], Stats]], rates: list[float], walls: list[float]) -> float:
    """Print the per-thread and per-process tables of ``runs`` (``n`` tasks each); the CPU us per task of all processes."""
    keys = sorted({k for r in runs for k in r})
    zero = (0.0, 0, 0, 0.0)
    scale = (1e6 / n, 1 / n, 1 / n, 1e6 / n)
    rows: list[list[object]] = []
    by_proc: dict[str, list[float]] = {}
    for key in keys:
        per = [statistics.median(r.get(key, zero)[i] for r in runs) * scale[i] for i in range(4)]
        proc = key[0].split("-")[0] if key[0].startswith(("client", "pool")) else key[0]
        sums = by_proc.setdefault(proc, [0.0, 0.0, 0.0, 0.0])
        for i in range(4):
            sums[i] += per[i]
        if per[0] >= 0.05 or per[1] + per[2] >= 0.001:
            rows.append([key[0], key[1], f"{per[0]:.2f}", f"{per[1]:.4f}", f"{per[2]:.4f}", f"{per[3]:.2f}"])
    total = sum(v[0] for v in by_proc.values())
    wall = statistics.median(walls)
    print(f"\n{title}: {statistics.median(rates):,.0f} tasks/s (runs: {', '.join(f'{r:,.0f}' for r in rates)}), "
          f"CPU {total:.2f} us per task in all: {total * n / 1e6 / wall:.2f} of the CPUs over the run")
    print(table(["process", "thread", *COLUMNS], rows))
    every = [sum(v[i] for v in by_proc.values()) for i in range(4)]
    lines: list[list[object]] = [[p, f"{v[0]:.2f}", f"{v[1]:.4f}", f"{v[2]:.4f}", f"{v[3]:.2f}"] for p, v in by_proc.items()]
    print(table(["processes", *COLUMNS], lines + [["all", f"{every[0]:.2f}", f"{every[1]:.4f}", f"{every[2]:.4f}", f"{every[3]:.2f}"]]))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=40_000, help="no-op tasks per run (all clients together)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--clients", default="4", help="client process counts, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256, help="tasks per submit_batch request")
    ap.add_argument("--no-embedded", action="store_true", help="skip the embedded producer")
    a = ap.parse_args()
    if a.tasks < 1 or a.workers < 1 or a.repeats < 1:
        ap.error("--tasks, --workers and --repeats: 1 or more")
    clients = counts(a.clients)
    if clients is None:
        ap.error(f"--clients {a.clients!r}: client counts of 1 or more, comma-separated (e.g. 1,4)")
    if a.batch < 0:
        ap.error("--batch: 0 (all at once) or more")
    from qworker import Client, Producer

    n = a.tasks
    print(f"service CPU benchmark: {n:,} no-op tasks per run in requests of {a.batch}, {a.workers} workers, "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at start", flush=True)
    totals = {}
    if not a.no_embedded:
        with Producer(local_workers=a.workers) as p:
            p.wait_for_workers(a.workers, timeout=60)
            p.map("noop", [{"warm": i} for i in range(200)])
            procs = processes("producer", os.getpid(), [])
            runs, rates, walls = [], [], []
            for _ in range(a.repeats):
                batch = svc.payloads("noop", n, f"cpu-embedded-{next(svc.RUN_IDS)}")
                s0, t0 = sample(procs), time.monotonic()
                results = svc.submit_all(p, "noop", batch, a.batch)
                assert all(r.ok and not r.cached for r in results)
                walls.append(time.monotonic() - t0)
                rates.append(n / walls[-1])
                runs.append(diff(s0, sample(procs)))
            totals["embedded"] = report("embedded Producer", n, runs, rates, walls)
    for k in clients:  # a fresh service for each client count: the same cache states
        port = free_port()
        service = svc.serve(port, a.workers)
        endpoint = f"tcp://127.0.0.1:{port}"
        try:
            with Client(endpoint) as c:
                c.map("noop", [{"warm": i} for i in range(200)], timeout=120)
            clients = svc.Clients(endpoint, k, a.batch, service.pid)
            try:
                procs = processes("service", service.pid, [int(p.pid or 0) for p in clients.procs])
                runs, rates, walls = [], [], []
                for _ in range(a.repeats):
                    box: list[Sample] = []
                    rate = _SampleAtGo(clients, procs, box).run(n)
                    after = sample(procs)
                    walls.append(n / rate)
                    rates.append(rate)
                    runs.append(diff(box[0], after))
                totals[f"x{k}"] = report(f"Client x {k}", n, runs, rates, walls)
            finally:
                clients.close()
        finally:
            svc.stop(service)
    if "embedded" in totals:
        for name, total in totals.items():
            if name != "embedded":
                print(f"Client {name}: {total - totals['embedded']:+.2f} us per task of CPU over the embedded producer, all processes")


class _SampleAtGo:
    """``Clients.run``, with a sample of every thread taken just before the clients are told to go."""

    def __init__(self, clients: Any, procs: dict[str, int], box: list) -> None:
        self.clients, self.procs, self.box = clients, procs, box

    def run(self, n: int) -> float:
        orig = svc.pool_pids

        def pids_and_sample(pid: int) -> list[int]:  # Clients.run reads the pool just before "go"
            self.box.append(sample(self.procs))
            return orig(pid)

        svc.pool_pids = pids_and_sample
        try:
            return float(self.clients.run("noop", n)[0])
        finally:
            svc.pool_pids = orig


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
