"""Seams inside the producer: a cache tier that raises, close() racing a submission (real pool, real sockets).

Each case asserts that every future handed out resolves within a stated bound
and that a later submission of the same payload is not stuck behind a dead
entry.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from qworker import Producer, ProducerClosed
from tests.conftest import TEST_REWARDS

RESOLVE_WITHIN_S = 30.0  # generous: the suite must hold on a loaded 2-core machine


def test_a_disk_tier_that_raises_strands_nothing(tmp_path, monkeypatch):
    with Producer(local_workers=1, reward_modules=[TEST_REWARDS], cache_path=str(tmp_path / "c.sqlite")) as p:
        calls = {"n": 0}
        real = p.cache.get_persistent

        def flaky(keys):
            calls["n"] += 1
            if calls["n"] == 1:
                raise sqlite3.OperationalError("disk I/O error")
            return real(keys)

        monkeypatch.setattr(p.cache, "get_persistent", flaky)
        payload = {"ms": 0, "i": 41}
        try:
            [first] = p.submit_batch("spin", [payload])
        except sqlite3.OperationalError:
            first = None  # the caller may hear of it; what it registered must not stay pending
        if first is not None:
            first.result(timeout=RESOLVE_WITHIN_S)
        [again] = p.submit_batch("spin", [payload])
        r = again.result(timeout=RESOLVE_WITHIN_S)
        assert r.ok and r.score == 1.0
        assert p.status()["producer"]["pending"] == 0


def test_close_racing_a_large_submission_leaves_no_future_pending():
    p = Producer(local_workers=1, reward_modules=[TEST_REWARDS])
    out: dict = {}

    def submit() -> None:
        try:
            out["futures"] = p.submit_batch("spin", [{"ms": 0, "i": i} for i in range(200_000)])
        except ProducerClosed as exc:
            out["closed"] = exc

    t = threading.Thread(target=submit)
    t.start()
    time.sleep(0.3)  # the submission is under way (hashing 200k payloads takes seconds)
    p.close()
    t.join(RESOLVE_WITHIN_S)
    assert not t.is_alive()
    assert len(p._table) == 0  # nothing left for anyone to resolve
    futures = out.get("futures", [])
    deadline = time.monotonic() + RESOLVE_WITHIN_S
    assert all(f.result(timeout=max(0.0, deadline - time.monotonic())) is not None for f in futures)
    assert "closed" in out or futures
    with pytest.raises(ProducerClosed):
        p.submit("spin", {"ms": 0, "i": -1})


def test_random_interleavings_of_submit_close_and_a_failing_disk_tier_lose_nothing(tmp_path):
    from tests.chaos_scenarios.seams_producer import submit_close_interleavings

    o = submit_close_interleavings(tmp_path, 500, rounds=2, threads=3, seed=7)
    assert o.tasks > 0 and o.lost == 0 and o.innocent == 0 and o.paid_twice == 0, o
