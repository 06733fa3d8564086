"""``RecentKeys``: a bounded set that keeps the keys most recently used and forgets the least recently used first.

Thread-safe (one lock per set, held for each call): a ``Client``'s callers' threads look up what its I/O thread adds
and forgets.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, Hashable, TypeVar, cast

__all__ = ["RecentKeys"]

K = TypeVar("K", bound=Hashable)


class RecentKeys(Generic[K]):
    """At most ``size`` keys.  Looking a key up (``in``) or adding it makes it the most recently used; adding one
    beyond ``size`` forgets the least recently used."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"RecentKeys(size={size}): size must be at least 1")
        self.size = size
        self._lock = threading.Lock()
        self._keys: OrderedDict[K, None] = OrderedDict()

    def __contains__(self, key: object) -> bool:
        with self._lock:
            if key not in self._keys:
                return False
            self._keys.move_to_end(cast(K, key))
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)

    def add(self, key: K) -> bool:
        """Hold ``key`` as the most recently used; whether it was not held before."""
        with self._lock:
            keys = self._keys
            if key in keys:
                keys.move_to_end(key)
                return False
            keys[key] = None
            if len(keys) > self.size:
                keys.popitem(last=False)
            return True

    def discard(self, key: K) -> None:
        """Forget ``key`` (held or not)."""
        with self._lock:
            self._keys.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._keys.clear()
