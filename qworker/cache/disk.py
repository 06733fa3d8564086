"""A persistent result cache in SQLite that several processes on one host share.

WAL mode lets readers and one writer work at once across processes.  Writes go
through a background thread, so the dispatcher never waits on the disk.

Durability is bounded in time: a row handed to ``put_many`` is committed within
``COMMIT_WITHIN_S`` (0.1 s) while the disk keeps up with the arrival rate
(``cache.writer`` says how; ``bench/diskcache.py`` measures it); a producer
killed with SIGKILL therefore loses at most the results it received in the
last 0.1 s, and a rerun pays only for those again.  ``synchronous=NORMAL``: a
committed row survives the process dying; an OS crash or power loss may lose
the last commits.

When the disk fails (full, locked by another process, I/O errors), no result
is dropped silently: the rows stay queued and are retried with backoff, up to
``MAX_UNWRITTEN`` rows (the oldest beyond are dropped and counted), and
``unwritten``, ``write_errors`` and ``rows_dropped`` say so (the producer's
status reports them).  ``flush`` and ``close`` return whether every row was
written, and ``close`` logs how many were not.

Reads never raise: a failed read (locked for over ``READ_BUSY_S``, I/O error,
a damaged page) answers the keys as misses (``read_errors``), and a row that
does not decode is skipped, counted once (``corrupt_rows``) and deleted by the
writer; each kind of failure is logged at most once per ``WARN_EVERY_S``.

The file (``cache.file``): one that is not an SQLite database is refused at
open (``CacheError`` naming it); a database found damaged (at open, on a read
or on a write) is set aside as ``<name>.corrupt-<UTC time>`` with one warning
and replaced by a fresh one, and the rows waiting to be written go there.
``close`` closes every connection the cache opened, in any thread.

Bounded by ``max_entries`` (oldest inserts evicted) and ``ttl_s`` (older rows
are ignored and purged).  Each row records the reward that produced it, so
``qworker cache stats|clear --reward NAME`` can count and clear one reward's
rows; a file from before that column existed is migrated when opened (its old
rows have no reward recorded: ``clear`` without ``--reward`` removes them).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from typing import Any, Iterable, Optional, Sequence

import msgpack

from .file import CacheFile, Connect, is_damage
from .memory import Entry
from .writer import COMMIT_WITHIN_S, MAX_UNWRITTEN, WARN_EVERY_S, DiskWriter, Throttled, kind

__all__ = ["COMMIT_WITHIN_S", "MAX_UNWRITTEN", "UNRECORDED", "WARN_EVERY_S", "Connect", "DiskCache", "default_connect"]

log = logging.getLogger("qworker")

READ_BUSY_S = 1.0  # a read waits this long for a lock, then answers misses
MAINTENANCE_BUSY_S = 30.0  # stats and clear, from the command line
UNRECORDED = "(unrecorded)"  # how stats name rows written before rewards were recorded

_BATCH = 900  # below SQLite's default limit of bound parameters


def default_connect(path: str, busy_s: float) -> sqlite3.Connection:
    """The default ``Connect``: WAL, ``synchronous=NORMAL``, autocommit (transactions are explicit)."""
    conn = sqlite3.connect(path, timeout=busy_s, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def _decode(score: Any, extra: Any) -> Optional[Entry]:
    """A row's entry, or None when it does not decode (a damaged row)."""
    if type(score) is not float and type(score) is not int:
        return None
    try:
        value = msgpack.unpackb(extra, raw=False, strict_map_key=False)
    except Exception:  # FormatError, ExtraData, UnpackValueError, TypeError (not bytes)
        return None
    return (float(score), value) if isinstance(value, dict) else None


