import asyncio
import concurrent.futures
import threading
import time

import pytest

from qworker import Result, ResultFuture


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
    assert fut._condition._waiters == []  # every waiter removed itself


def test_result_future_has_the_attributes_future_has():
    # ResultFuture.__init__ re-creates Future.__init__'s state with a lighter
    # Condition; this fails if a Python release changes what Future keeps.
    assert set(vars(ResultFuture())) == set(vars(concurrent.futures.Future()))


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
