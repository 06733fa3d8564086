import time

from qworker._cache import MemoryCache


def test_lru_evicts_least_recently_used():
    c = MemoryCache(max_entries=2)
    c.put(b"a", 1.0, {})
    c.put(b"b", 2.0, {})
    assert c.get(b"a") == (1.0, {})  # a is now the most recent
    c.put(b"c", 3.0, {})
    assert c.get(b"b") is None
    assert c.get(b"a") == (1.0, {}) and c.get(b"c") == (3.0, {})
    assert c.evictions == 1


def test_ttl_expires_entries():
    c = MemoryCache(ttl_s=0.05)
    c.put(b"a", 1.0, {"x": 1})
    assert c.get(b"a") == (1.0, {"x": 1})
    time.sleep(0.08)
    assert c.get(b"a") is None
    assert len(c) == 0


def test_zero_entries_disables_the_cache():
    c = MemoryCache(max_entries=0)
    c.put(b"a", 1.0, {})
    assert c.get(b"a") is None
