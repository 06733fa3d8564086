"""Disk faults under a producer's disk cache: the disk fills, then another process locks
the file (as ``qworker cache clear``'s VACUUM does), then rows are damaged; a second
producer then reads the file.  Faults made by ``tests/faults/disk.py``, for real."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from qworker import Producer
from tests.chaos_scenarios.measure import Outcome, Timeline, collect, evaluations, lost_of, paid_twice
from tests.chaos_scenarios.processes import TEST_REWARDS, wait_until
from tests.faults.disk import GARBAGE, DiskFull, Lock, corrupt_row


def _rows_on_disk(db: Path) -> int:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute("SELECT count(*) FROM results").fetchone()[0]
    finally:
        conn.close()


def disk_faults(workdir: Path, n: int, *, lock_s: float = 3.0, damaged: int = 5) -> Outcome:
    """``n`` ``count_eval`` tasks in two halves: the first while the disk is full, the second while
    another connection holds the file locked for ``lock_s`` s; then ``damaged`` rows are garbled and a
    fresh producer asks for all ``n`` again.  Lost must be 0, and so must the rows unwritten at the end;
    only the damaged rows are paid twice."""
    db, log = workdir / "disk-faults.sqlite", workdir / "evals-disk-faults"
    half = n // 2
    payloads = [{"log": str(log), "i": i} for i in range(n)]
    full = DiskFull()
    with full.installed(), Producer(local_workers=2, reward_modules=[TEST_REWARDS], cache_path=str(db)) as p:
        full.fill()
        futures = p.submit_batch("count_eval", payloads[:half])
        tl_full = Timeline(futures)
        first = collect(p, futures, 120)
        wait_until(lambda: p.status()["producer"]["cache_write_errors"] > 0, 30, "a failed write on the full disk")
        while_full = p.status()["producer"]
        full.free()
        wait_until(lambda: p.status()["producer"]["cache_unwritten"] == 0, 60, "the rows kept while the disk was full")

        lock = Lock(db, lock_s).start()
        errors_before = p.status()["producer"]["cache_write_errors"]
        futures = p.submit_batch("count_eval", payloads[half:])
        tl_lock = Timeline(futures)
        second = collect(p, futures, 120)
        wait_until(lambda: p.status()["producer"]["cache_write_errors"] > errors_before or lock.released.is_set(), 30,
                   "a write refused by the lock")
        while_locked = p.status()["producer"]
        lock.join()
        wait_until(lambda: p.status()["producer"]["cache_unwritten"] == 0, 60, "the rows kept while the file was locked")
        after = p.status()["producer"]
    results = first + second
    on_disk = _rows_on_disk(db)

    garbage = list(GARBAGE.values())
    hit = [r for r in results[: damaged * 7 : 7] if r is not None]
    for j, r in enumerate(hit):
        corrupt_row(db, bytes.fromhex(r.key), garbage[j % len(garbage)])
    with Producer(local_workers=2, reward_modules=[TEST_REWARDS], cache_path=str(db)) as p:
        futures = p.submit_batch("count_eval", payloads)
        third = collect(p, futures, 120)
        reread = p.status()["producer"]
    recomputed = sum(r is not None and not r.cached for r in third)

    lost = lost_of(results) + lost_of(third)
    innocent = sum(r is not None and not r.ok for r in results + third)
    unwritten = after["cache_unwritten"]
    faulted = while_full["cache_write_errors"] > 0 and while_locked["cache_write_errors"] > errors_before
    clean = (unwritten == 0 and on_disk == n and after["cache_rows_dropped"] == 0 and faulted
             and reread["cache_corrupt_rows"] == len(hit) and recomputed == len(hit))
    return Outcome(
        "disk faults under the disk cache",
        f"disk full for {half} tasks, the file locked {lock_s:.0f} s for {n - half}, {len(hit)} rows garbled, then all {n} asked again",
        2 * n, lost, paid_twice(evaluations(log)), len(hit), innocent, max(tl_full.stall(), tl_lock.stall()), lock_s,
        f"unwritten while full {while_full['cache_unwritten']}, while locked {while_locked['cache_unwritten']}, at the end {unwritten}; "
        f"write errors {after['cache_write_errors']} (retried), dropped {after['cache_rows_dropped']}; rows on disk {on_disk}/{n}; "
        f"damaged rows skipped {reread['cache_corrupt_rows']}, recomputed {recomputed}",
        {"unwritten": unwritten, "on_disk": on_disk, "while_full": while_full, "while_locked": while_locked, "after": after,
         "reread": reread, "damaged": len(hit), "recomputed": recomputed, "faulted": faulted},
        clean=clean,
    )
