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
_depth = 0  # pauses held now, every thread's
_was_on = False  # whether the collector was on when the first of them began


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic collector does not run inside (unless another thread turns it on); see the module's contract."""
    global _depth, _was_on
    with _lock:
        if _depth == 0:
            _was_on = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_on:
                gc.enable()


def _after_fork_in_child() -> None:
    """A forked child has only the forking thread: no pause of another thread is held there."""
    global _lock, _depth, _was_on
    _lock, _depth, _was_on = threading.Lock(), 0, False
    gc.enable()


os.register_at_fork(after_in_child=_after_fork_in_child)
