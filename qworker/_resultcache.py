"""The producer's result cache: a memory LRU in front of an optional SQLite file.

The caller's thread reads the memory tier for every submitted task (``get``)
and the disk tier once per batch of misses (``get_persistent``); the dispatcher
thread writes both tiers when tasks resolve (``put_many``).  Only successful
results are cached.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from ._cache import Entry, MemoryCache
from ._diskcache import DiskCache

__all__ = ["ResultCache"]


class ResultCache:
    def __init__(self, *, max_entries: int, ttl_s: Optional[float], path: Optional[str]) -> None:
        self.memory = MemoryCache(max_entries=max_entries, ttl_s=ttl_s)
        self.disk = DiskCache(path, max_entries=max_entries, ttl_s=ttl_s) if path else None

    def __len__(self) -> int:
        return len(self.memory)

    def get(self, key: bytes) -> Optional[Entry]:
        """The memory tier only: this runs once per submitted task."""
        return self.memory.get(key)

    def get_persistent(self, keys: Iterable[bytes]) -> dict[bytes, Entry]:
        """The disk tier, for keys the memory tier missed (empty without a disk tier)."""
        return self.disk.get_many(keys) if self.disk is not None else {}

    def put_many(self, items: Sequence[tuple]) -> None:
        """Record fresh ``(key, score, extra, reward)`` results in every tier (the disk tier keeps the reward name)."""
        self.memory.put_many(items)
        if self.disk is not None:
            self.disk.put_many(items)

    def remember(self, items: list[tuple[bytes, float, dict]]) -> None:
        """Record results found in the disk tier in the memory tier."""
        self.memory.put_many(items)

    def close(self) -> None:
        """Flush and close the disk tier."""
        if self.disk is not None:
            self.disk.close()
