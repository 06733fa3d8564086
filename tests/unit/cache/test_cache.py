import time

import pytest

from qworker.cache.memory import MemoryCache


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


def test_a_caller_mutating_extra_does_not_change_later_hits():
    # defect 9: the cache and every Result shared one extra dict
    c = MemoryCache()
    flat = {"pred": "4"}
    nested = {"steps": [1, 2], "judge": {"votes": [1]}}
    c.put_many([(b"f", 1.0, flat, "r"), (b"n", 0.5, nested, "r")])
    flat["pred"] = "changed by the producer"  # the dict the dispatcher put in its Result
    nested["steps"].append(3)
    assert c.get(b"f") == (1.0, {"pred": "4"}) and c.get(b"n") == (0.5, {"steps": [1, 2], "judge": {"votes": [1]}})
    for key in (b"f", b"n"):  # a caller mutating what a hit handed out
        _, extra = c.get(key)
        extra.clear()
    _, hit = c.get(b"n")
    hit["judge"]["votes"].append(0)
    assert c.get(b"f") == (1.0, {"pred": "4"}) and c.get(b"n") == (0.5, {"steps": [1, 2], "judge": {"votes": [1]}})


def test_an_extra_msgpack_cannot_pack_is_still_copied():
    c = MemoryCache()
    odd = {"s": {1, 2}}
    c.put(b"k", 1.0, odd)
    odd["s"].add(3)
    assert c.get(b"k") == (1.0, {"s": {1, 2}})


def test_a_miss_never_waits_for_a_writer_holding_the_memory_cache():
    import threading

    cache = MemoryCache(max_entries=10)
    cache.put(b"k" * 16, 1.0, {})
    answered = threading.Event()
    with cache._lock:  # a writer in the middle of put_many
        threading.Thread(target=lambda: (cache.get(b"m" * 16), answered.set()), daemon=True).start()
        assert answered.wait(10), "a lookup of an absent key waited for the writer's lock"
    assert cache.get(b"k" * 16) == (1.0, {})


def test_a_full_memory_cache_leaves_the_cyclic_gc_nothing_to_scan():
    # Every full collection scans every tracked object: a million cached results must not be among them.
    import gc

    cache = MemoryCache(max_entries=100)
    cache.put_many([(bytes([i]) * 16, 1.0, {} if i % 2 else {"pred": "4", "n": 3}) for i in range(10)])
    for _ in range(3):  # each pass untracks one level of nesting
        gc.collect()
    assert not any(gc.is_tracked(entry) for entry in cache._data.values())
    hit = cache.get(bytes([2]) * 16)
    assert hit == (1.0, {"pred": "4", "n": 3})
    hit[1]["pred"] = "changed"
    assert cache.get(bytes([2]) * 16) == (1.0, {"pred": "4", "n": 3}) and cache.get(bytes([1]) * 16) == (1.0, {})


@pytest.mark.parametrize("ttl_s", [None, 3600.0])
def test_a_score_that_is_not_a_float_comes_back_as_it_was_put(ttl_s):
    cache = MemoryCache(ttl_s=ttl_s)
    cache.put_many([(b"b", True, {"a": 1}), (b"i", 2, {"a": 1}), (b"f", 0.5, {"a": 1})])
    assert [(type(s), s, e) for s, e in (cache.get(k) for k in (b"b", b"i", b"f"))] == [
        (bool, True, {"a": 1}), (int, 2, {"a": 1}), (float, 0.5, {"a": 1})]


@pytest.mark.parametrize("ttl_s", [None, 3600.0])
def test_caching_flat_extras_allocates_nothing_the_cyclic_gc_counts(ttl_s):
    # Each object the collector counts that outlives a batch of results moves the count toward a young collection,
    # and those cascade into full collections that rescan every future a trainer is waiting on.
    import gc

    cache = MemoryCache(max_entries=1000, ttl_s=ttl_s)
    items = [(bytes([i]) * 16, float(i), {"pred": "4", "n": i, "ok": True, "r": 0.5, "raw": b"x", "none": None} if i % 3 else {})
             for i in range(200)]
    enabled = gc.isenabled()
    gc.disable()
    try:
        before = gc.get_count()[0]
        cache.put_many(items)
        grown = gc.get_count()[0] - before
    finally:
        if enabled:
            gc.enable()
    assert grown < 10  # a few temporaries at most, not one or more per result
    for key, score, extra in items:  # each hit a fresh copy of what was stored, values of the same types
        hit = cache.get(key)
        assert hit == (score, extra) and hit[1] is not extra
        assert [type(v) for v in hit[1].values()] == [type(v) for v in extra.values()]
