"""Chaos scenarios: real processes, real sockets, one fault injected each.

Shared by ``tests/integration/test_chaos.py`` (small sizes, with assertions) and
``bench/chaos.py`` (larger sizes, one table).  Each scenario returns an
``Outcome`` with the figures issue 11 asks for:

* **lost**: tasks unresolved, or resolved with the wrong score (a reward whose
  score is its input index shows a missing or misplaced result);
* **paid twice**: judge calls answered twice for one prompt, counted by the judge
  itself (``RecordingJudge``); elsewhere, evaluations counted by ``count_eval``,
  which appends a line per call;
* **innocent failures**: tasks that failed but were not the faulty ones;
* **stall**: the longest gap with no result while work was pending.

The judge is the only thing mocked (``qworker.judge.mock.MockJudge``, in this
process, so it counts every call server-side).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import msgpack
import psutil
import zmq

from qworker import Producer, Result
from qworker._diskcache import COMMIT_WITHIN_S
from qworker.host.worker import FLUSH_AFTER_S
from qworker.judge.mock import MockJudge, _Handler
from qworker.transport import client_wire as cw
from qworker.transport import wire

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TEST_REWARDS = str(HERE / "rewards_for_tests.py")
BIN = Path(sys.executable).parent
HB = 0.5  # heartbeat_s in these scenarios: a worker silent for 3 of these (1.5 s) is lost

__all__ = ["Outcome", "RecordingJudge", "HB", "COMMIT_WITHIN_S"]


# -- measuring ----------------------------------------------------------------------------
@dataclass
class Outcome:
    scenario: str
    fault: str  # what was injected, one line
    tasks: int
    lost: int
    paid_twice: Optional[int]  # None: not measured (no judge and no counting reward)
    paid_twice_bound: int
    innocent: int
    stall_s: Optional[float]  # None: not applicable (the producer itself was killed)
    stall_bound_s: float
    note: str = ""
    detail: dict = field(default_factory=dict)
    clean: bool = True  # a scenario's own check (the key leak: found nowhere)

    @property
    def ok(self) -> bool:
        return (self.clean and self.lost == 0 and self.innocent == 0 and (self.paid_twice or 0) <= self.paid_twice_bound
                and (self.stall_s is None or self.stall_s <= self.stall_bound_s))


class Timeline:
    """When each future resolved; the longest gap with work pending."""

    def __init__(self, futures: list) -> None:
        self.t0 = time.monotonic()
        self.times: list[float] = []
        for f in futures:
            f.add_done_callback(lambda _f: self.times.append(time.monotonic()))

    def stall(self) -> float:
        ts = [self.t0, *sorted(self.times)]
        return max((b - a for a, b in zip(ts, ts[1:], strict=False)), default=0.0)


def collect(p: Any, futures: list, timeout: float) -> list[Optional[Result]]:
    """Every future's result, None for those unresolved after ``timeout`` seconds."""
    with contextlib.suppress(TimeoutError):
        p.gather(futures, timeout=timeout)
    return [f.result() if f.done() else None for f in futures]


def count_lines(path: os.PathLike | str) -> int:
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def evaluations(log: os.PathLike | str) -> Counter:
    """How many times ``count_eval`` ran each payload index."""
    try:
        with open(log) as f:
            return Counter(int(line.split()[0]) for line in f if line.strip())
    except FileNotFoundError:
        return Counter()


def paid_twice(counts: Counter) -> int:
    return sum(c - 1 for c in counts.values() if c > 1)


def unsent_bound(task_s: float) -> int:
    """Results a worker may have finished but not yet sent: it sends once ``FLUSH_AFTER_S`` has
    passed since the first unsent one (or its queue is empty)."""
    return math.ceil(FLUSH_AFTER_S / task_s) + 1


def rerun_bound(task_s: float, workers_lost: int = 1) -> int:
    """Evaluations a lost worker may take with it: the task it was running, and its unsent results."""
    return workers_lost * (1 + unsent_bound(task_s))


class RestartWatch:
    """Seconds from a fault until the producer's status shows a worker restarted (polled every 20 ms)."""

    def __init__(self, p: Producer) -> None:
        self.p, self.t0, self.took = p, time.monotonic(), None
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while time.monotonic() - self.t0 < 60:
            with contextlib.suppress(Exception):
                if any(w["restarts"] for pl in self.p.status()["pools"] for w in pl["workers"]):
                    self.took = time.monotonic() - self.t0
                    return
            time.sleep(0.02)

    def result(self) -> str:
        self._t.join(60)
        return "never" if self.took is None else f"{self.took:.2f} s"


