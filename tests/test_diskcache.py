import multiprocessing as mp
import sqlite3
import time

import msgpack

from qworker._diskcache import COMMIT_WITHIN_S, UNRECORDED, DiskCache


def _writer(path: str, start: int) -> None:
    c = DiskCache(path)
    for i in range(start, start + 500):
        c.put(i.to_bytes(16, "little"), float(i), {"i": i})
    c.close()


def test_roundtrip_and_survives_reopening(tmp_path):
    path = str(tmp_path / "new" / "dir" / "c.sqlite")  # parent directories are created
    c = DiskCache(path)
    c.put(b"k" * 16, 0.5, {"pred": "4", "nested": {"a": [1, 2]}})
    c.close()
    again = DiskCache(path)
    assert again.get_many([b"k" * 16, b"x" * 16]) == {b"k" * 16: (0.5, {"pred": "4", "nested": {"a": [1, 2]}})}
    again.close()


def test_processes_share_it_safely(tmp_path):
    path = str(tmp_path / "c.sqlite")
    DiskCache(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, n * 500)) for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    c = DiskCache(path)
    found = c.get_many(i.to_bytes(16, "little") for i in range(1500))
    assert len(found) == 1500 and found[(1234).to_bytes(16, "little")] == (1234.0, {"i": 1234})
    c.close()


def test_max_entries_keeps_the_newest(tmp_path):
    c = DiskCache(str(tmp_path / "c.sqlite"), max_entries=10)
    for i in range(30):
        c.put(i.to_bytes(16, "little"), float(i), {})
        c.flush()
    found = c.get_many(i.to_bytes(16, "little") for i in range(30))
    assert sorted(int.from_bytes(k, "little") for k in found) == list(range(20, 30))
    c.close()


def test_ttl_hides_old_rows(tmp_path):
    c = DiskCache(str(tmp_path / "c.sqlite"), ttl_s=0.1)
    c.put(b"a" * 16, 1.0, {})
    c.flush()
    assert c.get_many([b"a" * 16])
    time.sleep(0.15)
    assert c.get_many([b"a" * 16]) == {}
    c.close()


def _visible(path: str) -> set[int]:
    """The keys committed, read from a connection of our own (as another process would)."""
    conn = sqlite3.connect(path)
    try:
        return {int.from_bytes(k, "little") for (k,) in conn.execute("SELECT key FROM results")}
    finally:
        conn.close()


def test_a_steady_stream_is_committed_within_the_bound(tmp_path):
    # 10 rows every 5 ms: the old writer waited for a 50 ms pause and committed nothing
    path = str(tmp_path / "c.sqlite")
    c = DiskCache(path)
    handed: list[tuple[float, int]] = []
    n = 0
    start = time.monotonic()
    while time.monotonic() - start < 0.4:
        c.put_many([(i.to_bytes(16, "little"), 1.0, {}, "r") for i in range(n, n + 10)])
        handed += [(time.monotonic(), i) for i in range(n, n + 10)]
        n += 10
        time.sleep(0.005)
    seen = _visible(path)
    checked_at = time.monotonic()
    # generous for a loaded 2-core machine: the stated bound is COMMIT_WITHIN_S (0.1 s)
    due = {i for t, i in handed if checked_at - t > 3 * COMMIT_WITHIN_S}
    assert due and due <= seen, f"{len(due - seen)} of {len(due)} rows handed over > 0.3 s ago are not committed"
    assert c.max_commit_lag_s < 3 * COMMIT_WITHIN_S
    c.close()
    assert len(_visible(path)) == n  # close commits the rest


def test_flush_commits_at_once_and_rewards_are_recorded(tmp_path):
    path = str(tmp_path / "c.sqlite")
    c = DiskCache(path)
    c.put_many([(b"a" * 16, 1.0, {}, "math"), (b"b" * 16, 0.0, {}, "math"), (b"c" * 16, 0.5, {}, "gsm8k")])
    c.put(b"d" * 16, 0.5, {})  # no reward given
    c.flush()
    assert len(_visible(path)) == 4
    st = c.stats()
    assert st["rows"] == 4 and {k: v["rows"] for k, v in st["rewards"].items()} == {"math": 2, "gsm8k": 1, UNRECORDED: 1}
    assert c.clear("math") == 2 and c.get_many([b"a" * 16, b"c" * 16]) == {b"c" * 16: (0.5, {})}
    assert c.clear() == 2 and c.stats()["rows"] == 0
    c.close()


def test_a_file_from_before_rewards_were_recorded_is_migrated(tmp_path):
    path = str(tmp_path / "old.sqlite")
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE results (key BLOB PRIMARY KEY, score REAL NOT NULL, extra BLOB NOT NULL, created REAL NOT NULL);"
        "CREATE INDEX results_created ON results(created);"
    )
    old.execute("INSERT INTO results VALUES (?, ?, ?, ?)", (b"k" * 16, 0.75, msgpack.packb({"p": 1}), time.time()))
    old.commit()
    old.close()
    c = DiskCache(path)
    assert c.get_many([b"k" * 16]) == {b"k" * 16: (0.75, {"p": 1})}  # old rows still answer
    c.put(b"n" * 16, 1.0, {}, "math")
    c.flush()
    assert {k: v["rows"] for k, v in c.stats()["rewards"].items()} == {UNRECORDED: 1, "math": 1}
    c.close()
    DiskCache(path).close()  # opening a migrated file again is a no-op
