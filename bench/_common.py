"""Shared helpers for the benchmark scripts: timing, medians, table printing, a mock judge process."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Callable


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


def start_judge(port: int, latency: float, capacity: int = 256) -> subprocess.Popen:
    """``qworker mock-judge`` on 127.0.0.1:``port``, returned once it answers ``/stats``."""
    proc = subprocess.Popen([sys.executable, "-m", "qworker", "mock-judge", "--port", str(port), "--capacity", str(capacity),
                             "--latency", str(latency)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=2).read()
            return proc
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
