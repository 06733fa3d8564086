"""Disk-cache durability: how long a result waits before it is committed, and how
many results a SIGKILLed producer loses (= judge calls a rerun pays again).

Each stream is a writer process that hands rows to ``DiskCache.put_many`` at a
steady rate, in the dispatcher's way (one call per result batch, every 5 ms).

* **Commit lag.**  Another process polls the file every 2 ms through its own
  connection and records when each row first becomes visible.  A row's key
  carries the CLOCK_MONOTONIC time it was handed over, so lag = seen - handed
  (it includes up to one poll interval).
* **Kill.**  The writer counts the rows it has handed over in shared memory; it
  is SIGKILLed at a random moment, and the rows missing from the file are what
  a rerun would pay for again.

    python bench/diskcache.py                # 3 rates, 4 s of lag measurement and 10 kills each
    python bench/diskcache.py --quick
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import table  # noqa: E402

from qworker.cache.disk import COMMIT_WITHIN_S, DiskCache  # noqa: E402

TICK_S = 0.005  # the writer hands over one batch per tick
EXTRA = {"pred": "42", "source": "boxed", "format_ok": True}  # a typical small extra


def _feed(path: str, per_tick: int, seconds: float, handed: Any, ready: Any) -> None:
    cache = DiskCache(path)
    ready.set()
    seq = 0
    end = time.monotonic() + seconds
    next_tick = time.monotonic()
    while time.monotonic() < end:
        now = time.monotonic()
        cache.put_many([(struct.pack("<qd", seq + j, now), 1.0, EXTRA, "bench") for j in range(per_tick)])
        seq += per_tick
        handed.value = seq
        next_tick += TICK_S
        time.sleep(max(0.0, next_tick - time.monotonic()))
    cache.close()


def _start(path: str, per_tick: int, seconds: float) -> tuple[Any, Any]:
    ctx = mp.get_context("spawn")
    handed, ready = ctx.Value("q", 0, lock=False), ctx.Event()
    proc = ctx.Process(target=_feed, args=(path, per_tick, seconds, handed, ready))
    proc.start()
    ready.wait(30)
    return proc, handed


def commit_lags(per_tick: int, seconds: float) -> list[float]:
    """Seconds from hand-over to visible in another connection, one per row."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "c.sqlite")
        proc, _ = _start(path, per_tick, seconds)
        conn = sqlite3.connect(path)
        last, lags = 0, []
        while proc.is_alive() or last == 0:
            rows = conn.execute("SELECT rowid, key FROM results WHERE rowid > ? ORDER BY rowid", (last,)).fetchall()
            seen = time.monotonic()
            for rowid, key in rows:
                lags.append(seen - struct.unpack("<qd", key)[1])
                last = rowid
            time.sleep(0.002)
        proc.join()
        conn.close()
    return lags


def kill_losses(per_tick: int, kills: int, rng: random.Random) -> list[int]:
    """Rows handed over but not in the file after a SIGKILL, one count per kill."""
    lost = []
    for _ in range(kills):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.sqlite")
            proc, handed = _start(path, per_tick, 60.0)
            time.sleep(rng.uniform(0.5, 1.5))
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
            conn = sqlite3.connect(path)
            (rows,) = conn.execute("SELECT count(*) FROM results").fetchone()
            conn.close()
            lost.append(handed.value - rows)
    return lost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1.5 s of lag measurement and 4 kills per rate")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    seconds, kills = (1.5, 4) if args.quick else (4.0, 10)
    rng = random.Random(args.seed)
    out = []
    for per_tick in (1, 10, 100):
        rate = per_tick / TICK_S
        lags = sorted(commit_lags(per_tick, seconds))
        lost = kill_losses(per_tick, kills, rng)
        q = statistics.quantiles(lags, n=100)
        out.append([
            f"{rate:,.0f} rows/s ({per_tick} per {TICK_S * 1000:.0f} ms)", f"{len(lags):,}",
            f"{q[49] * 1000:.1f}", f"{q[98] * 1000:.1f}", f"{lags[-1] * 1000:.1f}",
            f"{sum(lag > COMMIT_WITHIN_S for lag in lags)}", f"{statistics.mean(lost):.1f}", f"{max(lost)}",
            f"{max(lost) / rate * 1000:.0f}",
        ])
    print(table(
        ["stream", "rows", "lag p50 ms", "lag p99 ms", "lag max ms", f"> {COMMIT_WITHIN_S * 1000:.0f} ms",
         f"lost per kill, mean of {kills}", "max", "max as ms of stream"],
        out,
    ))


if __name__ == "__main__":
    from _common import recorded

    with recorded("diskcache"):  # the printed tables also go to docs/bench/diskcache.md
        main()
