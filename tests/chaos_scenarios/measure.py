"""Measuring a chaos run: the ``Outcome`` a scenario returns, and the counts it is built from."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from qworker import Producer, Result
from qworker.host.worker import FLUSH_AFTER_S


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
    recovery_s: Optional[float] = None  # seconds from the end of an outage until throughput is back to 90% of before

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

