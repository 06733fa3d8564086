"""A worker's busy slot: which task it is running and until when, in shared memory.

The worker writes its slot before and after each task; the pool supervisor reads
it to enforce hard timeouts.  The watchdog has to live outside the worker: a
reward stuck in C code that holds the GIL (``9**9**9**9`` in sympy) stops every
thread of its own process.  A sequence counter (odd while writing) keeps reads
consistent.  Times are ``time.monotonic()`` seconds, comparable across
processes on one host.

The slot also holds the worker's last heartbeat (``beat``), written by a thread
of its own: a stopped, frozen or swapped-out worker stops beating, which the
supervisor can see even while the worker's process exists.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Optional

_LAYOUT = struct.Struct("<Q16sdd")  # seq, task key, started, deadline (0 = idle)
_BEAT = struct.Struct("<d")  # the worker's last heartbeat (0 = none yet), after the layout
_SIZE = _LAYOUT.size + _BEAT.size


class TaskSlot:
    def __init__(self, path: str, *, create: bool = False) -> None:
        self.path = path
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, _SIZE)
            self._mm = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
        self._seq = 0  # even: the sequence number of the last complete write
        self._pack = _LAYOUT.pack_into
        if create:
            _LAYOUT.pack_into(self._mm, 0, 0, bytes(16), 0.0, 0.0)
            _BEAT.pack_into(self._mm, _LAYOUT.size, 0.0)

    def begin(self, key: bytes, started: float, deadline: float) -> None:
        """Show task ``key`` running since ``started`` until ``deadline`` (monotonic s).  Called once per task:
        two writes, the sequence odd during the first (a reader retries) and even after the second."""
        seq = self._seq = self._seq + 2
        pack, mm = self._pack, self._mm
        pack(mm, 0, seq - 1, key, started, deadline)
        pack(mm, 0, seq, key, started, deadline)

    def end(self) -> None:
        """Show the worker idle."""
        self.begin(bytes(16), 0.0, 0.0)

    def beat(self, now: float) -> None:
        """Record that the worker is alive at ``now`` (its heartbeat thread calls this)."""
        _BEAT.pack_into(self._mm, _LAYOUT.size, now)

    def last_beat(self) -> float:
        """When the worker last beat (0.0 before its first beat)."""
        while True:  # one writer: two equal reads are a whole value
            (a,) = _BEAT.unpack_from(self._mm, _LAYOUT.size)
            (b,) = _BEAT.unpack_from(self._mm, _LAYOUT.size)
            if a == b:
                return a

    def reset(self) -> None:
        """Idle and no heartbeat yet: for a freshly spawned worker."""
        self.end()
        _BEAT.pack_into(self._mm, _LAYOUT.size, 0.0)

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
