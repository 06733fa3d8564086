"""The producer's in-memory result cache: bounded LRU with an optional TTL.

Only successful results are cached; a failed task is tried again next time.
Thread-safe: the caller's thread reads it in ``submit``, the dispatcher writes.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Optional, Sequence

Entry = tuple[float, dict]  # (score, extra)


class MemoryCache:
    def __init__(self, *, max_entries: int = 1_000_000, ttl_s: Optional[float] = None) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._data: OrderedDict[bytes, tuple[float, dict, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: bytes) -> Optional[Entry]:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            score, extra, stored = item
            if self.ttl_s is not None and time.monotonic() - stored > self.ttl_s:
                del self._data[key]
                return None
            self._data.move_to_end(key)
            return score, extra

    def put(self, key: bytes, score: float, extra: dict) -> None:
        self.put_many([(key, score, extra)])

    def put_many(self, items: Sequence[tuple]) -> None:
        """Store ``(key, score, extra)`` items; a trailing reward name (``(key, score, extra, reward)``,
        as the disk cache takes them) is ignored."""
        if self.max_entries == 0 or not items:
            return
        now = time.monotonic()
        with self._lock:
            data = self._data
            for item in items:  # (key, score, extra) or (key, score, extra, reward)
                key, score, extra = item[0], item[1], item[2]
                if key in data:
                    data.move_to_end(key)
                data[key] = (score, extra, now)
            while len(data) > self.max_entries:
                data.popitem(last=False)
                self.evictions += 1