def lost_of(results: list[Optional[Result]], expect_score: bool = True) -> int:
    """Unresolved, or resolved ok with a score other than the task's index (``count_eval``)."""
    return sum(r is None or (expect_score and r.ok and r.score != float(i)) for i, r in enumerate(results))


def wait_until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.01)


def console_script(name: str) -> str:
    return str(BIN / name)


def start_pool(endpoint: str, *args: str, stderr: Any = subprocess.DEVNULL, env: Optional[dict] = None) -> subprocess.Popen:
    return subprocess.Popen(
        [console_script("qworker-pool"), "--connect", endpoint, "--rewards", TEST_REWARDS, "--heartbeat", str(HB), *args],
        stdin=subprocess.DEVNULL, stderr=stderr, env=env,
    )


def stop_proc(proc: subprocess.Popen, timeout: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def local_worker_pids(p: Producer) -> list[int]:
    assert p._pool is not None
    return [c.pid for c in psutil.Process(p._pool.pid).children() if "qworker.host.worker" in " ".join(c.cmdline())]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a judge that counts every answer per prompt (and can echo the key) --------------------
class _RecordingHandler(_Handler):
    server: RecordingJudge

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            self._user = [m["content"] for m in json.loads(body)["messages"] if m.get("role") == "user"][-1]
        except (ValueError, KeyError, IndexError, TypeError):
            self._user = None
        rfile, self.rfile = self.rfile, io.BytesIO(body)  # the mock reads the body again
        try:
            super().do_POST()
        finally:
            self.rfile = rfile

    def _send(self, status: int, body: object, headers: Optional[dict] = None, content_type: str = "application/json") -> None:
        s = self.server
        user = getattr(self, "_user", None)
        if status == 200 and user is not None and isinstance(body, dict):
            with s.lock:
                s.answers.append((time.monotonic(), user))
            if s.echo_key:  # a provider quoting the request: the key raw, and JSON-escaped, in the reply
                key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                msg = body["choices"][0]["message"]
                msg["content"] = f"Judging with {key} (escaped: {key.replace('/', chr(92) + '/')}).\n{msg['content']}"
                body = json.dumps(body).replace("/", "\\/")  # and every '/' of the JSON text escaped, as PHP does
        elif status == 401 and s.echo_key:  # the key echoed in the error, JSON-escaped slashes and all
            key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            body = '{"error": {"message": "Incorrect API key provided: ' + key.replace("/", "\\/") + '", "type": "invalid_request_error"}}'
        super()._send(status, body, headers, content_type)


class RecordingJudge(MockJudge):
    """``MockJudge`` that records (monotonic time, prompt) of every 200 it sends;
    with ``echo_key``, it quotes the caller's key in 200 replies and in 401 bodies."""

    def __init__(self, *, echo_key: bool = False, **kw: Any) -> None:
        super().__init__(**kw)
        self.RequestHandlerClass = _RecordingHandler
        self.echo_key = echo_key
        self.answers: list[tuple[float, str]] = []

    def answered(self, since: float = 0.0, until: float = float("inf")) -> Counter:
        with self.lock:
            return Counter(u for t, u in self.answers if since <= t < until)

    def stop_soon(self) -> None:
        """Stop without waiting for handler threads that hang on purpose."""
        threading.Thread(target=self.stop, daemon=True).start()


def judge_config(*endpoints: dict, **params: Any) -> dict:
    return {"rewards": {"llm_judge": {"model": "m", "endpoints": list(endpoints), "timeout_s": 10, **params}}}


def judge_rows(n: int, tag: str) -> list[dict]:
    return [{"prompt": f"q-{tag}-{i}", "response": f"a{i}", "ground_truth": "g"} for i in range(n)]


# -- the scenarios ----------------------------------------------------------------------------
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


TRAINER = """
import json, sys
from qworker import Producer
url, db, n, tag, resolved = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
cfg = {"rewards": {"llm_judge": {"model": "m", "endpoints": [{"url": url}], "timeout_s": 10}}}
rows = [{"prompt": f"q-{tag}-{i}", "response": f"a{i}", "ground_truth": "g"} for i in range(n)]
with open(resolved, "a", buffering=1) as out, Producer(local_workers=2, config=cfg, cache_path=db) as p:
    futures = p.submit_batch("llm_judge", rows)
    for i, f in enumerate(futures):
        f.add_done_callback(lambda f, i=i: out.write(f"{i}\\n"))
    rs = p.gather(futures, timeout=600)
print(json.dumps({"n": len(rs), "ok": sum(r.ok for r in rs), "cached": sum(r.cached for r in rs),
                  "errors": [r.error for r in rs if not r.ok][:3]}), flush=True)
"""


def producer_sigkill_judge(tmp: Path, n: int, *, window_s: float = COMMIT_WITHIN_S, kill_at: float = 0.4) -> Outcome:
    """A trainer with the disk cache scoring ``n`` judge tasks is SIGKILLed at ``kill_at`` of
    the run, then rerun.  Calls paid twice are counted at the judge, per prompt."""
    script, db = tmp / "judge_trainer.py", tmp / "judge-cache.sqlite"
    script.write_text(TRAINER)
    judge = RecordingJudge(capacity=64, latency_s=0.02).start()
    try:
        def run(resolved: Path) -> subprocess.Popen:
            return subprocess.Popen([sys.executable, str(script), judge.url, str(db), str(n), "kill", str(resolved)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

        first = run(tmp / "resolved-1")
        wait_until(lambda: count_lines(tmp / "resolved-1") >= n * kill_at or first.poll() is not None, 300, "the first run to progress")
        killed_at = time.monotonic()
        first.kill()
        first.wait()
        resolved_first = count_lines(tmp / "resolved-1")
        time.sleep(1.0)  # the killed producer's workers die with it (PDEATHSIG); let their last calls land
        rerun_at = time.monotonic()
        second = run(tmp / "resolved-2")
        out, _ = second.communicate(timeout=600)
        summary = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"n": 0, "ok": 0, "cached": 0, "errors": ["no output"]}
        before, after = judge.answered(until=rerun_at), judge.answered(since=rerun_at)
        twice = set(before) & set(after)
        late = set(judge.answered(since=killed_at - window_s, until=killed_at))  # in the durability window
        posthumous = set(judge.answered(since=killed_at, until=rerun_at))  # by the dead producer's workers
    finally:
        judge.stop()
    return Outcome("SIGKILL the producer (disk cache, judge)",
                   f"SIGKILL of a trainer with cache_path at {kill_at:.0%} of {n} judge tasks, then a rerun",
                   n, n - summary["ok"], len(twice), len(late | posthumous), 0, None, 0.0,
                   f"judge answered {len(before)}: {len(late)} in the last {window_s * 1000:.0f} ms before the kill, {len(posthumous)} after it; "
                   f"paid twice from earlier {len(twice - late - posthumous)}; rerun cached {summary['cached']}",
                   {"twice": twice, "late": late, "posthumous": posthumous, "summary": summary, "resolved_first": resolved_first,
                    "answered_first": len(before), "dup_within_runs": paid_twice(before) + paid_twice(after)})


def judge_faults(tmp: Path, n: int) -> Outcome:
    """A judge answering with random 503s (5%), resets (3%) and hangs (0.5%); request timeout 1 s."""
    judge = RecordingJudge(capacity=64, latency_s=0.02, latency_dist="lognormal", sigma=0.6,
                           p_error=0.05, error_status=503, p_reset=0.03, p_hang=0.005, seed=11).start()
    try:
        with Producer(local_workers=2, heartbeat_s=HB, config=judge_config({"url": judge.url}, timeout_s=1.0)) as p:
            futures = p.submit_batch("llm_judge", judge_rows(n, "faults"))
            tl = Timeline(futures)
            results = collect(p, futures, 300)
            ep = p.status()["judges"][0]["endpoints"][0]
        stats = dict(judge.stats)
        twice = paid_twice(judge.answered())
    finally:
        judge.stop_soon()
    failed = [r for r in results if r is not None and not r.ok]
    return Outcome("judge: random 503s, resets, hangs", "a judge answering 5% 503, 3% resets, 0.5% hangs (timeout_s 1)",
                   n, sum(r is None for r in results), twice, 0, len(failed), tl.stall(), 1.0 + 6 * HB,
                   f"limit at the end {ep['limit']} (floor 1); judge saw {stats['requests']} requests, {stats['errors']} errors, "
                   f"{stats['resets']} resets",
                   {"results": results, "endpoint": ep, "judge_stats": stats, "failed": failed})


# garbage ---------------------------------------------------------------------------------
def _raw_tcp_garbage(port: int, rng: random.Random) -> None:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(rng.choice([b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\xff" * 10 + b"\x7f", b""]) + rng.randbytes(rng.randint(1, 4096)))


PRODUCER_GARBAGE: list[list[bytes]] = [
    [b"hello"],  # one frame
    [b"a", b"b", b"c"],  # three frames
    [wire.RESULTS, b"\xc1\xc1"],  # not msgpack
    [b"Z", msgpack.packb([])],  # unknown kind
    [wire.RESULTS, msgpack.packb([1, 1, [[b"short", 1.0, None, None, 0.0, None]]])],  # bad key
    [wire.READY, msgpack.packb(["x", "p", -1, "h", 5, 0, 0, [], []])],  # negative pid
    wire.encode(wire.Tasks([(bytes(16), "noop", {}, b"\x80", None, 1, -1)])),  # wrong direction
    wire.encode(wire.Revoke(3)),  # wrong direction
    wire.encode(wire.Ready("someone-else", "p", 1, "h", 5, 0, 0, [], [])),  # spoofed name
]
SERVICE_GARBAGE: list[list[bytes]] = [
    [b"hello"],
    [b"a", b"b", b"c"],
    [cw.SUBMIT, b"\xc1\xc1"],
    [cw.SUBMIT, msgpack.packb([1, "noop"])],  # short
    [cw.SUBMIT, msgpack.packb([-1, "noop", None, [{}], None])],  # negative request id
    [cw.SUBMIT, msgpack.packb([1, 7, None, [{}], None])],  # reward not a string
    [b"?", msgpack.packb([])],
    cw.encode(cw.Resolved("x", [[1, 0, {}]])),  # wrong direction
    cw.encode(cw.Accepted(1, "x", None, "")),  # wrong direction
    cw.encode(cw.Pong("x", 3)),  # wrong direction
]


def _spray(ctx: zmq.Context, endpoint: str, frames: list[list[bytes]], stop: threading.Event, rng: random.Random, sent: Counter,
           label: str) -> None:
    port = int(endpoint.rsplit(":", 1)[1])
    while not stop.is_set():
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        for _ in range(20):
            s.send_multipart(rng.choice(frames))
            sent[label] += 1
        s.send_multipart([rng.randbytes(rng.randint(1, 64)) for _ in range(rng.randint(1, 4))])  # random frames
        sent[label] += 1
        _raw_tcp_garbage(port, rng)
        sent[label + " raw"] += 1
        time.sleep(0.02)
        s.close()


def _spray_http(port: int, stop: threading.Event, rng: random.Random, sent: Counter) -> None:
    while not stop.is_set():
        _raw_tcp_garbage(port, rng)
        sent["http raw"] += 1
        time.sleep(0.02)


def garbage(tmp: Path, n: int) -> Outcome:
    """``qworker serve`` (its producer bound on tcp too) scoring ``n`` tasks for a Client while
    garbage flows into the producer's ROUTER, the service's client ROUTER and its HTTP front.
    Workers and pools bind nothing (they only connect), so these are every socket a peer can reach."""
    import urllib.request

    from qworker import Client

    listen, bind, http = free_port(), free_port(), free_port()
    err = open(tmp / "serve.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "qworker", "serve", "--listen", f"tcp://127.0.0.1:{listen}", "--bind", f"tcp://127.0.0.1:{bind}",
         "--workers", "2", "--heartbeat", str(HB), "--http", str(http), "--reward", "noop"],
        stdin=subprocess.DEVNULL, stderr=err,
    )
    stop, sent, rng = threading.Event(), Counter(), random.Random(5)
    ctx = zmq.Context()
    try:
        wait_until(lambda: "clients on" in (tmp / "serve.log").read_text(), 60, "qworker serve to start")
        with Client(f"tcp://127.0.0.1:{listen}") as c:
            c.map("noop", [{"warm": i} for i in range(20)], timeout=60)
            sprayers = [
                threading.Thread(target=_spray, args=(ctx, f"tcp://127.0.0.1:{bind}", PRODUCER_GARBAGE, stop, rng, sent, "producer")),
                threading.Thread(target=_spray, args=(ctx, f"tcp://127.0.0.1:{listen}", SERVICE_GARBAGE, stop, rng, sent, "service")),
                threading.Thread(target=_spray_http, args=(http, stop, rng, sent)),
            ]
            for t in sprayers:
                t.start()
            time.sleep(0.5)  # garbage first, then work while it goes on
            futures = c.submit_batch("sleep", [{"ms": 1, "i": i} for i in range(n)])
            tl = Timeline(futures)
            results = collect(c, futures, 120)
            stop.set()
            for t in sprayers:
                t.join(10)
            after = c.map("noop", [{"after": i} for i in range(50)], timeout=60)
            status = c.status()
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/health", timeout=10) as resp:
                health = resp.status
    finally:
        stop.set()
        stop_proc(proc)
        ctx.destroy(linger=0)
        err.close()
    log = (tmp / "serve.log").read_text()
    dropped = status["producer"]["dropped_frames"]
    service_logged = log.count("qworker service: dropped")
    return Outcome("garbage on every socket", "random frames, wrong-direction and malformed messages, raw TCP bytes on the producer's "
                   "ROUTER, the service's client ROUTER and its HTTP port, throughout the run",
                   n, sum(r is None for r in results), None, 0, sum(r is not None and not r.ok for r in results), tl.stall(), 6 * HB,
                   f"sent {sum(sent.values())}; producer counted {dropped} dropped; service logged {service_logged} "
                   f"(counted: {'dropped_frames' in status.get('service', {})})",
                   {"results": results, "after": after, "status": status, "sent": sent, "health": health, "log": log,
                    "alive": proc.returncode in (0, None)})


ROGUE = """
import sys, time, zmq
from qworker.transport import wire
endpoint, busy = sys.argv[1], sys.argv[2] == "busy"
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.setsockopt(zmq.ROUTING_ID, b"rogue-1")
s.setsockopt(zmq.LINGER, 0)
s.connect(endpoint)
received = 0
def ready():  # 512 credits; "busy" acknowledges what it got and claims to be running it, the other says it got nothing
    s.send_multipart(wire.encode(wire.Ready("rogue-1", "rogue", 4242, "rogue-host", 512 if busy else 512, received if busy else 0, 0, [], [])))
ready()
last = time.monotonic()
while True:
    if s.poll(100):
        frames = s.recv_multipart()
        if frames[0] == wire.TASKS:
            received += len(wire.decode(frames[0], frames[1], max_bytes=1 << 26).tasks)
    if time.monotonic() - last > float(sys.argv[3]):
        ready()
        last = time.monotonic()
"""


def rogue_peer(tmp: Path, n: int, *, busy: bool = False, task_timeout_s: float = 2.0, wait_s: float = 120) -> Outcome:
    """A process speaking the protocol over TCP: READY offering 512 credits, then only heartbeats,
    beside a real pool.  ``busy``: it acknowledges the tasks and claims to be running them."""
    script = tmp / "rogue.py"
    script.write_text(ROGUE)
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0, heartbeat_s=HB, task_timeout_s=task_timeout_s) as p:
        rogue = subprocess.Popen([sys.executable, str(script), p.endpoint, "busy" if busy else "idle", str(HB)])
        pool = None
        try:
            p.wait_for_workers(1, timeout=60)  # the rogue first: it is offered work before anyone else
            pool = start_pool(p.endpoint, "--workers", "1", "--id", "honest", "--timeout", str(task_timeout_s))
            futures = p.submit_batch("sleep", [{"ms": 1, "i": i} for i in range(n)])
            tl = Timeline(futures)
            results = collect(p, futures, wait_s)
            status = p.status()
        finally:
            rogue.kill()
            rogue.wait()
            if pool is not None:
                stop_proc(pool)
    row = next((w for pl in status["pools"] for w in pl["workers"] if w["worker"] == "rogue-1"), {})
    return Outcome(f"rogue peer ({'claims busy' if busy else 'READY 512, then heartbeats'})",
                   "a process over TCP sending READY with 512 credits, then " + (
                       "heartbeats acknowledging the tasks as running, forever" if busy else "only heartbeats, beside a real pool"),
                   n, sum(r is None for r in results), None, 0, sum(r is not None and not r.ok for r in results), tl.stall(),
                   4 * 3 * HB + 1.0,
                   f"rogue quarantined {row.get('quarantined')}, holding {row.get('in_flight')}; max attempts "
                   f"{max((r.attempts for r in results if r is not None), default=0)}",
                   {"results": results, "status": status, "rogue": row})


def key_leak(tmp: Path, n: int, capture_log: Any = None) -> Outcome:
    """Judge tasks with an API key that the judge echoes in 200 replies and in 401 bodies (JSON-escaped
    slashes); then every place the key could be kept or shown is searched for it and its first 8 characters.

    Phase 1: endpoint A accepts the key and quotes it; endpoint B refuses it (401, quoting it), so B is
    cooled and its reason shows in status.  Phase 2: B alone, so the 401 reaches ``Result.error``.
    The producer runs here (its log is ``capture_log()``, or this process's qworker log at DEBUG);
    the workers run in a ``qworker-pool`` with ``--log-level DEBUG``, its stderr kept."""
    import logging
    import urllib.parse

    secret = f"sk-{os.urandom(3).hex()}/{os.urandom(6).hex()}/{os.urandom(6).hex()}"
    env = {**os.environ, "QW_CHAOS_JUDGE_KEY": secret}
    a = RecordingJudge(capacity=32, latency_s=0.01, api_key=secret, echo_key=True).start()
    b = RecordingJudge(capacity=32, latency_s=0.01, api_key="sk-the-right-one", echo_key=True).start()
    db = tmp / "leak-cache.sqlite"
    pool_log = tmp / "pool.log"
    records: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    keep = _Keep(logging.DEBUG)
    keep.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    qlog = logging.getLogger("qworker")
    old_level = qlog.level
    qlog.addHandler(keep)
    qlog.setLevel(logging.DEBUG)
    texts: dict[str, str] = {}
    unresolved = ok1 = redacted_replies = 0
    failed2: list[Result] = []
    try:
        with open(pool_log, "w") as err:
            pool = None
            try:
                for phase, eps in (("1", [a, b]), ("2", [b])):
                    cfg = judge_config(*({"url": e.url, "api_key_env": "QW_CHAOS_JUDGE_KEY"} for e in eps), dead_after_s=3)
                    with Producer(bind="tcp://127.0.0.1:0", local_workers=0, heartbeat_s=HB, cache_path=str(db), config=cfg) as p:
                        pool = start_pool(p.endpoint, "--workers", "1", "--id", f"leak{phase}", "--log-level", "DEBUG", stderr=err, env=env)
                        p.wait_for_workers(1, timeout=60)
                        results = collect(p, p.submit_batch("llm_judge", judge_rows(n, f"leak{phase}")), 120)
                        unresolved += sum(r is None for r in results)
                        texts[f"results, phase {phase}"] = "\n".join(repr(r) for r in results)
                        texts[f"status(), phase {phase}"] = json.dumps(p.status())
                        cli = subprocess.run([console_script("qworker"), "status", "--connect", p.endpoint, "--json"],
                                             capture_output=True, text=True, timeout=60)
                        texts[f"qworker status --json, phase {phase}"] = cli.stdout + cli.stderr
                        stop_proc(pool)
                        pool = None
                    if phase == "1":
                        ok1 = sum(r is not None and r.ok for r in results)
                        redacted_replies = sum(r is not None and r.ok and "***" in str(r.extra.get("reply")) for r in results)
                    else:
                        failed2 = [r for r in results if r is not None and not r.ok]
            finally:
                if pool is not None:
                    stop_proc(pool)
    finally:
        qlog.removeHandler(keep)
        qlog.setLevel(old_level)
        a.stop()
        b.stop()
    texts["producer log"] = "\n".join(records) + (capture_log() if capture_log else "")
    texts["pool and worker log"] = pool_log.read_text()
    cache_bytes = b"".join(Path(f).read_bytes() for f in sorted(tmp.glob("leak-cache.sqlite*")))
    needles = {
        "the key": secret, "the key, JSON-escaped": secret.replace("/", "\\/"), "the key, \\u002f": secret.replace("/", "\\u002f"),
        "the key, URL-encoded": urllib.parse.quote(secret, safe=""), "its first 8 characters": secret[:8],
        **{f"its part {i + 1}": part for i, part in enumerate(secret.split("/")[1:])},
    }
    found = {f"{what} in {where}" for where, text in texts.items() for what, needle in needles.items() if needle in text}
    found |= {f"{what} in the disk cache's bytes" for what, needle in needles.items() if needle.encode() in cache_bytes}
    places = len(texts) + 1
    return Outcome("the key in every place it could leak", "a judge echoing the API key in 200 replies and 401 bodies "
                   "(JSON-escaped slashes); Results, disk cache bytes, logs, status searched", 2 * n,
                   unresolved, None, 0, n - ok1, None, 0.0,
                   f"key found in {len(found)} of {places} places x {len(needles)} forms",
                   {"found": sorted(found), "ok1": ok1, "redacted_replies": redacted_replies, "failed2": failed2,
                    "b_requests": b.stats["requests"], "a_requests": a.stats["requests"], "texts": texts, "secret": secret,
                    "cache_bytes": len(cache_bytes)}, clean=not found)
