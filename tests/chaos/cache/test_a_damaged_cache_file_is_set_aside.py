"""The disk cache's file, made bad for real: a file that is not a database is refused in one line naming
it; a damaged database is set aside and replaced without losing the results waiting to be written; close
releases every connection; ``Producer.flush`` waits for the disk."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import re
import socket
import sqlite3
import subprocess
import threading
import time

import pytest

from qworker import CacheError, Producer, ProducerClosed
from qworker.cache.disk import DiskCache
from tests.conftest import TEST_REWARDS, console_script
from tests.faults.disk import corrupt_pages


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: list[str], tmp_path) -> tuple[int, str]:
    """Run a console script as a user does; its exit code and stderr."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    res = subprocess.run([console_script(args[0]), *args[1:]], capture_output=True, timeout=120, env=env)
    return res.returncode, res.stderr.decode()


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _rows(n: int, start: int = 0) -> list[tuple]:
    return [(i.to_bytes(16, "little"), float(i), {"i": i}, "r") for i in range(start, start + n)]


def _on_disk(path) -> set[int]:
    conn = sqlite3.connect(str(path))
    try:
        return {int(s) for (s,) in conn.execute("SELECT score FROM results")}
    finally:
        conn.close()


def _count(path) -> int:
    conn = sqlite3.connect(str(path))
    try:
        return conn.execute("SELECT count(*) FROM results").fetchone()[0]
    finally:
        conn.close()


def _wait(cond, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _damaged_database(path, rows: int = 2000) -> None:
    """A real cache file of ``rows`` rows whose pages after the first (header and schema intact) are garbage."""
    c = DiskCache(str(path))
    c.put_many(_rows(rows, 100_000))
    assert c.flush()
    assert c.close()
    assert corrupt_pages(path) > 0


def _set_aside_files(path) -> list[str]:
    return sorted(n for n in os.listdir(os.path.dirname(path)) if re.fullmatch(
        re.escape(os.path.basename(path)) + r"\.corrupt-\d{8}T\d{6}Z(-\d+)?", n))


def _fds_to(path) -> list[str]:
    """This process's open descriptors on the database file, its WAL or its shared memory."""
    names = {str(path), f"{path}-wal", f"{path}-shm"}
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target in names:
            found.append(target)
    return found


GARBAGE_FILES = {
    "random bytes": bytes((i * 131 + 7) % 256 for i in range(20_000)),
    "a text file": b'{"response": "#### 4", "ground_truth": "4"}\n' * 50,
}


@pytest.mark.parametrize("content", sorted(GARBAGE_FILES))
def test_a_file_that_is_not_a_database_is_refused_naming_it_and_left_alone(tmp_path, content):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(GARBAGE_FILES[content])
    with pytest.raises(CacheError, match=re.escape(str(bad)) + " is not an SQLite database"):
        DiskCache(str(bad))
    with pytest.raises(CacheError, match=re.escape(str(bad)) + " is not an SQLite database"):
        Producer(local_workers=0, bind=f"tcp://127.0.0.1:{free_port()}", cache_path=str(bad))
    assert bad.read_bytes() == GARBAGE_FILES[content]  # not moved, not changed
    assert sorted(os.listdir(tmp_path)) == ["bad.sqlite"]


def test_score_and_serve_refuse_a_cache_that_is_not_a_database_in_one_line(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(GARBAGE_FILES["random bytes"])
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"response": "#### 4", "ground_truth": "4"}\n')
    rc, err = run(["qworker", "score", str(rows), "--reward", "gsm8k", "--cache", str(bad), "--workers", "1",
                   "--out", str(tmp_path / "out.jsonl")], tmp_path)
    assert rc == 2 and f"{bad} is not an SQLite database" in one_line(err)
    rc, err = run(["qworker", "serve", "--listen", f"tcp://127.0.0.1:{free_port()}", "--cache", str(bad), "--workers", "1"], tmp_path)
    assert rc == 2 and f"{bad} is not an SQLite database" in one_line(err)
    assert bad.read_bytes() == GARBAGE_FILES["random bytes"]


def test_damaged_pages_found_by_a_write_set_the_file_aside_and_the_waiting_rows_go_to_a_fresh_one(tmp_path, caplog):
    path = tmp_path / "c.sqlite"
    _damaged_database(path)
    c = DiskCache(str(path))  # the header and schema are intact: it opens
    c.put_many(_rows(500))
    assert c.flush(timeout=30) is True  # before: every write failed, on this run and every later one
    [aside] = _set_aside_files(path)
    assert c.set_aside == [str(tmp_path / aside)]
    assert _on_disk(path) == set(range(500)) and c.rows_dropped == 0
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "moved it to" in r.getMessage()]
    assert len(warnings) == 1 and aside in warnings[0].getMessage() and "malformed" in warnings[0].getMessage()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []  # one warning, no write errors logged
    c.put_many(_rows(500, 500))
    assert c.flush(timeout=30) is True and c.close()
    again = DiskCache(str(path))  # a later run finds the fresh file and what was written to it
    assert len(again.get_many([k for k, *_ in _rows(1000)])) == 1000 and again.read_errors == 0
    again.close()
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):  # the damaged file is kept as it was, for a look
        conn = sqlite3.connect(str(tmp_path / aside))
        try:
            conn.execute("SELECT count(*), sum(length(extra)) FROM results").fetchone()
        finally:
            conn.close()


