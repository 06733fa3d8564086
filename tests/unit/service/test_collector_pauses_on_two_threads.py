"""The cyclic collector's pauses are counted across threads: pauses that overlap on two threads (a Client's user
thread in ``submit_batch`` and its I/O thread in ``_receive``) leave it on once both end, whatever their order."""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
from typing import Iterator

import pytest
import zmq

from qworker._exceptions import ProducerClosed
from qworker.engine.gc_pause import paused_gc
from qworker.service import client as cl


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


@pytest.mark.parametrize("first_out", ["first_in", "second_in"])
def test_overlapping_pauses_turn_the_collector_back_on_when_the_last_ends(first_out: str) -> None:
    inside, release_a = threading.Event(), threading.Event()
    seen: list[bool] = []

    def a() -> None:
        with paused_gc():
            inside.set()
            release_a.wait(5)
            seen.append(gc.isenabled())

    t = threading.Thread(target=a)
    t.start()
    assert inside.wait(5)
    with paused_gc():  # the second pause begins while the first is held
        if first_out == "first_in":
            release_a.set()
            t.join(5)
        assert not gc.isenabled()
    if first_out == "second_in":
        assert not gc.isenabled()  # the first still holds its pause
        release_a.set()
        t.join(5)
    assert seen == [False] and gc.isenabled()


def test_a_clients_user_and_io_threads_pausing_together_leave_the_collector_on() -> None:
    class _Table:
        def register(self, n: int) -> None:
            raise ProducerClosed("closed")  # submit_batch leaves its pause by an exception, as after close()

        def callbacks_after(self) -> contextlib.nullcontext:
            return contextlib.nullcontext()

    class _Sock:
        def recv_multipart(self, flags: int = 0, copy: bool = True) -> None:
            raise zmq.Again()

    c = cl.Client.__new__(cl.Client)
    c._closed, c._table, c._sock, c._requests = False, _Table(), _Sock(), {}  # type: ignore[assignment]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # thread switches inside the pauses' few statements (the old pattern lost ~1 run in 2)
    stop = threading.Event()

    def user() -> None:
        while not stop.is_set():
            try:
                c.submit_batch("noop", [{"i": 1}])
            except ProducerClosed:
                pass

    def io() -> None:
        while not stop.is_set():
            c._receive()

    try:
        for _ in range(40):
            stop.clear()
            threads = [threading.Thread(target=user), threading.Thread(target=io)]
            for t in threads:
                t.start()
            time.sleep(0.05)
            stop.set()
            for t in threads:
                t.join(5)
            assert gc.isenabled(), "both threads are out of their pauses, and the collector was left off"
    finally:
        sys.setswitchinterval(interval)

