"""The disk cache's writer: a thread that commits rows in batches, and keeps them when the disk fails.

Durability is bounded in time, whatever the arrival pattern: a row handed to
``put`` is committed within ``COMMIT_WITHIN_S`` (0.1 s).  The writer collects
rows for at most ``LINGER_S`` (20 ms) counted from when the *oldest*
uncommitted row was handed over (not from the last arrival, so a steady stream
cannot postpone the commit), or until it holds ``MAX_ROWS`` rows, then commits
them in one transaction.  The rest of the bound is the commit itself: a few ms
for thousands of rows on a local disk.  It holds while the disk keeps up with
the arrival rate (``bench/diskcache.py`` measures both).

When the disk fails, nothing is dropped silently.  A write that fails (disk
full, "database is locked" for over ``WRITE_BUSY_S`` because another process
holds the file, as ``qworker cache clear``'s VACUUM does, an I/O error) is
logged with SQLite's own error, and its rows stay queued in memory and are
retried, oldest first, after ``RETRY_FIRST_S`` doubling to ``RETRY_MAX_S``.
A write that finds the file itself damaged (SQLITE_CORRUPT, SQLITE_NOTADB)
has the file set aside and a fresh one made (``cache.file``), and its rows go
to the fresh file at once; so does a read that finds it damaged
(``report_damage``), and a file another process set aside is followed before
each commit.
At most ``MAX_UNWRITTEN`` rows wait; beyond that the oldest are dropped and
counted (``rows_dropped``), as are single rows SQLite refuses (a NaN score).
``flush`` says whether every row handed over before it was committed (False
while the disk still fails, or if rows were dropped); ``close`` keeps retrying
for its timeout (one try on a damaged file), then logs how many rows it could
not write.  Each kind of
failure is logged at most once per ``WARN_EVERY_S``.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from collections import deque
from itertools import islice
from typing import Any, Optional, Sequence

from .file import CacheFile, is_damage, rollback

log = logging.getLogger("qworker")

COMMIT_WITHIN_S = 0.1  # the stated bound from put to commit while the disk keeps up, seconds
LINGER_S = 0.02  # how long the writer collects rows, from the oldest uncommitted row's hand-over
MAX_ROWS = 5000  # rows per transaction, so one commit stays short
MAX_UNWRITTEN = 100_000  # rows held while writes fail; beyond it the oldest are dropped
RETRY_FIRST_S = 0.1  # the first wait after a failed write, doubling per failure ...
RETRY_MAX_S = 5.0  # ... up to this
WRITE_BUSY_S = 1.0  # the writer waits this long for another connection's lock, then counts a failure and retries
WARN_EVERY_S = 60.0  # each kind of failure is logged at most this often

_INSERT = "INSERT OR REPLACE INTO results(key, score, extra, created, reward) VALUES (?,?,?,?,?)"
_STOP = object()
_FLUSH = object()
_WAKE = object()  # a read reported the file damaged
# a row SQLite refuses on its own (NaN score: NOT NULL), not a failing disk: written one by one, the bad ones dropped
_ROW_ERRORS = (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError, sqlite3.DataError,
               OverflowError, TypeError, ValueError)


class Throttled:
    """Log the first failure of each kind at once, then at most one line per kind per ``WARN_EVERY_S``
    saying how many were not logged (a kind: SQLite's error name, or the exception's type)."""

    def __init__(self, level: int) -> None:
        self.level = level
        self._kinds: dict[str, tuple[float, int]] = {}  # kind -> (next line due, lines held back)

    def __call__(self, kind: str, msg: str, *args: Any) -> None:
        now = time.monotonic()
        due, quiet = self._kinds.get(kind, (0.0, 0))
        if now < due:
            self._kinds[kind] = (due, quiet + 1)
            return
        if quiet:
            msg += f" ({quiet} more like it since the last report)"
        self._kinds[kind] = (now + WARN_EVERY_S, 0)
        log.log(self.level, msg, *args, stacklevel=2)


def kind(exc: BaseException) -> str:
    return getattr(exc, "sqlite_errorname", None) or type(exc).__name__



class DiskWriter:
    """Commits ``(key, score, packed extra, created, reward)`` rows to ``file`` from a thread of its own.

    Counters, read from any thread: ``commits``, ``max_commit_lag_s``, ``write_errors`` (failed write
    attempts, each retried), ``rows_dropped``, ``last_error``; ``unwritten`` is the rows handed over and
    not yet committed (nor dropped).
    """

    def __init__(self, file: CacheFile, *, max_entries: Optional[int], ttl_s: Optional[float]) -> None:
        self.path = file.path
        self._file = file
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.commits = 0
        self.max_commit_lag_s = 0.0  # the longest put-to-commit time seen, seconds
        self.write_errors = 0
        self.rows_dropped = 0
        self.last_error = ""  # the last failed write's error, as SQLite put it
        self._queue: queue.Queue = queue.Queue()
        self._cond = threading.Condition()
        self._handed = 0  # rows handed to put (each row's sequence number is its place in this count)
        self._settled = 0  # rows, oldest first, committed or dropped: unwritten = handed - settled
        self._flushed = 0  # rows handed over before the last flush call (flush answers for those after)
        self._drops: deque[tuple[int, int]] = deque(maxlen=1024)  # sequence ranges of dropped rows
        self._held: deque[tuple] = deque()  # the writer's rows, oldest first: the first is row number _settled
        self._handed_at: deque[tuple[int, float]] = deque()  # (end sequence, monotonic hand-over) per put
        self._forget: list[tuple[bytes, Any]] = []  # damaged rows to delete
        self._write_warn = Throttled(logging.ERROR)
        self._drop_warn = Throttled(logging.ERROR)
        self._close_by = float("inf")
        self._damaged_file = False  # the last write failed on a damaged file that was not set aside
        self._reported: Optional[tuple[str, int]] = None  # a read found the file damaged: (error, file generation)
        self._thread = threading.Thread(target=self._write_loop, name="qworker-diskcache", daemon=True)
        self._thread.start()

    @property
    def unwritten(self) -> int:
        return self._handed - self._settled

    def put(self, rows: list[tuple]) -> None:
        """Queue rows as one item; committed within ``COMMIT_WITHIN_S`` while the disk keeps up."""
        with self._cond:  # sequence numbers in queue order
            self._handed += len(rows)
            self._queue.put((time.monotonic(), self._handed, rows))

    def report_damage(self, why: str, generation: int) -> None:
        """A read on a connection opened on file ``generation`` found the file damaged (``why``: SQLite's error);
        the writer sets the file aside (in its own thread, so that no commit goes to a file set aside)."""
        self._reported = (why, generation)
        self._queue.put(_WAKE)

    def forget(self, key: bytes, extra: Any) -> None:
        """Delete the row with ``key`` if it still holds ``extra`` (a damaged row a read found), at the next chance."""
        self._forget.append((key, extra))

    def flush(self, timeout: float = 30.0) -> bool:
        """Commit what is queued now.  True once every row handed over before the call is committed;
        False after ``timeout`` s while the disk still fails (the rows stay queued), or when rows handed
        over since the previous flush were dropped."""
        deadline = time.monotonic() + timeout
        with self._cond:
            first, target = self._flushed, self._handed
            self._flushed = max(self._flushed, target)
        self._queue.put(_FLUSH)
        with self._cond:
            while self._settled < target:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(min(left, 0.5))
            return not self._dropped_between(first, target)

    def _dropped_between(self, first: int, end: int) -> bool:
        if len(self._drops) == self._drops.maxlen and self._drops[0][0] > first:
            return True  # the record no longer reaches back that far: do not claim success
        return any(lo < end and hi > first for lo, hi in self._drops)

    def close(self, timeout: float = 10.0) -> bool:
        """Commit what is queued and stop the writer, retrying failed writes for up to ``timeout`` s
        (one try when the file is damaged).  Returns whether everything was written; logs an error
        naming the rows that were not."""
        self._close_by = time.monotonic() + timeout
        self._queue.put(_STOP)
        self._thread.join(timeout=timeout + 5.0)
        lost = self.unwritten
        if lost:
            log.error("disk cache %s: closed with %d results not written (last error: %s); a rerun pays for them again",
                      self.path, lost, self.last_error or "none")
        return lost == 0

    def _write_loop(self) -> None:
        file = self._file
        held = self._held
        stop = False
        retry_at: Optional[float] = None  # set while writes fail
        delay = RETRY_FIRST_S
        last_purge = time.monotonic()
        while True:
            try:
                reported, self._reported = self._reported, None
                if reported is not None and file.damaged(*reported) and retry_at is not None:
                    retry_at, delay, self._damaged_file = time.monotonic(), RETRY_FIRST_S, False  # a fresh file: try now
                if retry_at is not None:  # back off, still taking rows (and a stop) from the queue
                    if stop and (time.monotonic() >= self._close_by or self._damaged_file):
                        break  # a damaged file will not heal while we wait: do not hold up the exit
                    if self._take(min(retry_at, self._close_by), stop_only=True) and not stop:
                        stop, retry_at = True, time.monotonic()  # closing: try once more now, then until close's timeout
                    if time.monotonic() < retry_at:
                        continue
                elif not held:
                    if stop:
                        break
                    stop = self._take(None) or stop
                if held:
                    file.follow()
                    self._commit(file.connection("writer", WRITE_BUSY_S))
                    if retry_at is not None:
                        log.warning("disk cache %s: writing again after failed attempts (the last: %s); %d results wait",
                                    self.path, self.last_error, len(held))
                    retry_at, delay = None, RETRY_FIRST_S
                    if held:  # more than one transaction's worth: what arrived meanwhile joins the next commit
                        stop = self._take(time.monotonic(), stop_only=True) or stop
                        continue
                if self._forget:
                    self._delete_damaged(file.connection("writer", WRITE_BUSY_S))
                if self.ttl_s is not None and time.monotonic() - last_purge > 60:
                    last_purge = time.monotonic()
                    try:  # like a failed write, a failed purge must not end the writer
                        file.connection("writer", WRITE_BUSY_S).execute("DELETE FROM results WHERE created < ?", (time.time() - self.ttl_s,))
                    except sqlite3.Error as exc:
                        log.error("disk cache %s: purge of expired results failed: %s", self.path, exc)
            except Exception as exc:  # the writer never ends on an error: every later row would be lost
                self.last_error = f"{type(exc).__name__}: {exc}"
                generation = file.generation_of("writer")
                if getattr(exc, "sqlite_errorname", "") not in ("SQLITE_BUSY", "SQLITE_FULL"):
                    file.drop("writer")  # an I/O error may have left it unusable: reopen for the next try
                if is_damage(exc) and file.damaged(self.last_error, generation):
                    self.write_errors += 1  # the set-aside's warning names the error
                    self._damaged_file = False
                    retry_at, delay = time.monotonic(), RETRY_FIRST_S  # the rows go to the fresh file now
                    continue
                self._damaged_file = is_damage(exc)
                self._write_warn(kind(exc), "disk cache %s: writing %d results failed (%s); they stay queued and are retried in %.1f s",
                                 self.path, len(held), self.last_error, delay)
                self.write_errors += 1  # after the warning: whoever sees the count can find its line in the log
                retry_at = time.monotonic() + delay
                delay = min(2 * delay, RETRY_MAX_S)
        file.drop("writer")

    def _take(self, until: Optional[float], *, stop_only: bool = False) -> bool:
        """Move queued rows into ``_held``; returns True on a stop.  With ``until`` None: block for the
        first rows, then gather until the oldest is ``LINGER_S`` old, ``MAX_ROWS`` are held, or a flush
        asks for a commit now.  Otherwise gather until ``until`` (a flush then does not cut it short)."""
        held = self._held
        deadline = until
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                item = self._queue.get(timeout=timeout) if timeout != 0.0 else self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is _STOP:
                return True
            if item is _WAKE:
                return False
            if item is _FLUSH:
                if stop_only:
                    continue
                return False
            handed, end, rows = item
            held.extend(rows)
            self._handed_at.append((end, handed))
            if len(held) > MAX_UNWRITTEN:
                self._drop_oldest(len(held) - MAX_UNWRITTEN)
            if deadline is None:
                deadline = handed + LINGER_S
            if not stop_only and len(held) >= MAX_ROWS:
                return False

    def _settle(self, n: int, dropped: Sequence[tuple[int, int]] = ()) -> None:
        """The oldest ``n`` held rows are committed or dropped (``dropped``: their sequence ranges)."""
        for _ in range(n):
            self._held.popleft()
        with self._cond:
            self._drops.extend(dropped)
            self._settled += n
            while self._handed_at and self._handed_at[0][0] <= self._settled:
                self._handed_at.popleft()
            self._cond.notify_all()

    def _drop_oldest(self, n: int) -> None:
        first = self._settled
        self.rows_dropped += n
        self._settle(n, [(first, first + n)])
        self._drop_warn("bound", "disk cache %s: over %d results wait for the disk (%s); dropped the oldest %d (%d in all)",
                        self.path, MAX_UNWRITTEN, self.last_error or "not written yet", n, self.rows_dropped)

    def _commit(self, conn: sqlite3.Connection) -> None:
        """Write the oldest ``MAX_ROWS`` held rows in one transaction; raises (and keeps them held) on failure."""
        chunk = list(islice(self._held, MAX_ROWS))
        oldest = self._handed_at[0][1] if self._handed_at else time.monotonic()
        conn.execute("BEGIN IMMEDIATE")
        try:
            bad: list[int] = []
            try:
                conn.executemany(_INSERT, chunk)
            except _ROW_ERRORS:
                bad = self._insert_one_by_one(conn, chunk)
            if self.max_entries is not None:
                # rowids grow with each insert, so this keeps the newest max_entries rows
                conn.execute("DELETE FROM results WHERE rowid <= (SELECT max(rowid) FROM results) - ?", (self.max_entries,))
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise
        self.commits += 1
        self.max_commit_lag_s = max(self.max_commit_lag_s, time.monotonic() - oldest)
        first = self._settled
        if bad:
            self.rows_dropped += len(bad)
            self._drop_warn("refused", "disk cache %s: SQLite refused %d results (e.g. a NaN score); they are not cached", self.path, len(bad))
        self._settle(len(chunk), [(first + i, first + i + 1) for i in bad])

    @staticmethod
    def _insert_one_by_one(conn: sqlite3.Connection, chunk: list) -> list[int]:
        """Inside the open transaction, insert each row alone; returns the indices SQLite refused."""
        bad = []
        for i, row in enumerate(chunk):
            try:
                conn.execute(_INSERT, row)
            except _ROW_ERRORS:
                bad.append(i)
        return bad

    def _delete_damaged(self, conn: sqlite3.Connection) -> None:
        """Delete the rows reads found damaged (only while they still hold the same bytes)."""
        damaged, self._forget = self._forget, []
        for key, extra in damaged:
            try:
                conn.execute("DELETE FROM results WHERE key = ? AND extra IS ?", (key, extra))
            except sqlite3.Error as exc:
                log.debug("disk cache %s: could not delete a damaged row: %s", self.path, exc)
