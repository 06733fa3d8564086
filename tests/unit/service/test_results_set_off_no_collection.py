"""A reward service taking requests, and sending their results, and a client receiving them, set off no collection of
the cyclic GC: a collection would move every task still in flight to an older generation (and full collections
rescan them all).  What a request makes lives until its results leave, so the collector waits for the end of the
handler that takes it (one collection at most, after it); what sending and receiving results make is gone by the end
of the handler.  Sockets and the producer are stubs: no process or socket is started."""

from __future__ import annotations

import gc
import threading
import time
from collections import deque
from typing import Any

import msgspec

from qworker._recent import RecentKeys
from qworker.engine.futures import FutureTable
from qworker.engine.result import Result, ResultFuture, resolve_many
from qworker.service import client as cl
from qworker.service.ledger import Ledger
from qworker.service.server import RewardService
from qworker.transport import client_wire as cw
from qworker.transport import wire
from tests.unit.service.stub_socket import StubSocket

N = 20_000
PER_MESSAGE = 512


def _result() -> Result:
    return Result(score=1.0, attempts=1, worker="local-1/w0.1", latency_s=0.001, compute_s=1e-6, key="ab" * 16)


class _Collections:
    """The collections this thread sets off inside the block, at CPython's default thresholds."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self._here = threading.get_ident()

    def _track(self, phase: str, info: dict) -> None:
        if phase == "start" and threading.get_ident() == self._here:
            self.seen.append(info["generation"])

    def __enter__(self) -> _Collections:
        self._thresholds = gc.get_threshold()
        gc.set_threshold(700, 10, 10)
        gc.collect()
        gc.callbacks.append(self._track)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._track)
        gc.set_threshold(*self._thresholds)




def test_a_client_receiving_its_results_sets_off_no_collection():
    c = cl.Client.__new__(cl.Client)
    c._closed, c._instance, c._heard, c.endpoint = False, "svc", time.monotonic(), "tcp://127.0.0.1:1"
    c._refusals_logged, c._known = set(), RecentKeys(cl.KNOWN_TARGETS)
    c._table = FutureTable(fallback_score=0.0)
    c._requests = {}
    for number in range(1, N // PER_MESSAGE + 1):
        batch = c._table.register(PER_MESSAGE)
        c._requests[number] = cl._Request(number, "noop", None, [], None, batch, list(range(PER_MESSAGE)), time.monotonic())
    groups = [(number, list(range(PER_MESSAGE)), [_result() for _ in range(PER_MESSAGE)]) for number in c._requests]
    c._sock = StubSocket(iter([cw.encode_resolved("svc", seq, [group]) for seq, group in enumerate(groups, 1)]))
    with _Collections() as collections:
        while c._requests:
            c._receive()
    assert collections.seen == [], f"{len(collections.seen)} collections (generations {sorted(set(collections.seen))})"


def test_a_service_sending_results_sets_off_no_collection():
    s = RewardService.__new__(RewardService)
    s.instance = "svc"
    s.ledger = Ledger(instance="svc")
    s._outbox, s._owners, s._waiting, s._oldest, s._in_flight, s._to_answer = deque(), {}, {}, None, {}, []
    s._mark = 1
    s._dispatcher_ident, s._attached, s._stopped = threading.get_ident(), True, False
    sent: list[Any] = []
    s._send_frames = lambda peer, frames: sent.append(frames) or True  # type: ignore[method-assign]
    futures = [ResultFuture() for _ in range(N)]
    requests = iter([futures[i : i + PER_MESSAGE] for i in range(0, N, PER_MESSAGE)])

    class _Dispatcher:
        workers_ready = 2

    class _Producer:
        _dispatcher = _Dispatcher()

        def submit_batch(self, reward: str, payloads: list, **kw: Any) -> list:
            return next(requests)

    s.producer, s.requests = _Producer(), 0  # type: ignore[assignment]
    for request in range(1, N // PER_MESSAGE + 1):
        s._on_submit(b"client", cw.Submit(*wire.STAMP, request, "noop", None, [], None))
    s._to_answer.clear()
    results = [_result() for _ in range(N)]
    with _Collections() as collections:
        for i in range(0, N, 64):  # as a worker's results arrive, a turn each
            resolve_many(zip(futures[i : i + 64], results[i : i + 64], strict=True))
            s._flush(time.monotonic())
    assert sent and not s._waiting
    assert collections.seen == [], f"{len(collections.seen)} collections (generations {sorted(set(collections.seen))})"


def test_a_service_taking_a_turns_requests_sets_off_one_collection_at_most_after_them():
    requests = 40  # of 256 tasks, all read in one turn
    made: list[ResultFuture] = []

    class _Dispatcher:
        workers_ready = 2

        def dispatch_submitted(self) -> None:
            pass

    class _Options:
        max_message_bytes = 1 << 28

    class _Producer:
        _dispatcher = _Dispatcher()
        options = _Options()

        def submit_batch(self, reward: str, payloads: list, **kw: Any) -> list:
            futures = [ResultFuture() for _ in payloads]  # what a producer makes per task and keeps until it resolves
            made.extend(futures)
            return futures

    s = RewardService.__new__(RewardService)
    s.producer = _Producer()  # type: ignore[assignment]
    s.instance, s.started, s.no_workers_grace_s, s.requests, s.clients = "svc", time.monotonic(), 10.0, 0, set()
    s.ledger = Ledger(instance="svc")
    s._outbox, s._owners, s._waiting, s._oldest, s._in_flight, s._to_answer = deque(), {}, {}, None, {}, []
    s._mark = 1
    s._dispatcher, s._dispatcher_ident, s._attached, s._stopped = _Dispatcher(), threading.get_ident(), True, False  # type: ignore[assignment]
    payloads = [cw.encode(cw.Submit(*wire.STAMP, r, "noop", None, [msgspec.Raw(msgspec.msgpack.encode({"i": i})) for i in range(256)], None))
                for r in range(1, requests + 1)]
    s._sock = StubSocket(iter([b"client", *frames] for frames in payloads))  # type: ignore[assignment]
    with _Collections() as collections:
        s._receive()
        during = list(collections.seen)
    assert len(made) == requests * 256 and all(f.asker.by == s._mark for f in made) and len(s._to_answer) == requests
    assert len(during) <= 1, f"{len(during)} collections (generations {sorted(set(during))})"  # the one once it returns
