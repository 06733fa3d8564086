import asyncio
import concurrent.futures
import threading
import time

import pytest

from qworker import Result, ResultFuture


def test_result_properties():
    ok = Result(1.0)
    bad = Result(0.0, error="timeout: reward ran past its 1 s hard limit")
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
    fut.set_result(Result(0.5))
    for t in waiters:
        t.join(5)
    assert [r.score for r in got] == [0.5] * 3
    assert fut._condition._waiters == []  # every waiter removed itself


def test_result_future_works_with_wait_as_completed_and_await():
    futs = [ResultFuture() for _ in range(3)]
    threading.Timer(0.05, lambda: [f.set_result(Result(float(i))) for i, f in enumerate(futs)]).start()
    assert len(list(concurrent.futures.as_completed(futs, timeout=5))) == 3

    async def main():
        f = ResultFuture()
        asyncio.get_running_loop().call_later(0.01, lambda: threading.Thread(target=f.set_result, args=(Result(2.0),)).start())
        return await f

    assert asyncio.run(main()).score == 2.0
