"""The batch forms of a future's hooks that a reward service and a client use: ``add_done_callbacks`` (one
callback followed on a whole request's futures) and ``resolve_first`` (a whole message of results set at once)."""

import gc
import threading

from qworker.engine.result import Result, ResultFuture, add_done_callbacks, resolve_first, resolve_many


def test_a_callback_added_to_many_futures_runs_once_for_each_and_at_once_for_those_already_done():
    done_before, pending = ResultFuture(), [ResultFuture() for _ in range(3)]
    done_before.set_result(Result(score=1.0))
    seen: list[tuple[ResultFuture, str]] = []
    add_done_callbacks([done_before, *pending], lambda f: seen.append((f, threading.current_thread().name)))
    assert seen == [(done_before, threading.current_thread().name)]  # at once, on the adding thread
    resolver = threading.Thread(target=resolve_many, args=(zip(pending, [Result(score=i) for i in range(3)], strict=True),), name="resolver")
    resolver.start()
    resolver.join(30)
    assert [f for f, _ in seen] == [done_before, *pending]
    assert {name for _, name in seen[1:]} == {"resolver"}  # on the resolving thread, once each


def test_resolving_a_batch_keeps_the_first_result_of_each_future_and_counts_only_the_new_ones():
    first, fresh = ResultFuture(), ResultFuture()
    first.set_result(Result(score=1.0))
    waiter_got: list[Result] = []
    waiter = threading.Thread(target=lambda: waiter_got.append(fresh.result(timeout=30)))
    waiter.start()
    assert resolve_first([(first, Result(score=9.0)), (fresh, Result(score=2.0))]) == 1
    waiter.join(30)
    assert first.result().score == 1.0 and waiter_got and waiter_got[0].score == 2.0


def test_following_a_request_makes_no_object_per_future_that_the_collector_tracks():
    # a reward service follows every task it holds: an object per future, alive until it resolves, would be
    # rescanned by every collection meanwhile
    futures = [ResultFuture() for _ in range(10_000)]
    gc.collect()
    before = len(gc.get_objects())
    add_done_callbacks(futures, lambda f: None)
    assert len(gc.get_objects()) - before < 100


def test_a_callback_added_to_one_of_many_followed_futures_runs_for_that_future_alone():
    futures = [ResultFuture() for _ in range(3)]
    seen: list[tuple[str, ResultFuture]] = []
    add_done_callbacks(futures, lambda f: seen.append(("all", f)))
    futures[1].add_done_callback(lambda f: seen.append(("one", f)))
    add_done_callbacks(futures[2:], lambda f: seen.append(("last", f)))
    resolve_many(zip(futures, [Result(score=i) for i in range(3)], strict=True))
    assert seen == [("all", futures[0]), ("all", futures[1]), ("one", futures[1]), ("all", futures[2]), ("last", futures[2])]
