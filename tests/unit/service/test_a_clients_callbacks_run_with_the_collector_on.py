"""A ``Client`` pauses the cyclic collector while it decodes and resolves what the service sent (``_receive``), but the
callbacks users add to its futures (``add_done_callback``, ``asyncio.wrap_future``'s) run after that pause ends, on the
same thread, in the order their futures resolved: user code never runs inside the I/O thread's own pause (where it
could allocate without bound).  The socket is a stub: no process or socket is started."""

from __future__ import annotations

import gc
import threading
import time
from collections import deque
from typing import Iterator

import pytest

from qworker._recent import RecentKeys
from qworker.engine.futures import FutureTable
from qworker.engine.result import Result
from qworker.service import client as cl
from qworker.transport import client_wire as cw
from tests.unit.service.stub_socket import StubSocket


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()




def _client(requests: int, per_request: int) -> tuple[cl.Client, list[list]]:
    c = cl.Client.__new__(cl.Client)
    c._closed, c._instance, c._heard, c.endpoint = False, "svc", time.monotonic(), "tcp://127.0.0.1:1"
    c._table = FutureTable(fallback_score=0.0)
    c._requests = {}
    c._known, c._window_lock, c._unanswered = RecentKeys(cl.KNOWN_TARGETS), threading.Lock(), deque()
    c._answered = threading.Event()
    handed = []
    for number in range(1, requests + 1):
        batch = c._table.register(per_request)
        req = cl._Request(number, "noop", None, [], None, batch, list(range(per_request)), time.monotonic())
        req.instance, req.answered = "svc", cw.Accepted(number, "svc", None, "")
        c._requests[number] = req
        handed.append(c._table.hand_out(batch))
    return c, handed


def _follow(futures: list[list]) -> list[tuple[int, bool, int]]:
    """Each callback's (future's number, whether the collector was on, its thread)."""
    seen: list[tuple[int, bool, int]] = []
    for n, fut in enumerate(f for request in futures for f in request):
        fut.add_done_callback(lambda _f, n=n: seen.append((n, gc.isenabled(), threading.get_ident())))
    return seen


def test_callbacks_of_futures_resolved_by_results_run_with_the_collector_on_in_order():
    c, futures = _client(requests=2, per_request=3)
    seen = _follow(futures)
    results = [Result(score=1.0) for _ in range(3)]
    c._sock = StubSocket([cw.encode_resolved("svc", 1, [(1, [0, 1, 2], results)]),
                       cw.encode_resolved("svc", 2, [(2, [2, 0, 1], results)])])
    c._receive()
    assert [n for n, _, _ in seen] == [0, 1, 2, 5, 3, 4]
    assert all(on for _, on, _ in seen), seen
    assert {thread for _, _, thread in seen} == {threading.get_ident()}
    assert gc.isenabled()


def test_callbacks_of_futures_failed_by_a_closing_service_run_with_the_collector_on():
    c, futures = _client(requests=1, per_request=2)
    seen = _follow(futures)
    c._sock = StubSocket([cw.encode(cw.Closing("svc", "the reward service stopped"))])
    c._receive()
    assert [n for n, _, _ in seen] == [0, 1] and all(on for _, on, _ in seen), seen
    assert all(f.result().error for f in futures[0])
