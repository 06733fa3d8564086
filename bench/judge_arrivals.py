"""How a judge client's requests arrive at a server that ends its batches together (no vLLM needed, seconds a run).

A server that batches (vLLM, SGLang) ends the sequences it started together
together, and each client answers with new requests.  Where the server's HTTP
front end shares a core with its model, each arrival that finds the front end
asleep wakes it and takes that core from the model: ``bench/judge.py --only
VLLM`` prints the front end's context switches per task, and its CPU per task
follows them.  This benchmark measures the cause without a model: a stand-in
server in a process of its own, on the first core (``--batch`` sequences
running, all admitted in one step ending together ``--steps`` steps of
``--step-ms`` later, the rest queued), records when each request's body has
arrived; the clients run on the other cores.

Printed per run: tasks/s, **arrival groups per task** (arrivals more than
``GAP_S`` apart start a new group: an upper bound on the wakes they cost a
front end that reads whatever has arrived when it wakes) and how long after
the batch end before it each request arrived (p10/p50/p90, ms), and the
**sequences per batch end** (16 when the batches stay in step: every answered
request was replaced before the next step, so a batch's successors start
together and end together; fewer when the server's queue ran short at an end,
so the next batch started in pieces and its ends, and the arrivals they cause,
spread over steps), over the middle three fifths of the arrivals (no start,
no tail).  Systems, in
interleaved rounds: ``sem(K)``, an aiohttp client holding K requests in flight
(it reads every ready answer in one loop turn, then sends their successors),
and ``qworker`` (``llm_judge`` on 4 workers with ``max_concurrency`` ``--hint``,
the same depth in every round); ``--before TREE`` also runs the qworker of
another checkout, in the same rounds.

Measured on 2 cores (server on one, clients on the other), 16 x 16 steps of
5 ms: aiohttp sem(64) 0.07-0.10 groups per task and 16.2 sequences per batch
end, sem(32) 0.14 and 8.1; qworker at b9a422d 0.43-0.89 and 3.0-4.0 (with
``--hint`` 64 or 128); urllib3 threads in one process, 64 in a closed loop,
0.06-0.07 (in 4 processes of 16, 0.21-0.27); and aiohttp sem(64) opening its
64 places one every 2 ms, not at once, 0.50 and 2.0 (every 5 ms: 1.00 and 1.0),
with 48 waiting at each end as at once.  Sequences of one length keep the phases
their start gave them: a client that starts gradually (a limiter's ramp) sends
its successors spread over the steps for the whole run, however fast it sends.
Run it under the benchmark lock; it writes nothing under ``docs/bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from _common import free_port, table

GAP_S = 0.0005  # arrivals further apart than this are separate groups
RESPONSE = json.dumps({"id": "x", "object": "chat.completion", "model": "judge", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "5"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 16, "total_tokens": 26}}).encode()


class BatchServer:
    """The stand-in server: ``batch`` sequences at most, each finishing ``steps`` steps of ``step_s`` after the step
    that admitted it (so sequences admitted together end together); ``GET /dump`` answers (and forgets) the arrival
    times of the requests' bodies and the times batches ended (monotonic s, this machine's clock)."""

    def __init__(self, batch: int, steps: int, step_s: float) -> None:
        self.batch, self.steps, self.step_s = batch, steps, step_s
        self.arrivals: list[float] = []
        self.ends: list[float] = []
        self.queued: list[int] = []  # requests waiting at each batch end
        self.waiting: list[asyncio.Future] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                return
            if head.startswith(b"GET /dump"):
                out = json.dumps([self.arrivals, self.ends, self.queued]).encode()
                self.arrivals, self.ends, self.queued = [], [], []
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(out), out))
                continue
            size = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(size)
            self.arrivals.append(time.monotonic())
            done = asyncio.get_running_loop().create_future()
            self.waiting.append(done)
            await done
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(RESPONSE), RESPONSE))

    async def engine(self) -> None:
        running: list[tuple[int, asyncio.Future]] = []  # (the step it ends at, its request)
        step = 0
        while True:
            await asyncio.sleep(self.step_s)
            step += 1
            ended = [f for at, f in running if at <= step]
            if ended:
                running = [(at, f) for at, f in running if at > step]
                self.ends.append(time.monotonic())
                self.queued.append(len(self.waiting))
                for f in ended:
                    f.set_result(None)
            while len(running) < self.batch and self.waiting:
                running.append((step + self.steps, self.waiting.pop(0)))

    async def serve(self, port: int) -> None:
        server = await asyncio.start_server(self.handle, "127.0.0.1", port)
        asyncio.get_running_loop().create_task(self.engine())
        await server.serve_forever()


def arrival_stats(arrivals: list[float], ends: list[float], queued: list[int]) -> dict[str, float]:
    """Of the middle three fifths of the arrivals: groups per task, the delay after the preceding batch end
    (p10/p50/p90, ms), sequences per batch end, and the median of the requests waiting at those ends."""
    got = sorted(arrivals)
    n = len(got)
    mid = got[n // 5: n - n // 5]
    groups = 1 + sum(1 for a, b in zip(mid, mid[1:], strict=False) if b - a > GAP_S)
    after = [a - ends[i] for a in mid if (i := bisect.bisect_right(ends, a) - 1) >= 0]
    q = statistics.quantiles(after, n=10) if len(after) > 1 else [float("nan")] * 9
    in_window = [e for e in ends if mid and mid[0] <= e <= mid[-1]]
    waiting = [w for e, w in zip(ends, queued, strict=True) if mid and mid[0] <= e <= mid[-1]]
    return {"groups": groups / max(1, len(mid)), "p10": 1000 * q[0], "p50": 1000 * q[4], "p90": 1000 * q[8],
            "per_end": len(mid) / max(1, len(in_window)), "queued": statistics.median(waiting) if waiting else float("nan")}


def payload(tag: str, i: int) -> dict:
    return {"prompt": f"question {tag} {i:05d}: what is {i % 97} + {i % 13}?", "response": f"answer {i % 110}",
            "ground_truth": f"{i % 97 + i % 13}"}


def run_qworker(url: str, n: int, tag: str, hint: int) -> float:
    """``n`` judge tasks through a producer with 4 local workers; returns the seconds from submission to the last."""
    from qworker import Producer

    ep = {"url": url, **({"max_concurrency": hint} if hint else {})}
    cfg = {"rewards": {"llm_judge": {"model": "judge", "endpoints": [ep], "score_pattern": r"(\d)", "score_max": 9,
                                     "timeout_s": 60}}}
    with Producer(local_workers=4, config=cfg) as p:
        p.wait_for_workers(4, timeout=60)
        t0 = time.monotonic()
        results = p.gather(p.submit_batch("llm_judge", [payload(tag, i) for i in range(n)]), timeout=600)
        elapsed = time.monotonic() - t0
    failed = [r for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} tasks failed, the first: {failed[0].error}")
    return elapsed


def run_semaphore(url: str, n: int, tag: str, k: int) -> float:
    from _judge_vllm import _semaphore

    from qworker.judge.prompt import DEFAULT_TEMPLATE, render

    bodies = [{"model": "judge", "messages": [{"role": "user", "content": render(DEFAULT_TEMPLATE, payload(tag, i), "")}]}
              for i in range(n)]
    t0 = time.monotonic()
    if asyncio.run(_semaphore(url, bodies, k, [])):
        raise RuntimeError("some requests failed")
    return time.monotonic() - t0


def dump(port: int) -> tuple[list[float], list[float], list[int]]:
    """The stand-in's arrivals, batch ends and the requests waiting at each end, since the last dump."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/dump", timeout=5) as r:  # noqa: S310 (loopback)
        arrivals, ends, queued = json.loads(r.read())
    return arrivals, ends, queued


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--hint", type=int, default=64, help="qworker's max_concurrency (0: none, the limiter finds it)")
    ap.add_argument("--sem", type=int, action="append", default=[], help="aiohttp semaphores (default: 64)")
    ap.add_argument("--before", default="", metavar="TREE", help="also run the qworker of this checkout")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--step-ms", type=float, default=5.0)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus, client_cpus = ({cpus[0]}, set(cpus[1:])) if len(cpus) > 1 else (set(cpus), set(cpus))
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(args.batch), str(args.steps), str(args.step_ms)],
                              preexec_fn=lambda: os.sched_setaffinity(0, server_cpus))  # noqa: PLW1509 (no threads yet)
    os.sched_setaffinity(0, client_cpus)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    import qworker

    here = Path(qworker.__file__).resolve().parents[1].name
    if args.before:
        args.before = os.path.abspath(args.before)  # the child runs in that tree: a relative path would resolve again there
        if Path(args.before).name == here:
            sys.exit(f"judge_arrivals: --before {args.before} and this tree are both named {here!r}: the rows could not "
                     "be told apart; give a tree of another name")
    systems = [*(f"sem({k})" for k in args.sem or [64]), *([f"qworker [{Path(args.before).name}]"] if args.before else []),
               f"qworker [{here}]"]
    rows: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    print(f"judge arrivals: a stand-in server ending batches of {args.batch} every {args.steps} x {args.step_ms:g} ms "
          f"on cores {sorted(server_cpus)}, clients on {sorted(client_cpus)}; {args.tasks} tasks a run, "
          f"qworker's max_concurrency {args.hint or 'none'}", flush=True)
    try:
        for _ in range(100):
            try:
                dump(port)
                break
            except OSError:
                time.sleep(0.05)
        for r in range(args.runs):
            for system in systems[r % len(systems):] + systems[:r % len(systems)]:
                tag = f"r{r}{systems.index(system)}"
                dump(port)
                if system.startswith("sem"):
                    elapsed = run_semaphore(url, args.tasks, tag, int(system[4:-1]))
                elif system.endswith(f"[{here}]"):
                    elapsed = run_qworker(url, args.tasks, tag, args.hint)
                else:
                    out = subprocess.run([sys.executable, __file__, "--client", url, str(args.tasks), tag, str(args.hint)],
                                         env={**os.environ, "PYTHONPATH": args.before}, capture_output=True, text=True, timeout=600,
                                         cwd=args.before)  # its workers import that tree's qworker too
                    if out.returncode:
                        raise RuntimeError(f"qworker from {args.before} failed ({out.returncode}): {out.stderr[-2000:]}")
                    elapsed = float(out.stdout.strip().splitlines()[-1])
                got = {"rate": args.tasks / elapsed, **arrival_stats(*dump(port))}
                rows[system].append(got)
                print(f"  round {r + 1} {system:<22} {got['rate']:6.1f} tasks/s  arrival groups/task {got['groups']:4.2f}  "
                      f"after the batch end ms p10 {got['p10']:4.1f} p50 {got['p50']:4.1f} p90 {got['p90']:5.1f}  "
                      f"sequences per batch end {got['per_end']:4.1f}, waiting at it {got['queued']:4.1f}", flush=True)
    finally:
        server.kill()
        server.wait()
    print(f"\nmedians of {args.runs} interleaved rounds")
    print(table(["system", "tasks/s", "arrival groups/task", "p10 ms", "p50 ms", "p90 ms"],
                [[s, *(f"{statistics.median(x[k] for x in rows[s]):.{2 if k == 'groups' else 1}f}"
                       for k in ("rate", "groups", "p10", "p50", "p90"))] for s in systems if rows[s]]))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:  # the stand-in server: PORT BATCH STEPS STEP_MS
        port_, batch_, steps_, step_ms_ = sys.argv[2:6]
        asyncio.run(BatchServer(int(batch_), int(steps_), float(step_ms_) / 1000).serve(int(port_)))
    elif sys.argv[1:2] == ["--client"]:  # another checkout's qworker: URL N TAG HINT; prints the seconds taken
        print(run_qworker(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])))
    else:
        main()
