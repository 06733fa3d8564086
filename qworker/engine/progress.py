"""A progress line on stderr (done/total, rate, failures, ETA); advanced from any thread, redrawn at most 10 times a second."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any


class Progress:
    def __init__(self, total: int, *, enabled: bool = True, width: int = 30) -> None:
        self.total = total
        self.enabled = enabled and total > 0
        self.tty = sys.stderr.isatty()
        self.width = width
        self.done = 0
        self.failed = 0
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._next_log = 0.1
        self._lock = threading.Lock()

    def advance(self, *_: Any, failed: bool = False) -> None:
        with self._lock:
            self.done += 1
            self.failed += failed
            now = time.monotonic()
            if self.done == self.total or now - self._last_draw >= 0.1:
                self._last_draw = now
                self._draw(now)

    def _draw(self, now: float) -> None:
        if not self.enabled:
            return
        frac = self.done / self.total
        rate = self.done / max(now - self.started, 1e-9)
        tail = f"{rate:,.0f}/s  failed {self.failed}  ETA {_clock((self.total - self.done) / max(rate, 1e-9))}"
        if self.tty:
            bar = "#" * int(frac * self.width)
            sys.stderr.write(f"\r[{bar:<{self.width}}] {self.done}/{self.total} {tail}\x1b[K")
            sys.stderr.flush()
        elif frac >= self._next_log or self.done == self.total:  # a log file gets a line per 10%
            self._next_log = frac + 0.1
            sys.stderr.write(f"{self.done}/{self.total} ({frac:.0%}) {tail}\n")

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")


def _clock(seconds: float) -> str:
    """``1:02:03`` / ``2:03``; ``?`` for more than a day."""
    if seconds > 86400:
        return "?"
    m, s = divmod(int(seconds + 0.5), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
