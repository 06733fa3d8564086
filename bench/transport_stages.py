"""Where a no-op task's time goes in the producer, stage by stage, in microseconds of CPU per task.

The producer's code of the no-op path runs in one process, without sockets or
threads, so that each stage can be timed alone (thread CPU time, which other
processes on a loaded machine disturb less than wall time):

  1 submit            Producer._submit_chunk: encode and hash each payload, register it (future, task)
  2 queue             Scheduler.add: the dispatcher takes the submitted tasks into its queue
  3 dispatch          Scheduler.dispatch: take tasks for two workers' credit, lease them, encode TASKS
  4 decode RESULTS    the producer's socket decoder on the workers' RESULTS messages
  5 handle RESULTS    Scheduler.handle: match results to leases, resolve futures, cache the scores
  6 gather            gather(): read every future's Result

and, for reference, what each of the two simulated workers spends per task:

  w1 decode TASKS     the worker's socket decoder on the TASKS messages
  w2 run and report   call the no-op reward, make its TaskResult, encode RESULTS

What this leaves out, and ``bench/transport.py`` measures in a real run (its
"producer process CPU" rows): the sockets' system calls, the reactor's turns,
the handoffs of the interpreter lock between the caller's and the dispatcher's
threads, and the garbage collector (the harness runs with it paused).

    python bench/transport_stages.py                          # this tree
    python bench/transport_stages.py --against /tmp/main-copy # alternated with another checkout, and the ratios

Each figure is the minimum over ``--runs`` runs (the least disturbed one).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import stages_alternated, stages_table  # noqa: E402

STAGES = ["1 submit", "2 queue", "3 dispatch", "4 decode RESULTS", "5 handle RESULTS", "6 gather"]
WORKER_STAGES = ["w1 decode TASKS", "w2 run and report"]
MAX_BYTES = 64 << 20


def one_run(n: int, rep: int) -> dict[str, float]:
    """Seconds of thread CPU per stage for ``n`` no-op tasks (fresh payloads: ``rep`` is in each)."""
    from qworker.cache.hashing import params_fingerprint
    from qworker.cache.identity import TaskIdentity
    from qworker.cache.results import ResultCache
    from qworker.engine.pending import PendingTable
    from qworker.engine.producer import Producer
    from qworker.engine.result import gather
    from qworker.engine.scheduler import Scheduler
    from qworker.host.worker import call_reward
    from qworker.registry.fingerprint import reward_version
    from qworker.registry.registry import resolve
    from qworker.rewards import diagnostic  # noqa: F401  (registers the no-op reward)
    from qworker.transport import wire

    spent: dict[str, float] = dict.fromkeys(STAGES + WORKER_STAGES, 0.0)
    clock = time.thread_time
    frames: list[tuple[bytes, list[bytes]]] = []

    def send(peer: bytes, msg: wire.Message) -> bool:
        frames.append((peer, wire.encode(msg)))
        return True

    table_ = PendingTable(cache=ResultCache(max_entries=1_000_000, ttl_s=None, path=None), fallback_score=0.0)
    s = Scheduler(send=send, table=table_, max_attempts=3, heartbeat_timeout_s=3.0, max_message_bytes=MAX_BYTES)
    handed: list[list[Any]] = []

    class _Options:
        max_payload_bytes = 1 << 20
        cache_read = True

    class _Dispatcher:  # the submitting thread hands its tasks on here instead of to a dispatcher thread
        submit = staticmethod(handed.append)

    producer = Producer.__new__(Producer)  # the submission path of a real Producer, without its thread, socket or pool
    producer.options, producer._table, producer.cache, producer.fallback_score = _Options(), table_, table_.cache, 0.0  # type: ignore[assignment]
    producer._dispatcher = _Dispatcher  # type: ignore[assignment]
    spec = resolve("noop")
    version = reward_version(spec.fn, spec.version)  # as the workers report it: the keys are the cacheable ones
    identity = TaskIdentity("noop", params_fingerprint({}), version)
    payloads = [{"i": i, "rep": rep} for i in range(n)]
    gc.disable()
    try:
        t = clock()
        futures = []
        for i in range(0, n, 1024):
            futures += producer._submit_chunk("noop", {}, identity, payloads[i : i + 1024], None, None, 0)
        spent["1 submit"] = clock() - t
        t = clock()
        for batch in handed:
            s.add(batch)
        spent["2 queue"] = clock() - t
        workers = {"a": [0, 0], "b": [0, 0]}  # granted, received
        for wid in workers:
            s.handle(wid.encode(), wire.Ready(*wire.STAMP, wid, "pool", 1, "h", 0, 0, 0, [], []), 0.0)
        while len(table_):
            for wid, credit in workers.items():
                credit[0] += 512
                s.fleet.workers[wid].granted = credit[0]
            frames.clear()
            t = clock()
            s.dispatch(0.0)
            spent["3 dispatch"] += clock() - t
            for peer, (kind, body) in frames:
                credit = workers[peer.decode()]
                t = clock()
                msg = wire.WORKER.decode(kind, body, max_bytes=MAX_BYTES)
                t1 = clock()
                assert isinstance(msg, wire.Tasks)
                out = []
                for task in msg.tasks:
                    score, extra, error, outcome = call_reward(spec, task.payload, task.params, task.meta)
                    out.append(wire.TaskResult(task.key, score, extra, error, 1e-6, outcome, version))
                credit[1] += len(msg.tasks)
                rkind, rbody = wire.encode(wire.Results(credit[0], credit[1], out))
                t2 = clock()
                reply = wire.PRODUCER.decode(rkind, rbody, max_bytes=MAX_BYTES)
                t3 = clock()
                s.handle(peer, reply, 0.0)
                t4 = clock()
                spent["w1 decode TASKS"] += t1 - t
                spent["w2 run and report"] += t2 - t1
                spent["4 decode RESULTS"] += t3 - t2
                spent["5 handle RESULTS"] += t4 - t3
        t = clock()
        results = gather(futures)
        spent["6 gather"] = clock() - t
    finally:
        gc.enable()
    if len(results) != n or not all(r.ok for r in results):
        raise SystemExit("the harness lost or failed tasks: its stages do not match the producer's any more")
    return spent


def measure(n: int, runs: int) -> dict[str, float]:
    """Microseconds per task per stage: the minimum over ``runs``."""
    per_run = [one_run(n, rep) for rep in range(runs)]
    return {k: min(r[k] for r in per_run) / n * 1e6 for k in STAGES + WORKER_STAGES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=9, help="runs per tree (per round with --against); the minimum is kept")
    ap.add_argument("--against", metavar="TREE", help="another checkout of qworker, measured alternately (3 rounds)")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one tree's figures, for --against
    args = ap.parse_args()
    if args.json:
        print(json.dumps(measure(args.tasks, args.runs)))
        return
    got = stages_alternated(__file__, ["--tasks", str(args.tasks), "--runs", str(args.runs)], args.against)
    print(f"producer stages of a no-op task, us of thread CPU per task (min of {args.runs} runs x {len(got['this tree'])} rounds, "
          f"{args.tasks} tasks, one process, no sockets, GC paused)")
    rows = [(k, None) for k in STAGES] + [("producer total", STAGES)] + [(k, None) for k in WORKER_STAGES]
    print(stages_table(got, rows, against=os.path.abspath(args.against) if args.against else ""))


if __name__ == "__main__":
    main()
