"""The pending table: sharing, first-result-wins, caching, cancellation (no processes)."""

from qworker._pending import PendingTable
from qworker._resultcache import ResultCache


def table() -> PendingTable:
    return PendingTable(cache=ResultCache(max_entries=100, ttl_s=None, path=None), fallback_score=-1.0)


def add(t: PendingTable, *keys: bytes):
    return t.add([(k, b"payload") for k in keys], reward="noop", params={}, timeout_s=None, gate=None, now=0.0)


def test_identical_tasks_share_one_entry_and_future():
    t = table()
    futs, new = add(t, b"a" * 16, b"b" * 16, b"a" * 16)
    assert len(new) == 2 and futs[0] is futs[2] and len(t) == 2
    futs2, new2 = add(t, b"a" * 16)
    assert new2 == [] and futs2[0] is futs[0]
    assert t.counts["deduplicated"] == 2


def test_a_task_is_resolved_once_even_if_a_batch_repeats_it():
    # A results batch can name a task twice (it reached a worker twice through a
    # redelivery): the first entry resolves it and the second is dropped, not re-set.
    t = table()
    [fut], [p] = add(t, b"k" * 16)
    t.resolve([(p, 1.0, None, None, "w", 0.0), (p, 2.0, None, None, "w", 0.0)])
    assert fut.result(timeout=0).score == 1.0 and p.resolved and len(t) == 0
    assert t.counts["resolved"] == 1
    t.resolve([(p, 3.0, None, None, "w", 0.0)])  # a late duplicate changes nothing
    assert fut.result(timeout=0).score == 1.0 and t.counts["resolved"] == 1


def test_successes_are_cached_and_failures_get_the_fallback():
    t = table()
    [ok, bad], [p, q] = add(t, b"o" * 16, b"f" * 16)
    t.resolve([(p, 0.5, {"pred": "4"}, None, "w", 0.01), (q, None, None, "timeout: x", "w", 0.0)])
    assert ok.result().score == 0.5 and ok.result().extra == {"pred": "4"} and ok.result().ok
    assert bad.result().score == -1.0 and bad.result().error_kind == "timeout"
    assert t.cache.get(b"o" * 16) == (0.5, {"pred": "4"}) and t.cache.get(b"f" * 16) is None
    assert (t.counts["resolved"], t.counts["failed"]) == (2, 1)


def test_close_cancels_what_is_left():
    t = table()
    [fut], _ = add(t, b"c" * 16)
    t.cancel_all("the producer closed")
    assert fut.result(timeout=0).error == "cancelled: the producer closed" and len(t) == 0
