"""Service benchmark: what going through ``qworker serve`` and ``qworker.Client`` costs, against an embedded ``Producer``.

The same workloads, with the same number of local workers (``--workers``, 2), run:

  embedded Producer   one process: Producer(local_workers=W); submit_batch every task in requests of
                      ``--batch`` (256), then gather them all
  Client x N          one ``qworker serve --workers W`` process and N client processes (1, 4, 16); each
                      client submits its share of the tasks the same way and gathers it.  Each client count
                      has a fresh service, warmed up as the embedded producer is (200 no-op tasks, then 20 per
                      client process)

A producer's CPU per task grows with the number of results its cache holds, and every task's result is
cached: so each row starts from the same cache state (the embedded producer's and each service's runs
follow the same warm-up and the same earlier runs of that row), and the cache's entry count at the start
of each run is printed beside it and in the throughput table.

Workloads: ``--noop`` no-op tasks and ``--spin`` tasks of 1 ms of CPU (the ``spin`` reward with
``{"ms": 1}``).  Every run has fresh payloads, so nothing comes from the result cache.  A client run's
throughput is the total tasks / (the last client's finish - the first client's start); the client
processes are started, connected and warmed up before the clock starts, and start together.  Each
figure is the median of ``--repeats`` runs.  "added per task" is 1/rate(client) - 1/rate(embedded).
The CPU per task of the producer's process (embedded: the benchmark's own; client runs: ``qworker
serve``'s), of its local pool (supervisor and workers, through psutil) and of the client processes is
measured in the same runs; their sum gives the most those processes could do on this machine's CPUs
(its CPU ceiling), against which the measured rate is shown.

Then, on the embedded producer and through a Client on the first client count's service, each idle after
its throughput runs: the single-task round trip
(``submit(...).result()``, one at a time, ``--rtt`` times), p50 and p99; and one caller submitting
n no-op tasks in one request (``--one-batch``), to show how a request's size matters.

The round trip's hops, measured in the same run: a bare pyzmq DEALER -> ROUTER echo over loopback TCP
to another process (what a message to the service and its answer cost at the least), and the same
echo made the way a Client makes it: the caller hands the message to an I/O thread (a ``Reactor``,
woken through its pipe) and sleeps on a future that the I/O thread sets when the echo comes back.
A Client's round trip is then about the embedded one plus that second echo: the service's own work
(taking the request, answering from the future's callback) is what is left over.

    python bench/service.py                  # 40k no-op and 4k spin tasks per run, 3 runs each
    python bench/service.py --quick          # 4k / 400 tasks, 1 run, 500 round trips: a smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from itertools import count
from typing import Any, Optional

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import counts, free_port, table  # noqa: E402

RUN_IDS = count()
SERVE_START_S = 120.0  # the longest a 'qworker serve' may take to say it listens


def payloads(reward: str, n: int, tag: str) -> list[dict]:
    extra = {"ms": 1} if reward == "spin" else {}
    return [{"i": i, "run": tag, **extra} for i in range(n)]


# -- the embedded producer ----------------------------------------------------
def submit_all(c: Any, reward: str, batch: list, size: int) -> list:
    """Every payload, in requests of ``size`` (0: one request), then the futures gathered."""
    size = size or len(batch)
    futures = [f for i in range(0, len(batch), size) for f in c.submit_batch(reward, batch[i : i + size])]
    return c.gather(futures, timeout=600)


def embedded_rate(p: Any, reward: str, n: int, size: int) -> float:
    return embedded_run(p, reward, n, size)[0]


def embedded_run(p: Any, reward: str, n: int, size: int) -> tuple[float, float, float, float, float]:
    """(tasks/s, wall s, CPU s of this process (the caller and the producer's threads; not the workers), 0 (no
    clients), CPU s of the producer's local pool (its supervisor and workers))."""
    batch = payloads(reward, n, f"embedded-{next(RUN_IDS)}")
    pool = pool_pids(os.getpid())
    w0, c0, t0 = cpu_s(pool), time.process_time(), time.monotonic()
    results = submit_all(p, reward, batch, size)
    elapsed, cpu = time.monotonic() - t0, time.process_time() - c0
    workers = cpu_s(pool) - w0
    assert all(r.ok and not r.cached for r in results), next((r.error for r in results if not r.ok), "a cached result")
    return n / elapsed, elapsed, cpu, 0.0, workers


def pool_pids(pid: int) -> list[int]:
    """The processes under process ``pid`` (its local pool: supervisor and workers), through psutil."""
    return [c.pid for c in psutil.Process(pid).children(recursive=True)]


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds so far of processes ``pids`` together (all their threads, not their children;
    a process that has gone counts nothing)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


def round_trips_ms(submit: Any, n: int, tag: str) -> list[float]:
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        r = submit("noop", {"rtt": i, "run": tag}).result()
        times.append((time.perf_counter() - t0) * 1000)
        assert r.ok and not r.cached, r
    return times


# -- client processes -----------------------------------------------------------
def client_main(endpoint: str, k: int, size: int, conn: Any) -> None:
    """One client process: connect, warm up, then for each job build its payloads, wait for "go",
    submit them in one batch, gather, and report (start, finish, failed)."""
    from qworker import Client

    with Client(endpoint) as c:
        c.map("noop", [{"warm": k, "pid": os.getpid(), "i": i} for i in range(20)], timeout=60)
        conn.send("ready")
        while True:
            job = conn.recv()
            if job is None:
                return
            reward, n, tag = job
            batch = payloads(reward, n, f"{tag}-client-{k}")
            conn.send("set")
            assert conn.recv() == "go"
            c0, t0 = time.process_time(), time.monotonic()
            results = submit_all(c, reward, batch, size)
            t1, cpu = time.monotonic(), time.process_time() - c0
            conn.send((t0, t1, sum(not r.ok for r in results), sum(r.cached for r in results), cpu))


def client_one_batch(c: Any, n: int) -> float:
    batch = payloads("noop", n, f"one-{next(RUN_IDS)}")
    t0 = time.monotonic()
    results = c.gather(c.submit_batch("noop", batch), timeout=600)
    elapsed = time.monotonic() - t0
    assert all(r.ok and not r.cached for r in results)
    return n / elapsed


class Clients:
    def __init__(self, endpoint: str, n: int, size: int, service_pid: int) -> None:
        self.service_pid = service_pid
        ctx = mp.get_context("spawn")
        self.conns, self.procs = [], []
        for k in range(n):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=client_main, args=(endpoint, k, size, child), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        for conn in self.conns:
            if not conn.poll(120):
                raise RuntimeError("a client process did not start within 120 s")
            assert conn.recv() == "ready"

    def run(self, reward: str, total: int) -> tuple[float, float, float, float, float]:
        """(tasks/s over all clients, median client wall s, CPU s of the service process, of all clients, of the
        service's local pool)."""
        n = len(self.conns)
        shares = [total // n + (1 if k < total % n else 0) for k in range(n)]
        tag = f"svc-{next(RUN_IDS)}"
        for conn, share in zip(self.conns, shares, strict=True):
            conn.send((reward, share, tag))
        for conn in self.conns:
            assert conn.recv() == "set"
        pool = pool_pids(self.service_pid)
        s0, w0 = cpu_s([self.service_pid]), cpu_s(pool)
        for conn in self.conns:
            conn.send("go")
        reports = [conn.recv() for conn in self.conns]
        service_cpu, workers = cpu_s([self.service_pid]) - s0, cpu_s(pool) - w0
        failed, cached = sum(r[2] for r in reports), sum(r[3] for r in reports)
        assert failed == 0 and cached == 0, f"{failed} failed, {cached} cached"
        span = max(r[1] for r in reports) - min(r[0] for r in reports)
        return total / span, statistics.median(r[1] - r[0] for r in reports), service_cpu, sum(r[4] for r in reports), workers

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
        for proc in self.procs:
            proc.join(30)


def _pump(stream: Any, lines: queue.Queue[Optional[str]]) -> None:
    """Each line of ``stream``, then None at its end."""
    for line in iter(stream.readline, ""):
        lines.put(line)
    lines.put(None)


def serve(port: int, workers: int) -> subprocess.Popen:
    """A ``qworker serve`` on ``port``, once it says it listens (at most ``SERVE_START_S``; it is killed past that)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "qworker", "serve", "--listen", f"tcp://127.0.0.1:{port}", "--workers", str(workers), "--log-level", "WARNING"],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    lines: queue.Queue[Optional[str]] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stderr, lines), daemon=True).start()  # (and drains it afterwards)
    said: list[str] = []
    deadline = time.monotonic() + SERVE_START_S
    while not any("clients on" in x for x in said):
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            proc.kill()
            raise RuntimeError(f"qworker serve did not say it listens within {SERVE_START_S:.0f} s: {''.join(said)}") from None
        if line is None:  # its stderr closed (it ended): what it said before is all read
            proc.kill()
            raise RuntimeError(f"qworker serve did not start: {''.join(said)}")
        said.append(line)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def echo_main(conn: Any) -> None:
    """A ROUTER on loopback TCP that sends every message straight back (the service's hop, without the service)."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    conn.send(f"tcp://127.0.0.1:{port}")
    while True:
        frames = sock.recv_multipart()
        sock.send_multipart(frames)
        if frames[-1] == b"stop":
            break
    sock.close(linger=1000)
    ctx.term()


def echo_round_trips_ms(n: int) -> tuple[list[float], list[float]]:
    """(bare DEALER/ROUTER echo round trips over loopback TCP, the same echo through an I/O thread as a Client
    makes it), ms each, ``n`` of each, one at a time, against an echo process."""
    from collections import deque

    import zmq

    from qworker.engine.result import Result, ResultFuture
    from qworker.transport.reactor import Reactor

    parent, child = mp.get_context("spawn").Pipe()
    proc = mp.get_context("spawn").Process(target=echo_main, args=(child,), daemon=True)
    proc.start()
    endpoint = parent.recv()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(endpoint)
    msg = b"x" * 64
    bare = []
    for _ in range(n + 50):
        t0 = time.perf_counter()
        sock.send(msg)
        sock.recv()
        bare.append((time.perf_counter() - t0) * 1000)
    # the Client's shape: the caller appends to an outbox and wakes the I/O thread, which sends; the answer is
    # read by the I/O thread, which sets the caller's future
    outbox: deque[ResultFuture] = deque()
    waiting: deque[ResultFuture] = deque()
    reactor = Reactor(name="echo-client", max_wait_s=0.5)

    def send_outbox(now: float) -> None:
        while outbox:
            waiting.append(outbox.popleft())
            sock.send(msg, flags=zmq.NOBLOCK)

    def receive() -> None:
        while True:
            try:
                sock.recv(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            waiting.popleft().set_result(Result())

    reactor.each_turn(send_outbox, name="sending")
    reactor.on_readable(sock, receive, name="receiving")
    io = threading.Thread(target=reactor.run, daemon=True)
    io.start()
    handed = []
    for _ in range(n + 50):
        t0 = time.perf_counter()
        fut = ResultFuture()
        outbox.append(fut)
        reactor.wake()
        fut.result(10)
        handed.append((time.perf_counter() - t0) * 1000)
    reactor.stop()
    io.join(10)
    reactor.close()
    sock.send(b"stop")
    sock.recv()
    sock.close(linger=0)
    ctx.term()
    proc.join(10)
    return bare[50:], handed[50:]


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100)[q - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--noop", type=int, default=40_000, help="no-op tasks per run (all clients together; 0: none)")
    ap.add_argument("--spin", type=int, default=4_000, help="1 ms CPU tasks per run (all clients together; 0: none)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--clients", default="1,4,16", help="client process counts, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256, help="tasks per submit_batch request, embedded and client alike (0: all at once)")
    ap.add_argument("--rtt", type=int, default=2000, help="single-task round trips for the latency figures")
    ap.add_argument("--one-batch", default="1000,2000,4000,8000",
                    help="sizes for 'one Client, one request of n no-op tasks' (empty: skip)")
    ap.add_argument("--quick", action="store_true", help="4k / 400 tasks, 1 run, 500 round trips, one-batch sizes up to 4000")
    a = ap.parse_args()
    if a.quick:
        a.noop, a.spin, a.repeats, a.rtt, a.one_batch = 4_000, 400, 1, 500, "1000,2000,4000"
    if a.noop < 0 or a.spin < 0 or a.noop + a.spin == 0:
        ap.error("--noop and --spin: 0 or more each, and one of them above 0")
    clients = counts(a.clients)
    if clients is None:
        ap.error(f"--clients {a.clients!r}: client counts of 1 or more, comma-separated (e.g. 1,4,16)")
    sizes = counts(a.one_batch) if a.one_batch else []
    if sizes is None:
        ap.error(f"--one-batch {a.one_batch!r}: task counts of 1 or more, comma-separated (e.g. 1000,2000), or empty to skip")
    if a.workers < 1 or a.repeats < 1:
        ap.error("--workers and --repeats: 1 or more")
    if a.batch < 0:
        ap.error("--batch: 0 (all at once) or more")
    if a.rtt < 2:
        ap.error("--rtt: 2 or more round trips (a p50 and a p99 need them)")
    from qworker import Client, Producer

    workloads = {name: w for name, w in {"no-op": ("noop", a.noop), "1 ms CPU": ("spin", a.spin)}.items() if w[1] > 0}
    print(f"service benchmark: {a.noop:,} no-op and {a.spin:,} spin(1 ms) tasks per run in requests of {a.batch or 'all'}, {a.workers} workers, "
          f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f} at start", flush=True)

    rates: dict[str, dict[str, float]] = {}
    cpu: dict[str, dict[str, tuple[float, float, float]]] = {}  # us per task: (producer or service process, clients, pool)

    entries: dict[str, list[int]] = {}  # the result cache's entries at the start of each run, per system

    def measure(system: str, fn: Any, cache_entries: Any) -> None:
        for name, (reward, n) in workloads.items():
            runs = []
            for _ in range(a.repeats):
                entries.setdefault(system, []).append(cache_entries())
                runs.append(fn(reward, n))
            rate = statistics.median(r[0] for r in runs)
            rates.setdefault(system, {})[name] = rate
            producer_us, clients_us, pool_us = (statistics.median(r[i] for r in runs) / n * 1e6 for i in (2, 3, 4))
            cpu.setdefault(system, {})[name] = (producer_us, clients_us, pool_us)
            held = entries[system][-a.repeats:]
            print(f"  {system:<20} {name:<9} {rate:>9,.0f} tasks/s   runs: {', '.join(f'{r[0]:,.0f}' for r in runs)}"
                  f"   median wall per caller: {', '.join(f'{r[1]:.2f} s' for r in runs)}"
                  f"   cache entries at start: {', '.join(f'{e:,}' for e in held)}", flush=True)

    with Producer(local_workers=a.workers) as p:
        p.wait_for_workers(a.workers, timeout=60)
        p.map("noop", [{"warm": i} for i in range(200)])
        measure("embedded Producer", lambda reward, n: embedded_run(p, reward, n, a.batch),
                lambda: p.status()["producer"]["cache_entries"])
        rtt_embedded = round_trips_ms(p.submit, a.rtt, "embedded")
        one_embedded = {n: embedded_rate(p, "noop", n, 0) for n in sizes}

    echo_bare, echo_handed = echo_round_trips_ms(a.rtt)
    rtt_client: list[float] = []
    one_client: dict[int, float] = {}
    for row, n_clients in enumerate(clients):
        # A fresh service per client count, warmed up as the embedded producer was: every row starts from the same
        # cache state (a producer's cost per task grows with its result cache's size), whatever ran before it.
        port = free_port()
        service = serve(port, a.workers)
        endpoint = f"tcp://127.0.0.1:{port}"
        try:
            with Client(endpoint) as c:  # the service's workers are up once a task comes back
                c.map("noop", [{"warm": i} for i in range(200)], timeout=120)
                procs = Clients(endpoint, n_clients, a.batch, service.pid)
                try:
                    measure(f"Client x {n_clients}", procs.run, lambda: c.status()["producer"]["cache_entries"])  # noqa: B023
                finally:
                    procs.close()
                if row == 0:  # after the throughput runs, as on the embedded producer
                    rtt_client = round_trips_ms(c.submit, a.rtt, "client")
                    one_client = {n: client_one_batch(c, n) for n in sizes}
        finally:
            stop(service)

    base = rates["embedded Producer"]
    names = list(workloads)
    print(f"\nthroughput, tasks/s (median of {a.repeats}), {a.workers} workers; client runs: one 'qworker serve' + N client processes, "
          f"each submitting its share in requests of {a.batch or 'all'}")
    rows = []
    for system, by in rates.items():
        rows.append([system, *[f"{by[k]:,.0f}" for k in names], *[f"{by[k] / base[k]:.2f}x" for k in names],
                     *[f"{(1 / by[k] - 1 / base[k]) * 1e6:+,.1f}" for k in names],
                     f"{min(entries[system]):,}-{max(entries[system]):,}"])
    print(table(["system", *[f"{k} tasks/s" for k in names], *[f"client / embedded, {k}" for k in names],
                 *[f"added per task us, {k}" for k in names], "cache entries at a run's start, min-max"], rows))

    ncpu = os.cpu_count() or 1
    print(f"\nCPU per task, us (median): the producer's process (embedded: the caller's; client runs: 'qworker serve'), "
          f"its local pool (supervisor and workers), all client processes together, and all of them; the most those "
          f"processes could do on {ncpu} CPUs with that CPU per task ({ncpu} / all), and the rate measured against it")
    print(table(["system", "workload", "producer process", "pool", "clients", "all", f"CPU ceiling on {ncpu} CPUs, tasks/s",
                 "measured / ceiling"], [
        [system, k, f"{by[k][0]:,.1f}", f"{by[k][2]:,.1f}", f"{by[k][1]:,.1f}" if system != "embedded Producer" else "-",
         f"{sum(by[k]):,.1f}", f"{ncpu / sum(by[k]) * 1e6:,.0f}", f"{rates[system][k] / (ncpu / sum(by[k]) * 1e6):.2f}"]
        for system, by in cpu.items() for k in names]))

    print(f"\nsingle-task round trip on an idle producer / service (no-op, {a.rtt} one at a time)")
    e50, c50, e99, c99 = statistics.median(rtt_embedded), statistics.median(rtt_client), pct(rtt_embedded, 99), pct(rtt_client, 99)
    print(table(["measure", "embedded Producer", "Client", "client / embedded", "added"], [
        ["round trip p50", f"{e50:.3f} ms", f"{c50:.3f} ms", f"{c50 / e50:.2f}x", f"{c50 - e50:+.3f} ms"],
        ["round trip p99", f"{e99:.3f} ms", f"{c99:.3f} ms", f"{c99 / e99:.2f}x", f"{c99 - e99:+.3f} ms"],
    ]))
    b50, h50 = statistics.median(echo_bare), statistics.median(echo_handed)
    print(f"\nthe Client's round trip, hop by hop (p50 of {a.rtt} each, one at a time, this run): a 64-byte echo to another process "
          "over loopback TCP, bare and through an I/O thread as a Client sends")
    print(table(["hop", "p50", "p99"], [
        ["embedded Producer round trip (as above)", f"{e50:.3f} ms", f"{e99:.3f} ms"],
        ["bare DEALER/ROUTER echo over loopback TCP", f"{b50:.3f} ms", f"{pct(echo_bare, 99):.3f} ms"],
        ["the same echo through an I/O thread (Client's hand-offs)", f"{h50:.3f} ms", f"{pct(echo_handed, 99):.3f} ms"],
        ["embedded + echo through an I/O thread", f"{e50 + h50:.3f} ms", "-"],
        ["Client round trip (as above)", f"{c50:.3f} ms", f"{c99:.3f} ms"],
        ["left to the service's own work: Client - (embedded + echo through an I/O thread)", f"{c50 - e50 - h50:+.3f} ms", "-"],
    ]))
    if sizes:
        print("\none caller, one submit_batch of n no-op tasks, then gather (1 run each): tasks/s")
        print(table(["n", "embedded Producer", "Client", "client / embedded", "Client us per task"], [
            [f"{n:,}", f"{one_embedded[n]:,.0f}", f"{one_client[n]:,.0f}", f"{one_client[n] / one_embedded[n]:.2f}x",
             f"{1e6 / one_client[n]:,.0f}"] for n in sizes]))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    from _common import recorded

    with recorded("service"):  # the printed tables also go to docs/bench/service.md
        main()
