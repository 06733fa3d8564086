"""A persistent result cache in SQLite that several processes on one host share.

WAL mode lets readers and one writer work at once across processes.  Writes go
through a background thread, so the dispatcher never waits on the disk.

Durability is bounded in time, whatever the arrival pattern: a row handed to
``put_many`` is committed within ``COMMIT_WITHIN_S`` (0.1 s).  The writer
collects rows for at most ``LINGER_S`` (20 ms) counted from when the *oldest*
uncommitted row was handed over (not from the last arrival, so a steady stream
cannot postpone the commit), or until it holds ``MAX_ROWS`` rows, then commits
them in one transaction.  The rest of the bound is the commit itself: a few ms
for thousands of rows on a local disk.  It holds while the disk keeps up with
the arrival rate (``bench/diskcache.py`` measures both); a producer killed with
SIGKILL therefore loses at most the results it received in the last 0.1 s, and
a rerun pays only for those again.  ``synchronous=NORMAL``: a committed row
survives the process dying; an OS crash or power loss may lose the last
commits.

Bounded by ``max_entries`` (oldest inserts evicted) and ``ttl_s`` (older rows
are ignored and purged).  Each row records the reward that produced it, so
``qworker cache stats|clear --reward NAME`` can count and clear one reward's
rows; a file from before that column existed is migrated when opened (its old
rows have no reward recorded: ``clear`` without ``--reward`` removes them).
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
import time
from typing import Iterable, Optional, Sequence

import msgpack

from ._cache import Entry

log = logging.getLogger("qworker")

COMMIT_WITHIN_S = 0.1  # the stated bound from put_many to commit, seconds
LINGER_S = 0.02  # how long the writer collects rows, from the oldest uncommitted row's hand-over
MAX_ROWS = 5000  # rows per transaction, so one commit stays short
UNRECORDED = "(unrecorded)"  # how stats name rows written before rewards were recorded

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS results (key BLOB PRIMARY KEY, score REAL NOT NULL, extra BLOB NOT NULL, "
    "created REAL NOT NULL, reward TEXT)",
    "CREATE INDEX IF NOT EXISTS results_created ON results(created)",
)
_BATCH = 900  # below SQLite's default limit of bound parameters
_STOP = object()


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=True)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    """Create the schema, or add the ``reward`` column to a file from an older qworker."""
    conn.execute("BEGIN IMMEDIATE")  # one process migrates; the others then see the column
    try:
        for statement in _SCHEMA:
            conn.execute(statement)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(results)")}
        if "reward" not in columns:
            conn.execute("ALTER TABLE results ADD COLUMN reward TEXT")
            log.info("disk cache %s: added the 'reward' column; existing rows have none recorded", path)
        conn.execute("CREATE INDEX IF NOT EXISTS results_reward ON results(reward)")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class DiskCache:
    """Results by task key, in SQLite at ``path`` (parent directories are created)."""

    def __init__(self, path: str, *, max_entries: Optional[int] = None, ttl_s: Optional[float] = None) -> None:
        self.path = path
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.commits = 0
        self.max_commit_lag_s = 0.0  # the longest put-to-commit time seen, seconds
        self._local = threading.local()
        self._queue: queue.Queue = queue.Queue()
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        _migrate(self._conn(), path)  # fails here on a bad path
        self._writer = threading.Thread(target=self._write_loop, name="qworker-diskcache", daemon=True)
        self._writer.start()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _connect(self.path)
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

    def put(self, key: bytes, score: float, extra: dict, reward: Optional[str] = None) -> None:
        """Queue a write; it is committed within ``COMMIT_WITHIN_S`` (``flush`` waits for it)."""
        self.put_many([(key, score, extra, reward)])

    def put_many(self, items: Sequence[tuple]) -> None:
        """Queue ``(key, score, extra[, reward])`` rows as one item (the dispatcher calls this once per result batch)."""
        if items:
            now = time.time()
            rows = [(it[0], it[1], msgpack.packb(it[2], use_bin_type=True), now, it[3] if len(it) > 3 else None) for it in items]
            self._queue.put((time.monotonic(), rows))

    def flush(self, timeout: float = 30.0) -> None:
        """Commit everything queued so far now; returns when it is committed (or after ``timeout`` s)."""
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout)

    def close(self) -> None:
        """Commit what is queued and stop the writer."""
        self._queue.put(_STOP)
        self._writer.join(timeout=30.0)

    # maintenance (the caller's thread) ------------------------------------------
    def stats(self) -> dict:
        """Rows per reward (``UNRECORDED`` for rows from before rewards were recorded), and file sizes in bytes."""
        rewards = {
            (name if name is not None else UNRECORDED): {"rows": n, "oldest": oldest, "newest": newest}
            for name, n, oldest, newest in self._conn().execute(
                "SELECT reward, count(*), min(created), max(created) FROM results GROUP BY reward ORDER BY reward"
            )
        }
        size = sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))
        return {"path": self.path, "rows": sum(r["rows"] for r in rewards.values()), "bytes": size, "rewards": rewards}

    def clear(self, reward: Optional[str] = None) -> int:
        """Delete every row, or one reward's; returns how many.  Queued writes are committed first."""
        self.flush()
        conn = self._conn()
        if reward is None:
            deleted = conn.execute("DELETE FROM results").rowcount
        else:
            deleted = conn.execute("DELETE FROM results WHERE reward = ?", (reward,)).rowcount
        try:  # give the space back; skipped while another process holds the file
            conn.execute("VACUUM")
        except sqlite3.OperationalError as exc:
            log.info("disk cache %s: not compacted (%s)", self.path, exc)
        return deleted

    # the writer thread ------------------------------------------------------------
    def _write_loop(self) -> None:
        conn = self._conn()
        last_purge = time.monotonic()
        while True:
            batch, waiters, stop, oldest = self._collect()
            if batch:
                try:
                    self._write(conn, batch)
                    self.commits += 1
                    self.max_commit_lag_s = max(self.max_commit_lag_s, time.monotonic() - oldest)
                except sqlite3.Error as exc:
                    log.error("disk cache %s: write of %d results failed: %s", self.path, len(batch), exc)
            if self.ttl_s is not None and time.monotonic() - last_purge > 60:
                last_purge = time.monotonic()
                try:  # like a failed write, a failed purge must not end the writer: every later put would wait for ever
                    conn.execute("DELETE FROM results WHERE created < ?", (time.time() - self.ttl_s,))
                except sqlite3.Error as exc:
                    log.error("disk cache %s: purge of expired results failed: %s", self.path, exc)
            for w in waiters:
                w.set()
            if stop:
                conn.close()
                return

    def _collect(self) -> tuple[list, list[threading.Event], bool, float]:
        """Block for the next item, then gather rows until the oldest is ``LINGER_S`` old,
        ``MAX_ROWS`` are held, or a flush or stop asks for a commit now."""
        item = self._queue.get()
        batch: list = []
        waiters: list[threading.Event] = []
        oldest = time.monotonic()
        while True:
            if item is _STOP:
                return batch, waiters, True, oldest
            if isinstance(item, threading.Event):
                waiters.append(item)
                return batch, waiters, False, oldest
            handed, rows = item
            if not batch:
                oldest = handed
            batch.extend(rows)
            left = oldest + LINGER_S - time.monotonic()
            if len(batch) >= MAX_ROWS or left <= 0:
                return batch, waiters, False, oldest
            try:
                item = self._queue.get(timeout=left)
            except queue.Empty:
                return batch, waiters, False, oldest

    def _write(self, conn: sqlite3.Connection, batch: list) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR REPLACE INTO results(key, score, extra, created, reward) VALUES (?,?,?,?,?)", batch)
            if self.max_entries is not None:
                # rowids grow with each insert, so this keeps the newest max_entries rows
                conn.execute(
                    "DELETE FROM results WHERE rowid <= (SELECT max(rowid) FROM results) - ?", (self.max_entries,)
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
