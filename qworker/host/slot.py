"""A worker's busy slot: which task it is running and until when, in shared memory.

The worker writes its slot before and after each task; the pool supervisor reads
it to enforce hard timeouts.  The watchdog has to live outside the worker: a
reward stuck in C code that holds the GIL (``9**9**9**9`` in sympy) stops every
thread of its own process.  A sequence counter (odd while writing) keeps reads
consistent.  Times are ``time.monotonic()`` seconds, comparable across
processes on one host.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Optional

_LAYOUT = struct.Struct("<Q16sdd")  # seq, task key, started, deadline (0 = idle)


class TaskSlot:
    def __init__(self, path: str, *, create: bool = False) -> None:
        self.path = path
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, _LAYOUT.size)
            self._mm = mmap.mmap(fd, _LAYOUT.size)
        finally:
            os.close(fd)
        self._seq = 0
        if create:
            _LAYOUT.pack_into(self._mm, 0, 0, bytes(16), 0.0, 0.0)

    def begin(self, key: bytes, started: float, deadline: float) -> None:
        self._write(key, started, deadline)

    def end(self) -> None:
        self._write(bytes(16), 0.0, 0.0)

    def _write(self, key: bytes, started: float, deadline: float) -> None:
        self._seq += 1
        _LAYOUT.pack_into(self._mm, 0, self._seq * 2 - 1, key, started, deadline)
        _LAYOUT.pack_into(self._mm, 0, self._seq * 2, key, started, deadline)

    def read(self) -> Optional[tuple[bytes, float, float]]:
        """``(key, started, deadline)`` of the running task, or None when idle."""
        for _ in range(100):
            seq, key, started, deadline = _LAYOUT.unpack_from(self._mm, 0)
            if seq % 2 == 0 and _LAYOUT.unpack_from(self._mm, 0)[0] == seq:
                return None if deadline == 0.0 else (key, started, deadline)
        return None

    def close(self) -> None:
        self._mm.close()

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
