"""``Reactor``: real ZeroMQ sockets and threads; every wait is on an event with a generous bound."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque

import pytest
import zmq

from qworker.transport.reactor import Reactor


@pytest.fixture
def pair():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://reactor-test")
    b.connect("inproc://reactor-test")
    yield a, b
    a.close(0)
    b.close(0)
    ctx.term()


def start(r: Reactor) -> threading.Thread:
    th = threading.Thread(target=r.run, daemon=True)
    th.start()
    return th


def test_a_readable_socket_runs_its_handler_and_wake_from_another_thread_runs_a_turn(pair):
    a, b = pair
    r = Reactor(name="test", max_wait_s=60.0)  # a long wait: only the socket or a wake can end it
    got: list[bytes] = []
    inbox: deque[int] = deque()
    taken: list[int] = []
    received, woken = threading.Event(), threading.Event()

    def receive() -> None:
        while a.poll(0):
            got.append(a.recv())
        received.set()

    def take(now: float) -> None:
        while inbox:
            taken.append(inbox.popleft())
        if taken:
            woken.set()

    r.on_readable(a, receive, name="receiving")
    r.each_turn(take, name="taking")
    th = start(r)
    b.send(b"hello")
    assert received.wait(10), "the handler of a readable socket did not run"
    inbox.append(7)
    r.wake()
    assert woken.wait(10), "wake() from another thread did not cause a turn"
    r.stop()
    th.join(10)
    assert not th.is_alive(), "stop() did not end run()"
    r.close()
    assert got == [b"hello"] and taken == [7]


def test_a_handler_that_raises_is_logged_once_with_its_name_and_the_loop_goes_on(caplog):
    r = Reactor(name="test", max_wait_s=0.01)
    calls = {"bad": 0, "good": 0}
    enough = threading.Event()

    def bad(now: float) -> None:
        calls["bad"] += 1
        raise ValueError("broken on purpose")

    def good(now: float) -> None:
        calls["good"] += 1
        if calls["good"] >= 5:
            enough.set()

    r.each_turn(bad, name="the broken step")
    r.each_turn(good, name="the good step")
    with caplog.at_level(logging.ERROR, logger="qworker"):
        th = start(r)
        assert enough.wait(10), "a handler's exception stopped the loop or the handlers after it"
        r.stop()
        th.join(10)
    r.close()
    assert r.errors == calls["bad"] >= 5
    first = [rec for rec in caplog.records if "the broken step raised ValueError: broken on purpose" in rec.getMessage()]
    assert len(first) == 1 and first[0].exc_info is not None  # the first with its traceback, not one per turn
    assert "qworker test:" in first[0].getMessage()


def test_a_periodic_callback_and_a_deadline_end_the_wait():
    r = Reactor(name="test", max_wait_s=60.0)  # only the timers can end the waits
    ticks: list[float] = []
    ticked, hinted = threading.Event(), threading.Event()
    want: dict[str, float] = {}

    def tick(now: float) -> None:
        ticks.append(now)
        if len(ticks) >= 3:
            ticked.set()

    def deadline(now: float):
        return want.get("in_s")

    def turn(now: float) -> None:
        if "at" in want and now >= want["at"]:
            hinted.set()

    r.every(0.02, tick, name="ticking")
    r.deadline(deadline)
    r.each_turn(turn, name="turning")
    th = start(r)
    assert ticked.wait(10), "a periodic callback did not end the wait"
    assert all(b - a >= 0.02 for a, b in zip(ticks, ticks[1:], strict=False))  # never before its interval
    r.stop()
    th.join(10)
    r.close()

    r = Reactor(name="test", max_wait_s=60.0)
    r.deadline(deadline)
    r.each_turn(turn, name="turning")
    want["at"] = time.monotonic() + 0.05
    want["in_s"] = 0.05
    th = start(r)
    assert hinted.wait(10), "a deadline did not end the wait"
    r.stop()
    th.join(10)
    r.close()


def test_many_wakes_before_a_turn_write_one_byte():
    r = Reactor(name="test", max_wait_s=60.0)
    for _ in range(10_000):
        r.wake()
    assert os.read(r._pipe.fd, 4096) == b"x"
    r.close()


def test_a_wake_from_a_handler_writes_no_byte_and_the_next_turn_follows_at_once():
    r = Reactor(name="test", max_wait_s=60.0)  # a long wait: only a wake can make the second turn come soon
    turns: list[float] = []
    pipe_bytes: list[int] = []
    two = threading.Event()

    def turn(now: float) -> None:
        turns.append(now)
        if len(turns) == 1:
            r.wake()  # work handed to its own loop, as a reward service's submission wakes its dispatcher
            try:
                pipe_bytes.append(len(os.read(r._pipe.fd, 4096)))
            except BlockingIOError:
                pipe_bytes.append(0)
        else:
            two.set()

    r.each_turn(turn, name="turning")
    th = start(r)
    r.wake()  # the first turn (from this thread: a byte, drained by the turn)
    assert two.wait(10), "a wake from a handler did not bring the next turn"
    r.stop()
    th.join(10)
    r.close()
    assert pipe_bytes == [0] and turns[1] - turns[0] < 30  # no byte in the pipe; far sooner than the 60 s wait


def test_a_cancelled_handler_runs_no_more_and_its_socket_is_no_longer_polled(pair):
    a, b = pair
    r = Reactor(name="test", max_wait_s=60.0)
    calls: deque[object] = deque()
    cancelled_in_turn = threading.Event()
    later_turns = threading.Event()
    steps: list = []

    def receive() -> None:
        while a.poll(0):
            calls.append(a.recv())
        for step in steps:  # cancelled from a handler, as an owner sharing the reactor does
            r.cancel(step)
        cancelled_in_turn.set()

    def each(now: float) -> None:
        calls.append("turn")

    def after(now: float) -> None:
        if cancelled_in_turn.is_set():
            later_turns.set()

    steps.append(r.on_readable(a, receive, name="receiving"))
    steps.append(r.each_turn(each, name="each turn"))
    r.each_turn(after, name="after")
    th = start(r)
    b.send(b"one")
    assert cancelled_in_turn.wait(10), "the handler of a readable socket did not run"
    r.wake()
    assert later_turns.wait(10), "the reactor took no turn after the cancel"
    b.send(b"two")  # readable again, but no longer polled: it must not wake the loop or run the handler
    later_turns.clear()
    r.wake()
    assert later_turns.wait(10)
    assert list(calls) == [b"one"], calls  # the each-turn handler, cancelled in the same turn, never ran either
    r.stop()
    th.join(10)
    r.close()
