"""The SQLite file behind the disk cache: its schema, every connection to it, and a damaged file set aside.

* **Not a database.**  A file whose first bytes are not SQLite's header is
  refused when the cache opens, with ``CacheError`` naming it (the command line
  prints that one line and exits 2).  qworker never moves or changes such a
  file: it may be something else, named by mistake.  An empty file is a new
  database.
* **A damaged database** (SQLite answers SQLITE_CORRUPT or SQLITE_NOTADB for a
  file with SQLite's header, when the cache opens it, reads it or writes to
  it) is renamed ``<name>.corrupt-<UTC time>`` (with its ``-wal`` and ``-shm``,
  renamed alike, so it can still be opened and inspected), one warning names
  the new name, and a fresh file takes its place.  Results waiting to be
  written go to the fresh file; what the old file held is computed again when
  asked for.  A fresh file found damaged again within ``SET_ASIDE_EVERY_S`` is
  not set aside again (then the disk, not the file, is failing): its writes are
  retried as on any failing disk.
* **Several processes share one file.**  Setting a file aside holds an
  exclusive ``flock`` on its folder, and renames the file only while its path
  still names the file this cache opened; a process whose file another process
  set aside opens the fresh one (``follow``, before each commit).  Connections
  open under the same lock, so none pairs the file being set aside with the
  fresh file's WAL.
* **Connections.**  Each thread has its own connection per role
  (``connection``); one opened before the file was replaced is reopened on the
  fresh file at its next use; ``close`` closes every one, from any thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
import time
import weakref
from typing import Callable, Iterator, Optional

from .._exceptions import CacheError

__all__ = ["HEADER", "SET_ASIDE_EVERY_S", "CacheFile", "Connect", "is_damage", "migrate"]

log = logging.getLogger("qworker")

Connect = Callable[[str, float], sqlite3.Connection]  # (path, busy timeout in s) -> a connection

HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database
SET_ASIDE_EVERY_S = 60.0  # a file is set aside at most this often by one cache
OPEN_BUSY_S = 30.0  # creating or migrating the schema waits this long for another process's lock
FOLDER_LOCK_S = 10.0  # setting a file aside waits this long for another process doing the same

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS results (key BLOB PRIMARY KEY, score REAL NOT NULL, extra BLOB NOT NULL, "
    "created REAL NOT NULL, reward TEXT)",
    "CREATE INDEX IF NOT EXISTS results_created ON results(created)",
)


def rollback(conn: sqlite3.Connection) -> None:
    """End a failed transaction without replacing the error that failed it (SQLITE_FULL has already rolled back)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.debug("rollback after a failed transaction: %s", exc)


def migrate(conn: sqlite3.Connection, path: str) -> None:
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
        rollback(conn)
        raise


def is_damage(exc: BaseException) -> bool:
    """Whether SQLite said the file itself is damaged (SQLITE_CORRUPT*, SQLITE_NOTADB)."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    return name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB"


def _has_sqlite_header(path: str) -> bool:
    """True for a missing or empty file (SQLite makes a new database there) and for one that starts
    with SQLite's header.  Raises OSError when the file cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(HEADER))
    except FileNotFoundError:
        return True
    return head in (b"", HEADER)


def _file_id(path: str) -> Optional[tuple[int, int]]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _aside_name(path: str) -> str:
    """``<path>.corrupt-<UTC time>``, with a counter when that name (or its -wal, -shm) is taken."""
    base = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    name, n = base, 1
    while any(os.path.lexists(name + suffix) for suffix in ("", "-wal", "-shm")):
        n += 1
        name = f"{base}-{n}"
    return name


