"""A persistent result cache in SQLite that several processes on one host share.

WAL mode lets readers and one writer work at once across processes; writes go
through a background thread and are committed in batches, so the dispatcher
never waits on the disk.  Bounded by ``max_entries`` (oldest inserts evicted)
and ``ttl_s`` (older rows are ignored and purged).  Survives restarts: a judge
call paid for once is not paid again.
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
import time
from typing import Iterable, Optional

import msgpack

from ._cache import Entry

log = logging.getLogger("qworker")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key BLOB PRIMARY KEY,
    score REAL NOT NULL,
    extra BLOB NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS results_created ON results(created);
"""
_BATCH = 900  # below SQLite's default limit of bound parameters
_STOP = object()


class DiskCache:
    def __init__(self, path: str, *, max_entries: Optional[int] = None, ttl_s: Optional[float] = None) -> None:
        self.path = path
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._local = threading.local()
        self._queue: queue.Queue = queue.Queue()
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        conn = self._conn()  # creates the schema, and fails here on a bad path
        conn.executescript(_SCHEMA)
        self._writer = threading.Thread(target=self._write_loop, name="qworker-diskcache", daemon=True)
        self._writer.start()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=True)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, Entry]:
        """The cached entries among ``keys`` (missing and expired ones left out)."""
        keys = list(keys)
        found: dict[bytes, Entry] = {}
        conn = self._conn()
        oldest = time.time() - self.ttl_s if self.ttl_s is not None else 0.0
        for i in range(0, len(keys), _BATCH):
            chunk = keys[i : i + _BATCH]
            marks = ",".join("?" * len(chunk))
            rows = conn.execute(
                f"SELECT key, score, extra FROM results WHERE created >= ? AND key IN ({marks})", [oldest, *chunk]
            )
            for key, score, extra in rows:
                found[bytes(key)] = (score, msgpack.unpackb(extra, raw=False, strict_map_key=False))
        return found

    def put(self, key: bytes, score: float, extra: dict) -> None:
        """Queue a write; it is committed within ~50 ms (``flush`` waits for it)."""
        self.put_many([(key, score, extra)])

    def put_many(self, items: list[tuple[bytes, float, dict]]) -> None:
        """Queue several writes as one item (the dispatcher calls this once per result batch)."""
        if items:
            now = time.time()
            self._queue.put([(key, score, msgpack.packb(extra, use_bin_type=True), now) for key, score, extra in items])

    def flush(self, timeout: float = 30.0) -> None:
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout)

    def close(self) -> None:
        self._queue.put(_STOP)
        self._writer.join(timeout=30.0)

    def _write_loop(self) -> None:
        conn = self._conn()
        last_purge = time.monotonic()
        while True:
            item = self._queue.get()
            batch, waiters, stop = [], [], False
            while True:
                if item is _STOP:
                    stop = True
                elif isinstance(item, threading.Event):
                    waiters.append(item)
                else:
                    batch.extend(item)
                try:
                    item = self._queue.get(timeout=0.05) if len(batch) < 10_000 else self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                try:
                    self._write(conn, batch)
                except sqlite3.Error as exc:
                    log.error("disk cache %s: write of %d results failed: %s", self.path, len(batch), exc)
            if self.ttl_s is not None and time.monotonic() - last_purge > 60:
                last_purge = time.monotonic()
                conn.execute("DELETE FROM results WHERE created < ?", (time.time() - self.ttl_s,))
            for w in waiters:
                w.set()
            if stop:
                conn.close()
                return

    def _write(self, conn: sqlite3.Connection, batch: list) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR REPLACE INTO results(key, score, extra, created) VALUES (?,?,?,?)", batch)
            if self.max_entries is not None:
                # rowids grow with each insert, so this keeps the newest max_entries rows
                conn.execute(
                    "DELETE FROM results WHERE rowid <= (SELECT max(rowid) FROM results) - ?", (self.max_entries,)
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
