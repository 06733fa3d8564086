"""Disk faults for an SQLite file, made for real (SQLite itself fails; nothing is mocked).

* ``DiskFull``: a ``connect`` for ``DiskCache`` whose connections hit SQLITE_FULL
  between ``fill()`` and ``free()``: ``fill`` caps ``PRAGMA max_page_count`` at the file's
  current size on every connection it made; ``free`` lifts the cap.  For the
  cache a ``Producer`` makes: ``with full.installed(): Producer(cache_path=...)``.
* ``Tmpfs``: a small tmpfs mount (root only) filled with a filler file until
  the kernel answers ENOSPC: the disk itself is full, WAL included.
* ``Lock``: a second connection holding ``BEGIN EXCLUSIVE`` for a while, as a
  VACUUM in another process does: writers get "database is locked".
* ``corrupt_row`` / ``corrupt_pages``: garbage in one row's ``extra`` blob, or
  over the bytes of the file's pages.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
import threading
import time
from typing import Iterator, Optional

from qworker.cache import disk as _diskcache

_REAL_CONNECT = _diskcache.default_connect

GARBAGE = {
    "format": b"\xc1",  # a byte msgpack never uses: FormatError
    "extra_data": b"\x80\x01",  # an empty map, then a stray byte: ExtraData
    "truncated": b"\x82\xa1a",  # a map of two cut short: ValueError
    "not_a_map": b"\x93\x01\x02\x03",  # decodes, to a list
}


class DiskFull:
    """Pass ``connect=full.connect`` to ``DiskCache``; ``fill()`` / ``free()`` from the test's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conns: list[sqlite3.Connection] = []
        self.full = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[DiskFull]:
        """Every ``DiskCache`` made inside opens its connections here."""
        saved = _diskcache.default_connect
        _diskcache.default_connect = self.connect
        try:
            yield self
        finally:
            _diskcache.default_connect = saved

    def connect(self, path: str, busy_s: float) -> sqlite3.Connection:
        conn = _REAL_CONNECT(path, busy_s)  # check_same_thread=False: the pragma below may run from the test's thread
        with self._lock:
            self._conns.append(conn)
            if self.full:
                self._cap(conn)
        return conn

    @staticmethod
    def _cap(conn: sqlite3.Connection, pages: Optional[int] = None) -> None:
        if pages is None:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")

    def fill(self) -> None:
        """No connection can grow the file past its size now (pages already free still take rows)."""
        with self._lock:
            self.full = True
            for conn in self._conns:
                try:
                    self._cap(conn)
                except sqlite3.ProgrammingError:  # closed
                    pass

    def free(self) -> None:
        with self._lock:
            self.full = False
            for conn in self._conns:
                try:
                    self._cap(conn, 2**31 - 2)
                except sqlite3.ProgrammingError:
                    pass


class Tmpfs:
    """A ``size``-byte tmpfs at ``where`` (``mount`` needs root: ``available()`` says whether it works)."""

    def __init__(self, where: os.PathLike | str, size: int = 2 << 20) -> None:
        self.where = str(where)
        self.size = size
        self.filler = os.path.join(self.where, "filler")

    @staticmethod
    def available(where: os.PathLike | str) -> bool:
        probe = Tmpfs(where, 64 << 10)
        try:
            probe.mount()
        except (OSError, subprocess.CalledProcessError):
            return False
        probe.unmount()
        return True

    def mount(self) -> Tmpfs:
        os.makedirs(self.where, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", self.where],
                       check=True, capture_output=True, timeout=30)
        return self

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", self.where], check=False, capture_output=True, timeout=30)

    def fill(self) -> int:
        """Write the filler until ENOSPC; returns its size in bytes."""
        written = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                written += os.write(fd, b"\0" * 4096)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        os.remove(self.filler)

    def __enter__(self) -> Tmpfs:
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.unmount()


class Lock:
    """Hold ``BEGIN EXCLUSIVE`` on ``path`` from another connection for ``seconds`` (a thread of its own)."""

    def __init__(self, path: os.PathLike | str, seconds: float) -> None:
        self.path, self.seconds = str(path), seconds
        self.held = threading.Event()
        self.released = threading.Event()
        self._thread = threading.Thread(target=self._hold, name="disk-fault-lock", daemon=True)

    def start(self) -> Lock:
        self._thread.start()
        if not self.held.wait(30):
            raise RuntimeError(f"could not lock {self.path}")
        return self

    def _hold(self) -> None:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            self.held.set()
            time.sleep(self.seconds)
            conn.execute("ROLLBACK")
        finally:
            conn.close()
            self.released.set()

    def join(self, timeout: float = 60) -> None:
        self._thread.join(timeout)


def corrupt_row(path: os.PathLike | str, key: bytes, garbage: bytes = GARBAGE["format"]) -> None:
    """Overwrite the ``extra`` blob of the row with ``key`` (it must exist)."""
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    try:
        if conn.execute("UPDATE results SET extra = ? WHERE key = ?", (garbage, key)).rowcount != 1:
            raise KeyError(key.hex())
    finally:
        conn.close()


def corrupt_pages(path: os.PathLike | str, first_page: int = 2, pages: int = 1 << 20) -> int:
    """Checkpoint the WAL into the file, then overwrite its pages from ``first_page`` (1-based; page 1
    holds the header and schema) with garbage.  Returns how many bytes were overwritten."""
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    size = os.path.getsize(path)
    start = (first_page - 1) * page_size
    end = min(size, start + pages * page_size)
    if end <= start:
        return 0
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(bytes((i * 37 + 11) % 256 for i in range(end - start)))
    return end - start
