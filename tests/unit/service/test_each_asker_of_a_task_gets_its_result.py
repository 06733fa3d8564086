"""Every request that asked for a task gets its result, at the task's position in it: the same task twice in one
request, in two requests of two clients, and in requests taken by two services on one producer (one that has left
it, and one still on it).  The producer and the socket are stubs: no process or socket is started."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from qworker.engine.result import Result, ResultFuture, resolve_many
from qworker.service.ledger import Ledger
from qworker.service.server import RewardService
from qworker.transport import client_wire as cw
from qworker.transport import wire


class _Dispatcher:
    workers_ready = 2


class _Producer:
    """Hands each request the futures queued for it."""

    _dispatcher = _Dispatcher()

    def __init__(self) -> None:
        self.next: deque[list[ResultFuture]] = deque()

    def submit_batch(self, reward: str, payloads: list, **kw: Any) -> list[ResultFuture]:
        return self.next.popleft()


def _service(producer: _Producer, mark: int) -> tuple[RewardService, list[cw.Resolved]]:
    s = RewardService.__new__(RewardService)
    s.producer, s.instance, s.requests = producer, "svc", 0  # type: ignore[assignment]
    s.started, s.no_workers_grace_s = time.monotonic(), 10.0
    s.ledger = Ledger(instance="svc")
    s._outbox, s._owners, s._waiting, s._oldest, s._in_flight, s._to_answer = deque(), {}, {}, None, {}, []
    s._mark, s._dispatcher_ident, s._attached, s._stopped = mark, threading.get_ident(), True, False
    sent: list[cw.Resolved] = []

    def send(peer: bytes, frames: list[bytes]) -> bool:
        msg = cw.CLIENT.decode(frames[0], frames[1], max_bytes=1 << 30)
        if isinstance(msg, cw.Resolved):
            sent.append(msg)
        return True

    s._send_frames = send  # type: ignore[method-assign]
    return s, sent


def _ask(s: RewardService, producer: _Producer, peer: bytes, request: int, futures: list[ResultFuture]) -> None:
    producer.next.append(futures)
    s.ledger.heard(peer, time.monotonic())
    s._on_submit(peer, cw.Submit(*wire.STAMP, request, "noop", None, [], None))


def _answers(sent: list[cw.Resolved]) -> dict[tuple[int, int], float]:
    """(request, position) -> score, over every Resolved sent."""
    out = {}
    for msg in sent:
        for group in msg.requests:
            for index, result in zip(group.indexes, group.results, strict=True):
                assert (group.request, index) not in out, "a result sent twice"
                out[(group.request, index)] = result.score
    return out


def _resolve(futures: list[ResultFuture]) -> None:
    resolve_many((f, Result(score=float(i), key=f"{i:032x}")) for i, f in enumerate(futures))


def test_a_task_asked_for_twice_in_a_request_and_again_by_another_client_answers_each_position():
    producer = _Producer()
    s, sent = _service(producer, mark=1)
    a, b, c = ResultFuture(), ResultFuture(), ResultFuture()
    _ask(s, producer, b"client-1", 1, [a, b, a, c])
    _ask(s, producer, b"client-2", 7, [c, a])
    _resolve([a, b, c])
    s._flush(time.monotonic(), everything=True)
    assert _answers(sent) == {(1, 0): 0.0, (1, 1): 1.0, (1, 2): 0.0, (1, 3): 2.0, (7, 0): 2.0, (7, 1): 0.0}


def test_tasks_that_another_service_on_the_producer_followed_still_reach_this_ones_clients():
    producer = _Producer()
    first, first_sent = _service(producer, mark=1)
    second, second_sent = _service(producer, mark=2)
    futures = [ResultFuture() for _ in range(4)]
    _ask(first, producer, b"client-1", 1, futures[:3])
    first._attached = False  # it left (its callback ignores what resolves from here)
    _ask(second, producer, b"client-2", 1, futures[1:])  # two of them the first one followed, one followed by none
    _ask(second, producer, b"client-2", 2, [futures[2], futures[2]])
    _resolve(futures)
    first._flush(time.monotonic(), everything=True)  # it left: nothing it followed is queued to it any more
    second._flush(time.monotonic(), everything=True)
    assert _answers(second_sent) == {(1, 0): 1.0, (1, 1): 2.0, (1, 2): 3.0, (2, 0): 2.0, (2, 1): 2.0}
    assert first_sent == [] and not second._owners


def test_two_services_on_one_producer_each_answer_their_own_clients():
    producer = _Producer()
    first, first_sent = _service(producer, mark=1)
    second, second_sent = _service(producer, mark=2)
    futures = [ResultFuture() for _ in range(3)]
    _ask(first, producer, b"client-1", 5, futures)
    _ask(second, producer, b"client-2", 9, futures[::-1])
    _resolve(futures)
    first._flush(time.monotonic(), everything=True)
    second._flush(time.monotonic(), everything=True)
    assert _answers(first_sent) == {(5, 0): 0.0, (5, 1): 1.0, (5, 2): 2.0}
    assert _answers(second_sent) == {(9, 0): 2.0, (9, 1): 1.0, (9, 2): 0.0}


def test_a_task_resolved_before_it_is_followed_and_asked_for_twice_answers_both_positions():
    producer = _Producer()
    s, sent = _service(producer, mark=1)
    done, fresh = ResultFuture(), ResultFuture()
    resolve_many([(done, Result(score=5.0, key="5" * 32))])  # a cache hit: resolved within submit_batch
    _ask(s, producer, b"client-1", 3, [done, fresh, done])
    _resolve([ResultFuture(), fresh])
    s._flush(time.monotonic(), everything=True)
    assert _answers(sent) == {(3, 0): 5.0, (3, 1): 1.0, (3, 2): 5.0} and not s._in_flight.get(b"client-1")
