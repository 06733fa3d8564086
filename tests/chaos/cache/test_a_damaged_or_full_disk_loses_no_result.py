"""The disk cache seam under a real producer and worker pool: a damaged
or unreadable disk tier costs only cache misses, and a full disk costs no results."""

from __future__ import annotations

import sqlite3
import time

from qworker import Producer
from qworker.engine.metrics import _Collector
from tests.chaos_scenarios.seams_disk import disk_faults
from tests.conftest import TEST_REWARDS
from tests.faults.disk import GARBAGE, DiskFull, corrupt_pages, corrupt_row


def _payloads(log, n: int) -> list[dict]:
    return [{"log": str(log), "i": i} for i in range(n)]


def _wait(cond, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _rows(db) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT count(*) FROM results").fetchone()[0]
    finally:
        conn.close()


def test_damaged_rows_are_recomputed_and_the_rest_answered_from_disk(tmp_path):
    # on main: msgpack's error came out of submit_batch (get_persistent) and no future was returned
    db, log = tmp_path / "cache.sqlite", tmp_path / "evals.log"
    with Producer(local_workers=1, reward_modules=[TEST_REWARDS], cache_path=str(db)) as p:
        first = p.map("count_eval", _payloads(log, 20), timeout=120)
    assert all(r.ok for r in first) and _rows(db) == 20
    damaged = {3: GARBAGE["format"], 7: GARBAGE["extra_data"], 11: GARBAGE["truncated"]}
    for i, garbage in damaged.items():
        corrupt_row(db, bytes.fromhex(first[i].key), garbage)
    with Producer(local_workers=1, reward_modules=[TEST_REWARDS], cache_path=str(db)) as p:
        futures = p.submit_batch("count_eval", _payloads(log, 20))
        results = p.gather(futures, timeout=120)
        producer = p.status()["producer"]
    assert [r.score for r in results] == [float(i) for i in range(20)] and all(r.ok for r in results)
    assert {i for i, r in enumerate(results) if not r.cached} == set(damaged)  # paid again: only the damaged ones
    assert producer["cache_corrupt_rows"] == 3 and producer["cache_read_errors"] == 0
    assert _rows(db) == 20  # rewritten by the second run


def test_an_unreadable_disk_tier_is_all_misses(tmp_path):
    db, log = tmp_path / "cache.sqlite", tmp_path / "evals.log"
    with Producer(local_workers=1, reward_modules=[TEST_REWARDS], cache_path=str(db)) as p:
        p.map("count_eval", _payloads(log, 300), timeout=120)
    corrupt_pages(db)  # "database disk image is malformed" on reading the rows
    with Producer(local_workers=1, reward_modules=[TEST_REWARDS], cache_path=str(db)) as p:
        results = p.map("count_eval", _payloads(log, 300), timeout=120)
        producer = p.status()["producer"]
    assert [r.score for r in results] == [float(i) for i in range(300)] and all(r.ok for r in results)
    assert producer["cache_read_errors"] >= 1


def test_a_full_disk_during_a_run_loses_no_result(tmp_path):
    db, log = tmp_path / "cache.sqlite", tmp_path / "evals.log"
    full = DiskFull()
    with full.installed(), Producer(local_workers=1, reward_modules=[TEST_REWARDS], cache_path=str(db)) as p:
        full.fill()
        results = p.map("count_eval", _payloads(log, 500), timeout=120)
        assert [r.score for r in results] == [float(i) for i in range(500)] and all(r.ok for r in results)
        _wait(lambda: p.status()["producer"]["cache_write_errors"] >= 1)
        producer = p.status()["producer"]
        assert producer["cache_unwritten"] > 0 and _rows(db) + producer["cache_unwritten"] == 500
        metrics = {m.name: m.samples[0].value for m in _Collector(p.status).collect() if m.name.startswith("qworker_cache")}
        assert metrics["qworker_cache_unwritten_rows"] > 0 and metrics["qworker_cache_write_errors"] >= 1
        full.free()
        _wait(lambda: p.status()["producer"]["cache_unwritten"] == 0)
        assert p.status()["producer"]["cache_rows_dropped"] == 0
    assert _rows(db) == 500


def test_the_disk_chaos_scenario_loses_nothing_and_leaves_nothing_unwritten(tmp_path):
    o = disk_faults(tmp_path, 300)
    assert o.detail["faulted"], o.note  # the disk filled and the lock refused writes: the faults happened
    assert o.lost == 0 and o.innocent == 0 and o.detail["unwritten"] == 0 and o.detail["on_disk"] == 300, o.note
    assert o.paid_twice == o.detail["damaged"] == o.detail["recomputed"], o.note  # only the damaged rows paid again
