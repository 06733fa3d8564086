"""Where a no-op task's time goes in a reward service and its Client, beyond what a producer does, in us of CPU per task.

The service's and the client's own code of the no-op path runs in one process,
without sockets, threads or workers, so that each stage can be timed alone
(thread CPU time, which other processes on a loaded machine disturb less than
wall time).  What the producer itself does for a task (hash, register,
dispatch, handle the workers' results) is ``bench/transport_stages.py``'s; a
reward service adds, on the producer's dispatcher thread:

  s1 take requests      RewardService._on_submit: who asked for each future, one callback per future
                        (the producer's submit_batch is a stub that hands out fresh futures)
  s2 resolve, followed  resolve_many on the futures of a worker's message (64 results), each running the
                        service's callback; "s2 resolve, plain" is the same on futures nobody follows, as
                        an embedded producer's are: the difference is what following costs
  s3 send results       RewardService._flush: each result into its client's rows, numbered, kept in the
                        ledger and encoded as Resolved messages (the socket's send is a stub)

and a Client, in its process:

  c1 encode             each payload's canonical encoding (as a producer hashes it)
  c2 register           the client's futures for a request (FutureTable)
  c3 decode Resolved    the client socket's decoder on the service's Resolved messages
  c4 resolve            Client._resolve: each group's request, then its futures set in one pass
  c5 gather             gather(): read every future's Result

What this leaves out, and ``bench/service.py`` measures in a real run (its CPU per task rows): the
sockets' system calls, the reactors' turns, the hand-offs between a client's threads, and the garbage
collector (paused here).

    python bench/service_stages.py                          # this tree
    python bench/service_stages.py --against /tmp/main-copy # alternated with another checkout, and the ratios
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from collections import deque
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import stages_alternated, stages_table  # noqa: E402

SERVICE = ["s1 take requests", "s2 resolve, followed", "s3 send results"]
CLIENT = ["c1 encode", "c2 register", "c3 decode Resolved", "c4 resolve", "c5 gather"]
REFERENCE = ["s2 resolve, plain"]
PER_MESSAGE = 64  # results per worker message
FLUSH_EVERY_MESSAGES = 8  # the service flushes once per this many worker messages (a few per reactor turn)


def _service(futures: deque) -> tuple[Any, list]:
    """A RewardService without its socket, thread or producer: what its handlers touch, and a list of what it sends."""
    from qworker.service.ledger import Ledger
    from qworker.service.server import RewardService

    class _Reactor:
        def wake(self) -> None:
            pass

    class _Dispatcher:
        workers_ready = 2

        def dispatch_submitted(self) -> None:
            pass

    class _Producer:
        _dispatcher = _Dispatcher

        def submit_batch(self, reward: str, payloads: list, **kw: Any) -> list:
            return futures.popleft()

    s = RewardService.__new__(RewardService)
    s.producer = _Producer()  # type: ignore[assignment]
    s.instance, s.started, s.no_workers_grace_s, s.requests, s.clients = "bench", time.monotonic(), 10.0, 0, set()
    s.ledger = Ledger(instance="bench")
    s._outbox, s._owners, s._waiting, s._oldest, s._in_flight, s._to_answer = deque(), {}, {}, None, {}, []
    s._mark = 1
    s._dispatcher, s._reactor, s._dispatcher_ident = _Dispatcher(), _Reactor(), threading.get_ident()  # type: ignore[assignment]
    s._attached, s._stopped = True, False
    sent: list = []
    s._send_frames = lambda peer, frames: sent.append(frames) or True  # type: ignore[method-assign]
    return s, sent


def one_run(requests: int, size: int, clients: int, rep: int) -> dict[str, float]:
    """Seconds of thread CPU per stage for ``requests`` requests of ``size`` no-op tasks from ``clients`` clients."""
    from qworker.engine.futures import FutureTable
    from qworker.engine.result import Result, ResultFuture, gather, resolve_many
    from qworker.service import client as cl
    from qworker.transport import client_wire as cw
    from qworker.transport import wire

    clock = time.thread_time
    spent = dict.fromkeys(SERVICE + CLIENT + REFERENCE, 0.0)
    n = requests * size

    def result() -> Result:  # what a worker's no-op result becomes at the producer
        return Result(score=1.0, attempts=1, worker="local-12345-1/w0.1", latency_s=0.001, compute_s=1.2e-6, key="ab" * 16)

    gc.disable()
    try:
        # the client: encode and register each request
        c = cl.Client.__new__(cl.Client)
        c._requests, c._table = {}, FutureTable(fallback_score=0.0)
        batches = []
        for r in range(requests):
            payloads = [{"i": i, "request": r, "rep": rep} for i in range(size)]
            t = clock()
            encoded, indexes, _ = cl._encode(payloads)
            t1 = clock()
            batch = c._table.register(size)
            handed = c._table.hand_out(batch)
            spent["c1 encode"] += t1 - t
            spent["c2 register"] += clock() - t1
            req = c._requests[r + 1] = cl._Request(r + 1, "noop", None, encoded, None, batch, indexes, time.monotonic())
            req.answered = cw.Accepted(r + 1, "bench", None, "")  # taken: its Accepted comes before its results
            batches.append(handed)
        # the service: take the requests, resolve their futures message by message, send the results
        producer_futures = [[ResultFuture() for _ in range(size)] for _ in range(requests)]
        s, sent = _service(deque(producer_futures))
        t = clock()
        for r in range(requests):
            s._on_submit(b"client-%d" % (r % clients), cw.Submit(*wire.STAMP, r + 1, "noop", None, [], None))
        spent["s1 take requests"] = clock() - t
        s._flush(time.monotonic())  # the Accepteds
        sent.clear()
        followed = [f for fs in producer_futures for f in fs]
        for k, i in enumerate(range(0, n, PER_MESSAGE)):
            pairs = [(f, result()) for f in followed[i : i + PER_MESSAGE]]
            t = clock()
            resolve_many(pairs)
            spent["s2 resolve, followed"] += clock() - t
            if k % FLUSH_EVERY_MESSAGES == FLUSH_EVERY_MESSAGES - 1:
                t = clock()
                s._flush(time.monotonic() + 1.0)
                spent["s3 send results"] += clock() - t
        t = clock()
        s._flush(time.monotonic() + 1.0, everything=True)
        spent["s3 send results"] += clock() - t
        plain = [ResultFuture() for _ in range(n)]
        for i in range(0, n, PER_MESSAGE):
            pairs = [(f, result()) for f in plain[i : i + PER_MESSAGE]]
            t = clock()
            resolve_many(pairs)
            spent["s2 resolve, plain"] += clock() - t
        # the client: decode and resolve what the service sent (one client takes every message here)
        for kind, body in sent:
            t = clock()
            msg = cw.CLIENT.decode(kind, body, max_bytes=1 << 30)
            t1 = clock()
            c._resolve(msg.requests)  # type: ignore[union-attr]
            spent["c3 decode Resolved"] += t1 - t
            spent["c4 resolve"] += clock() - t1
        t = clock()
        results = [r for handed in batches for r in gather(handed)]
        spent["c5 gather"] = clock() - t
    finally:
        gc.enable()
    if len(results) != n or not all(r.ok for r in results):
        raise SystemExit("the harness lost or failed tasks: its stages do not match the service's any more")
    return spent


def measure(requests: int, size: int, clients: int, runs: int) -> dict[str, float]:
    """Microseconds per task per stage: the minimum over ``runs``."""
    per_run = [one_run(requests, size, clients, rep) for rep in range(runs)]
    return {k: min(r[k] for r in per_run) / (requests * size) * 1e6 for k in SERVICE + CLIENT + REFERENCE}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=80)
    ap.add_argument("--size", type=int, default=256, help="tasks per request")
    ap.add_argument("--clients", type=int, default=4, help="clients the requests come from, in turn")
    ap.add_argument("--runs", type=int, default=9, help="runs per tree (per round with --against); the minimum is kept")
    ap.add_argument("--against", metavar="TREE", help="another checkout of qworker, measured alternately (3 rounds)")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one tree's figures, for --against
    a = ap.parse_args()
    if a.json:
        print(json.dumps(measure(a.requests, a.size, a.clients, a.runs)))
        return
    got = stages_alternated(__file__, ["--requests", str(a.requests), "--size", str(a.size), "--clients", str(a.clients),
                                       "--runs", str(a.runs)], a.against)
    print(f"reward service and Client stages of a no-op task, us of thread CPU per task (min of {a.runs} runs x "
          f"{len(got['this tree'])} rounds, {a.requests} requests of {a.size} from {a.clients} clients, one process, no sockets, "
          "GC paused)")
    rows = [(k, None) for k in SERVICE] + [("service total", SERVICE)] + [(k, None) for k in CLIENT] + [("client total", CLIENT)]
    print(stages_table(got, rows + [(k, None) for k in REFERENCE], against=os.path.abspath(a.against) if a.against else ""))


if __name__ == "__main__":
    main()
