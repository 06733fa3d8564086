"""Shared helpers for the benchmark scripts: timing, medians, table printing, the tables written to docs/bench/,
a mock judge process."""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, Optional

DOCS_BENCH = Path(__file__).resolve().parent.parent / "docs" / "bench"


def _children_import_the_qworker_measured() -> None:
    """Exit with one line if the working directory holds a ``qworker/`` other than the one this process imports: the
    child processes a benchmark starts as ``python -m qworker ...`` (a service, pools, every Producer's workers) put
    the working directory first on their path, so they would run that other tree's code (a before/after comparison
    would measure one side's workers under both).  Run a benchmark from the tree it measures; a child that runs
    another tree's qworker gets ``cwd=`` that tree."""
    import importlib.util

    spec = importlib.util.find_spec("qworker")
    measured = Path(spec.origin).resolve().parent.parent if spec is not None and spec.origin else None
    cwd = Path.cwd().resolve()
    if measured is not None and (cwd / "qworker" / "__init__.py").exists() and cwd != measured:
        where = f"run it from {measured}" if (measured / "bench").is_dir() else "run it from another directory"
        sys.exit(f"{sys.argv[0]}: the working directory {cwd} holds a qworker/ of its own, which this benchmark's child "
                 f"processes (python -m qworker ...) would import instead of the one measured ({measured}): {where}")


_children_import_the_qworker_measured()


def counts(text: str) -> Optional[list[int]]:
    """Comma-separated whole numbers of 1 or more, in ASCII digits (``"1,4,16"``); None if ``text`` is not that."""
    parts = [x.strip() for x in text.split(",")]
    if not all(x.isascii() and x.isdigit() and int(x) >= 1 for x in parts):
        return None
    return [int(x) for x in parts]


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_rate(n: int, fn: Callable[[], object], repeats: int) -> tuple[float, list[float]]:
    """Median tasks/s of ``repeats`` runs of ``fn`` (each runs ``n`` tasks)."""
    rates = [n / timed(fn) for _ in range(repeats)]
    return statistics.median(rates), rates


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [[str(c) for c in r] for r in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths), *(line(r) for r in cells[1:])])


def _load() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def write_table(name: str, text: str, *, load_before: str = "") -> Path:
    """Write ``docs/bench/<name>.md``: the command that ran, the date (UTC), the machine (cores, load
    averages over 1/5/15 min, Python, OS) and ``text``, the script's own printed tables, verbatim.
    Returns the path.  Re-measuring rewrites this file only; the prose in docs/ links it."""
    DOCS_BENCH.mkdir(parents=True, exist_ok=True)
    path = DOCS_BENCH / f"{name}.md"
    command = " ".join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = f"{load_before} before, {_load()} after" if load_before else _load()
    machine = (f"{os.cpu_count()} cores ({platform.machine()}), load average (1/5/15 min) {load}, "
               f"Python {platform.python_version()}, {platform.system()} {platform.release()}")
    body = (f"# `bench/{Path(sys.argv[0]).name}`{' (' + name + ')' if Path(sys.argv[0]).stem != name else ''}\n\n<!-- Written by the benchmark itself (bench/_common.py write_table); "
            f"re-run it to update, do not edit. -->\n\n"
            f"- command: `{command}`\n- date: {when}\n- machine: {machine}\n\n```text\n{text.rstrip()}\n```\n")
    path.write_text(body, encoding="utf-8")
    return path


class _Tee(io.TextIOBase):
    def __init__(self, out: io.TextIOBase) -> None:
        self.out, self.kept = out, io.StringIO()

    def write(self, s: str) -> int:
        self.kept.write(s)
        return self.out.write(s)

    def flush(self) -> None:
        self.out.flush()


