"""``CollectorPause``: build many long-lived objects without the cyclic collector rescanning them as they age.

A submission makes one GC-tracked future per task, which lives until its
result is gathered.  Left to the collector, each future of a large batch is
scanned by a young collection, again by a middle one, and then by the full
collection that the batch's growth triggers: about 1 us per task at 100k
tasks, spent on the dispatcher's thread while the results arrive, and finding
nothing (none of these objects is cyclic garbage).

Contract (``with CollectorPause() as pause: ...; pause.made = n``):

* Inside the block the collector is disabled (process-wide, as ``gc.disable``
  is).  On the way out it is enabled again if it was enabled on the way in.
* If the block says it made at least ``PROMOTE_AT`` long-lived objects
  (``made``), the collector was enabled on the way in, and nothing is frozen
  (``gc.get_freeze_count() == 0``: someone's ``gc.freeze`` must stay as it is),
  every tracked object is first moved to the oldest generation at once
  (``gc.freeze`` then ``gc.unfreeze``: O(1), nothing scanned).  What the block
  made is then scanned only by full collections, as any long-lived object is;
  young cyclic garbage that other code had made just before is freed at the
  next full collection rather than at a young one.
* Small blocks (fewer than ``PROMOTE_AT``) only pause the collector: a program
  that submits one task at a time keeps its young collections, so the cyclic
  garbage it makes between submissions is still freed by them.
"""

from __future__ import annotations

import gc
from types import TracebackType
from typing import Optional

__all__ = ["CollectorPause", "PROMOTE_AT"]

PROMOTE_AT = 4096  # long-lived objects a block must make to be moved past the young generations


class CollectorPause:
    """Pause the cyclic collector for a block; see the module's contract."""

    __slots__ = ("made", "_enabled")

    def __init__(self) -> None:
        self.made = 0  # long-lived objects the block made, as it says
        self._enabled = False

    def __enter__(self) -> CollectorPause:
        self._enabled = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if not self._enabled:  # another block (another thread's) paused it: that one enables it again
            return
        if self.made >= PROMOTE_AT and gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        gc.enable()
