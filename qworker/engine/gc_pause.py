"""One process-wide pause of the cyclic garbage collector, shared by every thread that pauses it.

A thread that makes many long-lived, non-cyclic objects at once (a batch's futures and
table entries) pauses the collector so that they set off no collection that would move
everything in flight to older generations.  The collector's switch is process-wide, so
pauses are counted: the first to begin turns it off (noting whether it was on), the last
to end turns it back on if it was.  Pauses overlap across threads and nest; one left by an
exception ends like any other.  A thread that calls ``gc.disable()`` itself while a pause
is held sees the collector turned back on when the last pause ends.
"""

from __future__ import annotations

import gc
import os
import threading
from contextlib import contextmanager
from typing import Iterator

__all__ = ["paused_gc"]

_lock = threading.Lock()
_held: dict[int, int] = {}  # thread ident -> pauses that thread holds now
_was_on = False  # whether the collector was on when the first of the pauses held began


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic collector does not run inside (unless another thread turns it on); see the module's contract."""
    global _was_on
    me = threading.get_ident()
    with _lock:
        if not _held:
            _was_on = gc.isenabled()
            gc.disable()
        _held[me] = _held.get(me, 0) + 1
    try:
        yield
    finally:
        with _lock:
            _end(me)


def _end(me: int) -> None:
    """One pause of thread ``me`` ends (``_lock`` held); the last of all turns the collector back on if it was."""
    n = _held[me] - 1
    if n:
        _held[me] = n
    else:
        del _held[me]
        if not _held and _was_on:
            gc.enable()


def _after_fork_in_child() -> None:
    """A forked child has only the forking thread: the other threads' pauses are gone with them (the collector back
    on if none is left and it was on), the forking thread's go on and end as they would have."""
    global _lock, _held
    _lock = threading.Lock()
    me = threading.get_ident()
    had = bool(_held)
    _held = {me: _held[me]} if me in _held else {}
    if had and not _held and _was_on:
        gc.enable()


os.register_at_fork(after_in_child=_after_fork_in_child)