@contextlib.contextmanager
def recorded(name: str, *, unless_flag: str = "") -> Iterator[None]:
    """Run a benchmark's ``main()`` inside this: what it prints still goes to stdout, and, when it returns
    normally, is also written by ``write_table(name, ...)`` to docs/bench/<name>.md.  Nothing is written
    when ``unless_flag`` is in argv (a child run of the script) or QWORKER_BENCH_NO_RECORD is set."""
    if (unless_flag and unless_flag in sys.argv) or os.environ.get("QWORKER_BENCH_NO_RECORD"):
        yield
        return
    before = _load()
    tee = _Tee(sys.stdout)  # type: ignore[arg-type]
    with contextlib.redirect_stdout(tee):
        yield
    path = write_table(name, tee.kept.getvalue(), load_before=before)
    print(f"(table written to {path})", file=sys.stderr)


def run_together(*targets: Callable[[], object]) -> None:
    """Run each of ``targets`` on a thread of its own, all at once; return when every one has."""
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A ``qworker mock-judge`` on 127.0.0.1:``port`` in its own process, returned once it answers ``/stats``."""

    def __init__(self, port: int, *args: str, seed: int = 0) -> None:
        """``args``: mock-judge flags.  ``seed``: its random draws; give each run of a scenario its own (the
        same for each system compared), or every run replays nearly the same latencies and faults onto
        the same content-hashed tasks, and three runs are not three samples."""
        self.port, self.args = port, args
        self.proc = subprocess.Popen([sys.executable, "-m", "qworker", "mock-judge", "--port", str(port), "--seed", str(seed), *args],
                                     stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while True:
            try:
                self.stats()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.proc.kill()
                    raise
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"

    def stats(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as r:
            return json.load(r)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


async def post_with_backoff(session, sem, url: str, body: dict, *, attempts: int = 4, timeout_s: float = 60) -> bool:
    """The usual hand-set judge client's request: POST ``body`` to ``url`` holding ``sem``; a non-200 or a connection
    error is retried after 0.1 s doubling (Retry-After unread), ``attempts`` tries in all.  True when one was a 200."""
    import asyncio

    import aiohttp

    for attempt in range(attempts):
        try:
            async with sem, session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                await resp.read()
                if resp.status == 200:
                    return True
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass
        await asyncio.sleep(0.1 * 2**attempt)
    return False


def run_in_tree(tree: str | os.PathLike[str], argv: list[str], *, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGV`` with ``tree``'s qworker and wait for it: ``tree`` is its working directory and its
    ``PYTHONPATH``, so it and the processes it starts (``python -m qworker ...``) import that tree's code; it records
    nothing (``QWORKER_BENCH_NO_RECORD``).  Its stdout and stderr are captured, as text."""
    return subprocess.run([python, *argv], cwd=tree, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(tree), QWORKER_BENCH_NO_RECORD="1"))


def stages_alternated(script: str, argv: list[str], against: str | None) -> dict[str, list[dict[str, float]]]:
    """Run ``script --json ARGV`` (one tree's figures as a JSON object) with this checkout's qworker, and with
    ``against``'s alternately in 3 rounds when given; the figures per tree name ("this tree", "other"), a dict per
    round."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(script)))
    trees = {"this tree": here} if not against else {"other": os.path.abspath(against), "this tree": here}
    got: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(3 if against else 1):
        for name, tree in trees.items():
            run = run_in_tree(tree, [os.path.abspath(script), "--json", *argv])
            run.check_returncode()
            got[name].append(json.loads(run.stdout))
    return got


def stages_table(got: dict[str, list[dict[str, float]]], rows: list[tuple[str, list[str] | None]], *, against: str = "") -> str:
    """The least of each stage over the rounds, per tree: one row per (label, stages summed, or None for the stage
    named by the label), and this tree / other when ``against`` names the other."""
    names = list(got)
    best = {nm: {k: min(r[k] for r in rounds) for k in rounds[0]} for nm, rounds in got.items()}
    out = []
    for label, group in rows:
        vals = {nm: (sum(best[nm][k] for k in group) if group else best[nm][label]) for nm in names}
        row = [label, *[f"{vals[nm]:.2f}" for nm in names]]
        if against:
            row.append(f"{vals['this tree'] / vals['other']:.2f}x" if vals["other"] else "-")
        out.append(row)
    headers = ["stage", *[f"{nm} ({against})" if nm == "other" else nm for nm in names]] + (["this / other"] if against else [])
    return table(headers, out)

