"""The producer's result cache: a memory LRU in front of an optional SQLite file.

The pending table reads the memory tier once for each submitted key not pending (``get``)
and the disk tier once per batch of misses (``get_persistent``); the dispatcher
thread writes both tiers when tasks resolve (``put_many``).  Only successful
results are cached.

A failing disk tier never fails the caller: its reads answer misses and its
writes are retried (see ``cache.disk``); ``health`` reports both for ``status()``.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence, TypedDict

from .disk import DiskCache
from .memory import Entry, MemoryCache

__all__ = ["CacheHealth", "ResultCache"]


class CacheHealth(TypedDict):
    """The disk cache's fields of the producer's status (``engine.status.ProducerStatus``), from ``ResultCache.health``."""

    cache_unwritten: int
    cache_write_errors: int
    cache_read_errors: int
    cache_corrupt_rows: int
    cache_rows_dropped: int


class ResultCache:
    def __init__(self, *, max_entries: int, ttl_s: Optional[float], path: Optional[str]) -> None:
        self.memory = MemoryCache(max_entries=max_entries, ttl_s=ttl_s)
        self.disk = DiskCache(path, max_entries=max_entries, ttl_s=ttl_s) if path else None
        # The memory tier only: this runs once per submitted task, so it is the tier's own method (no second call).
        self.get: Callable[[bytes], Optional[Entry]] = self.memory.get
        self.holds: Callable[[bytes], bool] = self.memory.holds  # False: ``get`` misses (a C call, see ``MemoryCache.holds``)

    def __len__(self) -> int:
        return len(self.memory)

    def get_persistent(self, keys: Iterable[bytes]) -> dict[bytes, Entry]:
        """The disk tier, for keys the memory tier missed (empty without a disk tier).  Never raises:
        a failed read or a damaged row is a miss (logged, counted in ``health``)."""
        return self.disk.get_many(keys) if self.disk is not None else {}

    def health(self) -> CacheHealth:
        """The disk tier's counters, as the producer's status names them (all 0 without a disk tier)."""
        d = self.disk
        if d is None:
            return {"cache_unwritten": 0, "cache_write_errors": 0, "cache_read_errors": 0, "cache_corrupt_rows": 0,
                    "cache_rows_dropped": 0}
        return {"cache_unwritten": d.unwritten, "cache_write_errors": d.write_errors, "cache_read_errors": d.read_errors,
                "cache_corrupt_rows": d.corrupt_rows, "cache_rows_dropped": d.rows_dropped}

    def put_many(self, items: Sequence[tuple]) -> None:
        """Record fresh ``(key, score, extra, reward)`` results in every tier (the disk tier keeps the reward name)."""
        self.memory.put_many(items)
        if self.disk is not None:
            self.disk.put_many(items)

    def remember(self, items: list[tuple[bytes, float, dict]]) -> None:
        """Record results found in the disk tier in the memory tier."""
        self.memory.put_many(items)

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s until every result handed to the disk tier before the call is written;
        see ``DiskCache.flush`` (True at once without a disk tier)."""
        return self.disk.flush(timeout) if self.disk is not None else True

    def close(self) -> bool:
        """Flush and close the disk tier and every connection to its file; False (and an error logged) if
        some rows could not be written."""
        return self.disk.close() if self.disk is not None else True
