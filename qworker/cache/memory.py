"""The producer's in-memory result cache: bounded LRU with an optional TTL.

Only successful results are cached; a failed task is tried again next time.
Thread-safe: the caller's thread reads it in ``submit``, the dispatcher writes;
a read that misses (the usual case for a fresh task) takes no lock.

The cache owns its entries: ``put`` keeps its own copy of ``extra`` and ``get``
hands out a fresh one, so a caller mutating ``Result.extra`` (even nested
values) never changes what later hits see.  Without a TTL, an entry with an
empty ``extra`` is its bare score; one with a flat ``extra`` (str keys, and
each value exactly a str, int, float, bool, None or bytes: the usual case) is
one bytes object, the score and the extra msgpack-packed together (``_pack``;
under a TTL, with the time stored, an empty ``extra`` too) and unpacked per
hit.  Neither is an object the cyclic GC counts, so caching a stream of
results sets off no collection (see ``Pending.empty_extra``).  Any other entry
is a tuple (score, owned extra, time stored): a nested ``extra`` is kept
msgpack-packed (it came over msgpack from a worker), another flat one (a
non-str key, a subclass of those types such as an ``IntEnum``, an int past 64
bits, a lone surrogate; or a score that is not a float) as a tuple of its items.
An entry thus holds only atomic values, so the cyclic GC stops tracking it.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from typing import Callable, Optional, Sequence, Union

import msgpack
import msgspec

Entry = tuple[float, dict]  # (score, extra)

_IMMUTABLE = (str, int, float, bool, type(None), bytes)


class _Deep:
    """An ``extra`` msgpack cannot pack: deep-copied in and out."""

    __slots__ = ("extra",)

    def __init__(self, extra: dict) -> None:
        self.extra = copy.deepcopy(extra)


_Owned = Union[tuple, bytes, _Deep, None]  # None: an empty extra; a tuple: a flat one's items


def _own(extra: dict) -> _Owned:
    """A copy of ``extra`` that nobody else holds."""
    for value in extra.values():
        if not isinstance(value, _IMMUTABLE):
            try:
                return msgpack.packb(extra, use_bin_type=True)
            except Exception:  # not msgpack-native (a local reward returned a tuple key, a set...)
                return _Deep(extra)
    return tuple(extra.items())  # atomic items only: the GC stops tracking the entry (see ``put_many``)


_FLAT = frozenset({str, int, float, bool, type(None), bytes})  # the value types ``_pack`` keeps exactly
_encode = msgspec.msgpack.encode
_unpack = msgspec.msgpack.Decoder(tuple[float, dict]).decode  # a ``_pack``ed entry -> (score, a fresh extra)
_unpack_stored = msgspec.msgpack.Decoder(tuple[float, dict, float]).decode  # one with its time stored (a TTL)


def _pack(score: float, extra: dict, stored: Optional[float] = None) -> Optional[bytes]:
    """``[score, extra]`` (``[score, extra, stored]`` given the monotonic time stored) msgpack-packed, if the score
    is a float, every key of ``extra`` a str and every value exactly one of ``_FLAT``'s types (each comes back as
    it went in); else None."""
    if type(score) is not float:  # (a bool or int score would come back as a float, or not decode as one)
        return None
    for k, v in extra.items():
        if type(k) is not str or type(v) not in _FLAT:
            return None
    try:
        return _encode((score, extra) if stored is None else (score, extra, stored))
    except Exception:  # an int past 64 bits, a lone surrogate: kept as a tuple entry
        return None


def _entry(score: float, extra: dict, stored: Optional[float] = None) -> Union[bytes, tuple[float, _Owned, float]]:
    """An entry: packed if it can be (``_pack``), else a tuple; ``stored``: the monotonic time stored, under a
    TTL (None: no TTL, and a non-empty ``extra``)."""
    packed = _pack(score, extra, stored)
    if packed is not None:
        return packed
    return (score, _own(extra) if extra else None, 0.0 if stored is None else stored)


def _hand_out(owned: _Owned) -> dict:
    """A fresh copy for one cache hit."""
    if owned is None:
        return {}
    if type(owned) is tuple:
        return dict(owned)
    if type(owned) is bytes:
        out: dict = msgpack.unpackb(owned, raw=False, strict_map_key=False)
        return out
    return copy.deepcopy(owned.extra)  # type: ignore[union-attr]


class MemoryCache:
    def __init__(self, *, max_entries: int = 1_000_000, ttl_s: Optional[float] = None) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        # key -> (score, owned extra, monotonic time stored); without a TTL, an entry with an empty extra is its
        # bare score; one with a flat extra (under a TTL, an empty one too) is packed in one bytes object with its
        # score (and time stored) (``_pack``): no tuple, nothing the cyclic GC counts as it is made, tracks or scans
        self._data: OrderedDict[bytes, Union[float, bytes, tuple[float, _Owned, float]]] = OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0
        # ``key in cache`` in C, no lock (as ``get``'s miss): True where ``get`` may find an entry (an expired one
        # is still held); the pending table asks it of each new key before calling ``get``, so a miss costs no call.
        self.holds: Callable[[bytes], bool] = self._data.__contains__

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: bytes) -> Optional[Entry]:
        """``(score, extra)`` cached under ``key``, or None.  A miss takes no lock: a lookup of a bytes key
        is one atomic step of the dict, whatever another thread does to it meanwhile."""
        if key not in self._data:
            return None
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            if type(item) is bytes:  # a score and a flat extra, packed (with the time stored, under a TTL)
                if self.ttl_s is None:
                    self._data.move_to_end(key)
                    return _unpack(item)  # (a fresh dict per hit)
                score, fresh, stored = _unpack_stored(item)
                if time.monotonic() - stored > self.ttl_s:
                    del self._data[key]
                    return None
                self._data.move_to_end(key)
                return score, fresh
            if type(item) is not tuple:  # a bare score (no TTL, an empty extra)
                self._data.move_to_end(key)
                return item, {}  # type: ignore[return-value]  # a score
            score, extra, stored = item  # a tuple here
            if self.ttl_s is not None and time.monotonic() - stored > self.ttl_s:
                del self._data[key]
                return None
            self._data.move_to_end(key)
        return score, _hand_out(extra)

    def put(self, key: bytes, score: float, extra: dict) -> None:
        self.put_many([(key, score, extra)])

    def put_many(self, items: Sequence[tuple]) -> None:
        """Store ``(key, score, extra)`` items; a trailing reward name (``(key, score, extra, reward)``,
        as the disk cache takes them) is ignored."""
        if self.max_entries == 0 or not items:
            return
        # Copied outside the lock.  An entry is the bare score (no TTL, an empty extra), or the score and a flat extra
        # (and the time stored, under a TTL) packed in one bytes object: nothing the cyclic GC counts outlives the
        # call, so results streaming in set off no collection.  Otherwise it is a tuple, an empty extra kept as None
        # and a flat one as a tuple of its items, so an entry holds only atomic values and the GC stops tracking it at
        # its first pass: a full cache adds nothing to any collection (entries holding dicts stay tracked, and every
        # full collection scans them all).  A key given twice keeps its last entry.
        if self.ttl_s is None:
            owned = {item[0]: _entry(item[1], item[2]) if item[2] else item[1] for item in items}
        else:
            now = time.monotonic()
            owned = {item[0]: _entry(item[1], item[2], now) for item in items}
        with self._lock:
            data = self._data
            before = len(data)
            # New keys go to the end, in order.  Not ``update``: on an OrderedDict it first makes a list of (key, entry)
            # tuples, more allocations for the cyclic GC to count while results stream in (see ``Pending.empty_extra``).
            for key, entry in owned.items():
                data[key] = entry
            if len(data) - before < len(owned):  # a result computed again (the rare case): most recently used now
                move = data.move_to_end
                for key in owned:
                    move(key)
            while len(data) > self.max_entries:
                data.popitem(last=False)
                self.evictions += 1
