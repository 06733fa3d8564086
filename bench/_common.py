"""Shared helpers for the benchmark scripts: timing, medians, table printing, a mock judge process."""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import threading
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