@contextlib.contextmanager
def _folder_lock(path: str, timeout: float = FOLDER_LOCK_S) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``'s folder, held while a file is set aside and while a connection opens
    (so that no connection opens a file set aside and the fresh file's WAL).  Not a lock on a file SQLite
    has open: closing another descriptor of a database file would drop SQLite's own locks on it.  Raises
    TimeoutError after ``timeout`` s; where the folder cannot be locked (not readable, or a file system
    without ``flock``), goes on without it."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd = os.open(folder, os.O_RDONLY)
    except PermissionError as exc:  # a folder we may write in but not read
        log.debug("disk cache %s: cannot lock its folder (%s); going on without", path, exc)
        yield
        return
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another process held the lock on {folder} for over {timeout:.0f} s") from None
                time.sleep(0.005)
            except OSError as exc:
                log.debug("disk cache %s: cannot lock its folder (%s); going on without", path, exc)
                break
        yield
    finally:
        os.close(fd)  # releases the lock


class _Slot:
    """One thread's connection for one role, and the file generation it was opened on."""

    __slots__ = ("__weakref__", "conn", "generation")

    def __init__(self) -> None:
        self.conn: Optional[sqlite3.Connection] = None
        self.generation = -1


class CacheFile:
    """The SQLite file at ``path`` (parent folders are created), opened with ``connect``.

    The constructor refuses a file that is not a database (``CacheError`` naming it), sets a damaged one
    aside, and creates or migrates the schema.  ``generation`` counts the times the path came to name a
    new file; ``set_aside`` lists where this cache moved damaged files.
    """

    def __init__(self, path: str, *, connect: Connect) -> None:
        self.path = path
        self.generation = 0
        self.set_aside: list[str] = []
        self.closed = False
        self._connect = connect
        self._lock = threading.Lock()  # held while connections are opened and while the file is replaced
        self._local = threading.local()
        self._slots: weakref.WeakSet[_Slot] = weakref.WeakSet()  # a thread's slots go when the thread does
        self._id: Optional[tuple[int, int]] = None  # (device, inode) of the file the schema was made in
        self._last_set_aside = float("-inf")
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            database = _has_sqlite_header(path)
        except OSError as exc:
            raise CacheError(f"cannot use {path} as the result cache: {exc.strerror or exc}") from None
        if not database:
            raise CacheError(f"{path} is not an SQLite database: it cannot be a result cache "
                             "(name another file, or remove this one)")
        try:
            with _folder_lock(path):
                self._init_file()
        except OSError as exc:  # the folder lock
            raise CacheError(f"cannot open the result cache {path}: {exc}") from None
        except sqlite3.Error as exc:
            if not is_damage(exc):
                raise CacheError(f"cannot open the result cache {path}: {exc}") from None
            try:
                with self._lock:
                    self._replace(str(exc))
            except (sqlite3.Error, OSError) as again:
                raise CacheError(f"the result cache {path} is damaged ({exc}) and could not be set aside: {again}") from None

    def _init_file(self) -> None:
        """Create or migrate the schema in the file the path names now, and remember which file that is."""
        conn = self._connect(self.path, OPEN_BUSY_S)
        try:
            migrate(conn, self.path)
        finally:
            conn.close()
        self._id = _file_id(self.path)

    # connections ----------------------------------------------------------------------
    def connection(self, role: str, busy_s: float) -> sqlite3.Connection:
        """This thread's connection for ``role`` ("reader", "writer", "maintenance"), opened with a busy
        timeout of ``busy_s`` s; reopened if the file was replaced since.  Raises ``sqlite3.OperationalError``
        if the file is being set aside for over ``busy_s`` s, and ``sqlite3.ProgrammingError`` once closed."""
        slot = getattr(self._local, role, None)
        if slot is None:
            slot = _Slot()
            setattr(self._local, role, slot)
            with self._lock:
                self._slots.add(slot)
        if slot.conn is not None and slot.generation != self.generation:
            self._close_slot(slot)
        if slot.conn is None:
            if not self._lock.acquire(timeout=busy_s):  # not while the file is being set aside
                raise sqlite3.OperationalError(f"the disk cache {self.path} is being set aside")
            try:
                if self.closed:
                    raise sqlite3.ProgrammingError(f"the disk cache {self.path} is closed")
                slot.generation = self.generation
                try:
                    with _folder_lock(self.path, busy_s):
                        slot.conn = self._connect(self.path, busy_s)
                except OSError as exc:
                    raise sqlite3.OperationalError(f"cannot open {self.path}: {exc}") from exc
            finally:
                self._lock.release()
        return slot.conn

    def generation_of(self, role: str) -> int:
        """The file generation this thread's connection for ``role`` was opened on (-1: none)."""
        slot = getattr(self._local, role, None)
        return -1 if slot is None else slot.generation

    def drop(self, role: str) -> None:
        """Close this thread's connection for ``role`` (the next ``connection`` opens a new one)."""
        slot = getattr(self._local, role, None)
        if slot is not None:
            self._close_slot(slot)

    @staticmethod
    def _close_slot(slot: _Slot) -> None:
        conn, slot.conn = slot.conn, None
        if conn is not None:
            try:
                conn.close()  # an open transaction is rolled back
            except sqlite3.Error as exc:
                log.debug("closing a disk cache connection: %s", exc)

    def close(self) -> None:
        """Close every connection, whichever thread opened it; later ``connection`` calls raise."""
        with self._lock:
            self.closed = True
            slots = list(self._slots)
        for slot in slots:
            self._close_slot(slot)

    # a damaged or replaced file ---------------------------------------------------------
    def damaged(self, why: str, generation: int) -> bool:
        """A connection opened on ``generation`` found the file damaged (``why``: SQLite's error): set the file
        aside and start a fresh one.  True when the path now names a file other than that connection's (so
        a retry goes to it); False when nothing was done (closed, or set aside less than
        ``SET_ASIDE_EVERY_S`` ago: the error is then the disk's) or setting aside failed (logged)."""
        with self._lock:
            if self.closed:
                return False
            if generation != self.generation:
                return True  # replaced already
            if time.monotonic() - self._last_set_aside < SET_ASIDE_EVERY_S:
                return False
            try:
                self._replace(why)
            except (sqlite3.Error, OSError, CacheError) as exc:
                log.error("disk cache %s is damaged (%s) and could not be set aside: %s: %s; its writes are retried",
                          self.path, why, type(exc).__name__, exc)
                return False
            return True

    def follow(self) -> None:
        """If another process set this cache's file aside, open the file that replaced it."""
        if _file_id(self.path) == self._id:
            return
        with self._lock:
            if self.closed or _file_id(self.path) == self._id:
                return
            with _folder_lock(self.path):  # not halfway through another process's set-aside
                self._init_file()
            self.generation += 1
            log.warning("disk cache %s: the path names another file now (another process set a damaged file aside, "
                        "or it was removed); writing to that one", self.path)

    def _replace(self, why: str) -> None:
        """Under ``_lock``: set the damaged file aside and make a fresh one, unless another process did first."""
        self._last_set_aside = time.monotonic()
        with _folder_lock(self.path):
            if self._id is None:  # at open: if another process replaced the file meanwhile, it opens now
                try:
                    self._init_file()
                    return
                except sqlite3.Error as exc:
                    if not is_damage(exc):
                        raise
            elif _file_id(self.path) != self._id:  # another process set it aside already
                self._init_file()
                self.generation += 1
                return
            if not _has_sqlite_header(self.path):
                raise CacheError(f"{self.path} is not an SQLite database now: it is left as it is")
            aside = _aside_name(self.path)
            try:
                os.rename(self.path, aside)
            except FileNotFoundError:  # removed meanwhile: nothing to set aside
                self._init_file()
                self.generation += 1
                return
            for suffix in ("-wal", "-shm"):
                try:
                    os.rename(self.path + suffix, aside + suffix)
                except FileNotFoundError:
                    pass
            self.set_aside.append(aside)
            log.warning("disk cache %s is damaged (%s): moved it to %s and started a fresh cache; results it held "
                        "are computed again when asked for", self.path, why, aside)
            self._init_file()
        self.generation += 1
