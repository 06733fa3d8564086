"""The level each answered request arrived at, as the server counted them, from the workers' send stamps."""

from __future__ import annotations

from qworker.judge.control.batch import ServerLevels


def fifo(arrivals: dict[int, float], batch: int, service: float) -> dict[int, float]:
    """When each request (key -> arrival) leaves a FIFO server serving ``batch`` at once, request ``key`` for ``service``
    + ``key`` ms."""
    slots = [0.0] * batch
    left = {}
    for key, at in sorted(arrivals.items(), key=lambda kv: (kv[1], kv[0])):
        slot = min(range(batch), key=slots.__getitem__)
        start = max(at, slots[slot])
        slots[slot] = left[key] = start + service + 0.001 * key
    return left


def test_a_burst_that_reaches_the_server_in_another_order_is_levelled_in_the_order_it_arrived():
    """Six requests sent by the gate at once (keys 1-6, in that order) reach a FIFO server of batch 2 in the order
    6, 5, 4, 3, 2, 1 (the workers' threads): the levels are the server's (1, 2 for the first two to arrive, then
    one more per request queued behind them), not the gate's order, and none is told before every request sent
    ahead of its arrival has been answered."""
    levels = ServerLevels()
    for key in range(1, 7):
        levels.on_send(key, 0.0)
    arrivals = {key: 0.01 * (7 - key) for key in range(1, 7)}  # key 6 first
    left = fifo(arrivals, batch=2, service=1.0)
    order = sorted(left, key=left.__getitem__)
    told = [levels.on_answer(key, 0.0, arrivals[key], left[key] - arrivals[key], left[key] + 0.001) for key in order]
    assert told[:-1] == [[]] * 5  # each was sent (at 0) before every arrival: any of them may have arrived first
    by_arrival = sorted(arrivals, key=arrivals.__getitem__)
    assert told[-1] == [(left[k] - arrivals[k], float(level)) for level, k in enumerate(by_arrival, 1)]


def test_an_answer_waits_for_the_requests_sent_before_it_arrived_and_a_request_that_ends_unanswered_frees_it():
    levels = ServerLevels()
    levels.on_send(1, 0.0)
    levels.on_send(2, 0.0)
    assert levels.on_answer(2, 0.0, 0.01, 0.3, 0.32) == []  # request 1, sent before it arrived, may have been ahead of it
    levels.gone(1)  # refused: it held no slot
    assert levels.on_answer(3, 0.5, 0.51, 0.3, 0.82) == [(0.3, 1.0), (0.3, 1.0)]


def test_a_send_stamp_from_another_clock_says_nothing():
    """A worker on another host stamps its own clock: a stamp outside its request's time at the gate is not read."""
    levels = ServerLevels()
    levels.on_send(1, 100.0)
    assert levels.on_answer(1, 100.0, 5_000.0, 0.3, 100.4) is None
    assert levels.on_answer(1, 100.0, 99.0, 0.3, 100.4) is None


def test_answers_to_the_first_burst_hold_their_slots_until_their_level_is_known_or_their_latency_has_passed_again():
    levels = ServerLevels()
    for key in (1, 2, 3):
        levels.on_send(key, 0.0)
    assert levels.on_answer(1, 0.0, 0.01, 0.3, 0.32) == []  # requests 2 and 3, sent with it, may have arrived before it
    assert levels.held(0.32) == 1
    assert levels.on_answer(3, 0.0, 0.03, 0.3, 0.34) == []
    assert levels.held(0.34) == 2
    assert levels.held(0.63) == 1  # request 1's answer came 0.3 s ago, its latency: its slot is free, request 2 or not
    assert levels.held(0.65) == 0
    levels.on_send(4, 0.65)
    assert levels.on_answer(2, 0.0, 0.02, 0.9, 0.93) == [(0.3, 1.0), (0.9, 2.0), (0.3, 3.0)]
    assert levels.on_answer(4, 0.65, 0.66, 0.3, 0.97) == [(0.3, 2.0)]  # (request 2 still there as 4 arrived)
    assert levels.held(0.97) == 0  # answers after the first burst hold nothing