def test_damaged_pages_found_by_a_read_set_the_file_aside(tmp_path):
    path = tmp_path / "c.sqlite"
    _damaged_database(path)
    c = DiskCache(str(path))
    assert c.get_many([k for k, *_ in _rows(2000, 100_000)]) == {} and c.read_errors == 1  # misses, never an error
    _wait(lambda: len(_set_aside_files(path)) == 1)
    c.put_many(_rows(10))
    assert c.flush(timeout=30) is True
    assert set(c.get_many([k for k, *_ in _rows(10)])) == {k for k, *_ in _rows(10)} and c.read_errors == 1
    c.close()


def test_a_damaged_schema_is_set_aside_when_the_cache_opens(tmp_path, caplog):
    path = tmp_path / "c.sqlite"
    _damaged_database(path)
    with open(path, "r+b") as f:  # keep SQLite's 100-byte header; overwrite the schema on the rest of page 1
        f.seek(100)
        f.write(b"\x07" * 3000)
    c = DiskCache(str(path))
    assert len(c.set_aside) == 1 and "moved it to" in caplog.text
    c.put_many(_rows(5))
    assert c.flush(timeout=30) is True and _on_disk(path) == set(range(5))
    c.close()


def test_a_cache_whose_file_another_set_aside_writes_to_the_fresh_file(tmp_path, caplog):
    path = tmp_path / "c.sqlite"
    _damaged_database(path)
    first, second = DiskCache(str(path)), DiskCache(str(path))  # both opened the damaged file
    first.put_many(_rows(100))
    assert first.flush(timeout=30) is True and len(first.set_aside) == 1  # the first sets it aside
    second.put_many(_rows(100, 100))
    assert second.flush(timeout=30) is True and second.set_aside == []  # the second follows; it sets nothing aside
    assert _on_disk(path) == set(range(200)) and len(_set_aside_files(path)) == 1
    assert "the path names another file now" in caplog.text
    assert len(second.get_many([k for k, *_ in _rows(200)])) == 200
    assert first.close() and second.close()


def _share_a_damaged_file(path: str, start: int, go) -> None:
    go.wait(60)
    c = DiskCache(path)
    c.put_many(_rows(300, start))
    ok = c.flush(timeout=60)
    c.close()
    if not ok:
        raise SystemExit(1)


def test_processes_sharing_a_damaged_file_set_it_aside_once_and_share_the_fresh_one(tmp_path):
    path = tmp_path / "c.sqlite"
    _damaged_database(path)
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    procs = [ctx.Process(target=_share_a_damaged_file, args=(str(path), n * 1000, go)) for n in range(3)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert len(_set_aside_files(path)) == 1
    assert _on_disk(path) == {n * 1000 + i for n in range(3) for i in range(300)}


def test_a_producer_on_a_damaged_cache_resolves_every_score_and_flush_waits_for_the_fresh_file(tmp_path):
    path = tmp_path / "c.sqlite"
    _damaged_database(path)
    payloads = [{"response": f"#### {i}", "ground_truth": "3"} for i in range(300)]
    with Producer(local_workers=1, cache_path=str(path)) as p:
        results = p.map("gsm8k", payloads, timeout=120)
        assert [r.score for r in results] == [1.0 if i == 3 else 0.0 for i in range(300)] and all(r.ok for r in results)
        assert p.flush(timeout=60) is True  # every result resolved so far is on disk now
        assert _count(path) == 300 and len(_set_aside_files(path)) == 1
        assert p.status()["producer"]["cache_rows_dropped"] == 0
    with pytest.raises(ProducerClosed):
        p.flush()


def test_flush_without_a_disk_cache_returns_at_once():
    with Producer(local_workers=0, bind=f"tcp://127.0.0.1:{free_port()}", cache_path=None) as p:
        assert p.flush(timeout=0.0) is True


def test_close_releases_every_connection_to_the_cache_file(tmp_path):
    path = tmp_path / "c.sqlite"
    p = Producer(local_workers=1, reward_modules=[TEST_REWARDS], cache_path=str(path))
    p.map("noop", [{"i": i} for i in range(50)], timeout=120)  # reads the disk tier on this thread
    done = threading.Event()
    release = threading.Event()

    def submit_from_a_thread_that_stays() -> None:  # its connection outlives its use: the thread is still alive
        p.map("noop", [{"i": i} for i in range(50, 100)], timeout=120)
        p.cache.disk.stats()  # a maintenance connection too
        done.set()
        release.wait(60)

    t = threading.Thread(target=submit_from_a_thread_that_stays)
    t.start()
    assert done.wait(120)
    assert p.flush(timeout=60)
    assert len(_fds_to(path)) >= 3  # connections are open (the database and its WAL, at least)
    p.close()
    try:
        assert _fds_to(path) == []  # before: the per-thread connections stayed open until garbage collection
    finally:
        release.set()
        t.join(60)
    assert _count(path) == 100
