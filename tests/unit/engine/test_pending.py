"""The pending table: sharing, first-result-wins, caching, cancellation (no processes)."""

import threading
import time

import pytest

from qworker._exceptions import ProducerClosed
from qworker.cache.results import ResultCache
from qworker.engine.pending import PendingTable


def table() -> PendingTable:
    return PendingTable(cache=ResultCache(max_entries=100, ttl_s=None, path=None), fallback_score=-1.0)


def add(t: PendingTable, *keys: bytes):
    """Register ``keys`` and hand them on (as the producer does once they reach the dispatcher)."""
    with t.registering([(k, b"payload") for k in keys], reward="noop", params={}, timeout_s=None, policy=None, now=0.0,
                       hand_on=lambda tasks: None) as reg:
        reg.hand_on(reg.new)
    return reg.futures, reg.new


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
    t.close("the producer closed")
    assert fut.result(timeout=0).error == "cancelled: the producer closed" and len(t) == 0


def test_a_registration_that_raises_still_hands_on_what_it_registered():
    # Once, a disk-tier read that raised between registering and handing on left the
    # tasks pending for ever, and every later submission of the same payload shared the dead future.
    t = table()
    handed: list = []
    with pytest.raises(OSError, match="disk I/O error"):
        with t.registering([(b"n" * 16, b"p")], reward="noop", params={}, timeout_s=None, policy=None, now=0.0,
                           hand_on=handed.extend) as reg:
            raise OSError("disk I/O error")
    assert [p.key for p in handed] == [b"n" * 16]  # a sharer of that task is not failed by this submission's error
    [shared], [] = add(t, b"n" * 16)
    assert shared is reg.futures[0]


def test_a_memory_tier_that_raises_past_the_first_chunk_still_hands_on_the_earlier_chunks():
    t = table()
    calls = {"n": 0}
    real_get = t.cache.get

    def get(key: bytes):
        calls["n"] += 1
        if calls["n"] > 1500:  # inside the second chunk of 1,024 entries
            raise OSError("memory tier broke")
        return real_get(key)

    t.cache.get = get  # type: ignore[method-assign]
    t.cache.holds = lambda key: True  # type: ignore[method-assign]  # every key is asked of the tier
    handed: list = []
    keys = [i.to_bytes(16, "big") for i in range(3000)]
    with pytest.raises(OSError, match="memory tier broke"):
        with t.registering([(k, b"p") for k in keys], reward="noop", params={}, timeout_s=None, policy=None, now=0.0,
                           hand_on=handed.extend):
            pass
    assert len(handed) >= 1024 and {p.key for p in handed} <= set(keys)  # never left pending with no one to resolve them
    assert all(t.get(p.key) is p for p in handed)  # still pending, for the dispatcher: a sharer waits on a live task


def test_a_registration_that_cannot_hand_on_cancels_only_what_it_registered():
    t = table()
    [other], _ = add(t, b"h" * 16)

    def refuse(tasks: list) -> None:
        raise RuntimeError("the dispatcher is gone")

    with pytest.raises(OSError, match="disk I/O error"):
        with t.registering([(b"n" * 16, b"p"), (b"h" * 16, b"p")], reward="noop", params={}, timeout_s=None, policy=None,
                           now=0.0, hand_on=refuse) as reg:
            raise OSError("disk I/O error")
    fut_new, fut_shared = reg.futures
    r = fut_new.result(timeout=0)
    assert r.error_kind == "cancelled" and "disk I/O error" in r.error and "the dispatcher is gone" in r.error
    assert fut_shared is other and not other.done()  # registered and handed on by another submission: not this one's
    assert t.get(b"n" * 16) is None and len(t) == 1
    [again], [p] = add(t, b"n" * 16)  # submitted again: a new task, not the dead one
    assert not again.done() and again is not fut_new


def test_after_close_nothing_registers_and_everything_registered_resolves():
    t = table()
    [fut], _ = add(t, b"a" * 16)
    t.close("the producer closed")
    with pytest.raises(ProducerClosed, match="the producer closed"):
        add(t, b"b" * 16)
    assert fut.done() and len(t) == 0


def test_close_racing_registrations_from_other_threads_leaves_no_future_pending():
    # Once, close() on another thread while a large batch registered left futures pending for ever.
    t = table()
    got: list = []
    start = threading.Barrier(3)

    def submit(prefix: bytes) -> None:
        start.wait()
        try:
            for i in range(100_000):
                got.extend(add(t, prefix + i.to_bytes(8, "big"))[0])
        except ProducerClosed:
            pass

    threads = [threading.Thread(target=submit, args=(p * 8,)) for p in (b"x", b"y")]
    for th in threads:
        th.start()
    start.wait()
    deadline = time.monotonic() + 30
    while len(got) < 1000 and time.monotonic() < deadline:  # both are registering (waits on progress, not on a clock)
        time.sleep(0.001)
    t.close("the producer closed")
    for th in threads:
        th.join(60)
    assert got and all(f.done() for f in got) and len(t) == 0


def test_results_streaming_in_set_off_no_garbage_collection_while_their_futures_wait():
    # A trainer holds every future of a batch while its results stream in.  If resolving them allocated objects the
    # cyclic GC counts and that outlive the batch (an empty ``extra`` per result), each 700 of them would set off a
    # young collection, which moves the waiting futures to older generations and, once per large batch, sets off a
    # full collection of the whole process.  What a Result keeps is made with its task, at submission.
    import gc

    t = PendingTable(cache=ResultCache(max_entries=100_000, ttl_s=None, path=None), fallback_score=-1.0)
    gc.disable()  # as ``submit_batch`` registers
    try:
        futures, tasks = add(t, *(i.to_bytes(16, "big") for i in range(20_000)))
    finally:
        gc.enable()
    collections: list[int] = []
    here = threading.get_ident()

    def track(phase: str, info: dict) -> None:  # collections this thread sets off (another thread's are not its doing)
        if phase == "start" and threading.get_ident() == here:
            collections.append(info["generation"])

    thresholds = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's defaults, whatever an earlier test or plugin set
    gc.collect()  # the registration's own allocations are the submitting call's business, not the results'
    gc.callbacks.append(track)
    try:
        for i in range(0, len(tasks), 256):  # as RESULTS messages of 256 arrive
            t.resolve([(p, 1.0, None, None, "w", 0.0) for p in tasks[i : i + 256]])
    finally:
        gc.callbacks.remove(track)
        gc.set_threshold(*thresholds)
    assert all(f.done() for f in futures) and all(f.result().extra == {} for f in futures[:3])
    assert collections == [], f"resolving 20,000 results set off {len(collections)} collections (generations {sorted(set(collections))})"


def test_a_slower_tiers_hit_changed_by_its_callers_callback_is_remembered_as_the_tier_had_it():
    t = table()
    [f], [p] = add(t, b"d" * 16)
    f.add_done_callback(lambda fut: fut.result().extra.__setitem__("caller", "was here"))
    t.resolve_cached([p], {p.key: (1.0, {"from": "disk"})})
    [g], new = add(t, b"d" * 16)
    assert new == [] and g.result(timeout=0).extra == {"from": "disk"}  # a memory-tier hit: the tier's own copy


def test_a_results_empty_extra_changed_by_its_caller_is_not_what_a_later_hit_gets():
    t = table()
    [f], [p] = add(t, b"k" * 16)
    t.resolve([(p, 1.0, None, None, "w", 0.0)])
    f.result(timeout=0).extra["mine"] = [1]
    [g], new = add(t, b"k" * 16)
    assert new == [] and g.result(timeout=0).extra == {}
