import asyncio
import concurrent.futures
import threading
import time

import pytest

from qworker import Result, ResultFuture
from qworker.engine.result import resolve_many


def test_result_properties():
    ok = Result(score=1.0)
    bad = Result(score=0.0, error="timeout: reward ran past its 1 s hard limit")
    assert ok.ok and ok.error_kind is None
    assert not bad.ok and bad.error_kind == "timeout"
    assert bad.to_dict()["error"].startswith("timeout")


def test_result_future_wakes_waiters_and_times_out():
    fut = ResultFuture()
    with pytest.raises(concurrent.futures.TimeoutError):
        fut.result(timeout=0.05)
    got = []
    waiters = [threading.Thread(target=lambda: got.append(fut.result(timeout=5))) for _ in range(3)]
    for t in waiters:
        t.start()
    time.sleep(0.05)
    fut.set_result(Result(score=0.5))
    for t in waiters:
        t.join(5)
    assert [r.score for r in got] == [0.5] * 3
    assert not fut._condition._waiters  # every waiter removed itself


def test_resolving_a_batch_wakes_every_kind_of_waiter_and_refuses_a_second_resolution():
    futs = [ResultFuture() for _ in range(4)]
    seen = []
    futs[0].add_done_callback(lambda f: seen.append(f.result().score))
    got = []
    sleeper = threading.Thread(target=lambda: got.append(futs[1].result(timeout=10).score))
    sleeper.start()
    waited = []
    waiter = threading.Thread(target=lambda: waited.append(concurrent.futures.wait(futs[2:], timeout=10)))
    waiter.start()
    time.sleep(0.05)
    resolve_many([(f, Result(score=float(i))) for i, f in enumerate(futs)])
    sleeper.join(10)
    waiter.join(10)
    assert seen == [0.0] and got == [1.0]
    assert len(waited[0].done) == 2 and not waited[0].not_done
    with pytest.raises(concurrent.futures.InvalidStateError):
        resolve_many([(futs[3], Result(score=9.0))])
    with pytest.raises(concurrent.futures.InvalidStateError):
        futs[3].set_result(Result(score=9.0))
    assert futs[3].result().score == 3.0 and futs[3].exception() is None


def test_many_threads_resolving_and_waiting_never_lose_a_wakeup():
    futs = [ResultFuture() for _ in range(2000)]
    got = []

    def waiter(chunk):
        got.extend(f.result(timeout=10).score for f in chunk)

    ws = [threading.Thread(target=waiter, args=(futs[i::4],)) for i in range(4)]
    for t in ws:
        t.start()
    for i, f in enumerate(futs):
        f.set_result(Result(score=float(i)))
    for t in ws:
        t.join(20)
    assert sorted(got) == [float(i) for i in range(2000)]


def test_callbacks_and_cancel_behave_as_futures_do():
    seen = []
    f = ResultFuture()
    f.add_done_callback(lambda fut: seen.append(fut.result().score))
    f.set_result(Result(score=3.0))
    f.add_done_callback(lambda fut: seen.append("late"))
    assert seen == [3.0, "late"]
    g = ResultFuture()
    assert not g.cancel() and not g.cancelled()  # shared work is never cancelled
    g.set_result(Result(score=1.0))
    assert g.result().score == 1.0


def test_an_asyncio_timeout_does_not_cancel_the_task():
    f = ResultFuture()

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(f), 0.01)

    asyncio.run(main())
    f.set_result(Result(score=4.0))  # resolving later still works
    assert f.result().score == 4.0


def test_result_future_works_with_wait_as_completed_and_await():
    futs = [ResultFuture() for _ in range(3)]
    threading.Timer(0.05, lambda: [f.set_result(Result(score=float(i))) for i, f in enumerate(futs)]).start()
    assert len(list(concurrent.futures.as_completed(futs, timeout=5))) == 3

    async def main():
        f = ResultFuture()
        asyncio.get_running_loop().call_later(0.01, lambda: threading.Thread(target=f.set_result, args=(Result(score=2.0),)).start())
        return await f

    assert asyncio.run(main()).score == 2.0