class DiskCache:
    """Results by task key, in SQLite at ``path`` (parent directories are created).

    Raises ``CacheError`` naming ``path`` when it is not an SQLite database or cannot be opened.
    ``connect`` opens each connection (default ``default_connect``; tests inject disk faults with
    their own, or by replacing ``default_connect`` for the caches a producer makes).
    Counters, read from any thread: ``read_errors``, ``corrupt_rows``, and the writer's
    (``unwritten``, ``write_errors``, ``rows_dropped``, ``commits``, ``max_commit_lag_s``).
    """

    def __init__(self, path: str, *, max_entries: Optional[int] = None, ttl_s: Optional[float] = None,
                 connect: Optional[Connect] = None) -> None:
        self.path = path
        self.ttl_s = ttl_s
        self.read_errors = 0
        self.corrupt_rows = 0
        self._corrupt_seen: set[bytes] = set()
        self._read_warn = Throttled(logging.WARNING)
        # ``default_connect`` is looked up now: tests may replace it
        self._file = CacheFile(path, connect=connect if connect is not None else default_connect)
        self._writer = DiskWriter(self._file, max_entries=max_entries, ttl_s=ttl_s)

    @property
    def set_aside(self) -> list[str]:
        """Where damaged files were moved (``<path>.corrupt-<UTC time>``), oldest first."""
        return self._file.set_aside

    # the writer's counters
    @property
    def unwritten(self) -> int:
        """Rows handed over and not yet committed (nor dropped)."""
        return self._writer.unwritten

    @property
    def write_errors(self) -> int:
        """Failed write attempts (each retried)."""
        return self._writer.write_errors

    @property
    def rows_dropped(self) -> int:
        return self._writer.rows_dropped

    @property
    def commits(self) -> int:
        return self._writer.commits

    @property
    def max_commit_lag_s(self) -> float:
        """The longest put-to-commit time seen, seconds."""
        return self._writer.max_commit_lag_s

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection for maintenance (stats, clear)."""
        return self._file.connection("maintenance", MAINTENANCE_BUSY_S)

    # reads (the caller's thread) ------------------------------------------------
    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, Entry]:
        """The cached entries among ``keys`` (missing, expired and damaged ones left out).  Never raises:
        a failed read answers misses."""
        found: dict[bytes, Entry] = {}
        if self._file.closed:
            return found
        try:
            keys = list(keys)
            if not keys:
                return found
            conn = self._file.connection("reader", READ_BUSY_S)
            oldest = time.time() - self.ttl_s if self.ttl_s is not None else 0.0
            for i in range(0, len(keys), _BATCH):
                chunk = keys[i : i + _BATCH]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(
                    f"SELECT key, score, extra FROM results WHERE created >= ? AND key IN ({marks})", [oldest, *chunk]
                )
                for key, score, extra in rows:
                    entry = _decode(score, extra)
                    if entry is None:
                        self._damaged(bytes(key), extra)
                    else:
                        found[bytes(key)] = entry
        except Exception as exc:  # sqlite3.Error (locked, I/O error, malformed page), MemoryError...
            self.read_errors += 1
            self._read_warn(kind(exc), "disk cache %s: a read failed, its keys count as misses: %s: %s", self.path, type(exc).__name__, exc)
            if is_damage(exc):
                self._writer.report_damage(f"{type(exc).__name__}: {exc}", self._file.generation_of("reader"))
            if getattr(exc, "sqlite_errorname", "") != "SQLITE_BUSY":
                self._file.drop("reader")
        return found

    def _damaged(self, key: bytes, extra: Any) -> None:
        if key in self._corrupt_seen:  # reported already; the writer deletes it
            return
        if len(self._corrupt_seen) > 100_000:
            self._corrupt_seen.clear()
        self._corrupt_seen.add(key)
        self.corrupt_rows += 1
        self._writer.forget(key, extra)
        self._read_warn("damaged", "disk cache %s: skipped a damaged row (key %s); it counts as a miss and is deleted", self.path, key.hex())

    # writes -----------------------------------------------------------------------
    def put(self, key: bytes, score: float, extra: dict, reward: Optional[str] = None) -> None:
        """Queue a write; it is committed within ``COMMIT_WITHIN_S`` while the disk keeps up (``flush`` waits for it)."""
        self.put_many([(key, score, extra, reward)])

    def put_many(self, items: Sequence[tuple]) -> None:
        """Queue ``(key, score, extra[, reward])`` rows as one item (the dispatcher calls this once per result batch)."""
        if items:
            now = time.time()
            rows = [(it[0], it[1], msgpack.packb(it[2], use_bin_type=True), now, it[3] if len(it) > 3 else None) for it in items]
            self._writer.put(rows)

    def flush(self, timeout: float = 30.0) -> bool:
        """Commit what is queued now.  True once every row handed over before the call is committed;
        False after ``timeout`` s while the disk still fails (the rows stay queued), or when rows handed
        over since the previous flush were dropped."""
        return self._writer.flush(timeout)

    def close(self, timeout: float = 10.0) -> bool:
        """Commit what is queued and stop the writer, retrying failed writes for up to ``timeout`` s, then
        close every connection to the file (reads then answer misses).  Returns whether everything was
        written; logs an error naming the rows that were not."""
        try:
            return self._writer.close(timeout)
        finally:
            self._file.close()

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
