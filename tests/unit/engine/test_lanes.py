"""Lanes: tasks of several submitters take turns at the scheduler's queue, and workers give back a lane's
prefetched tasks when another lane waits (no processes: the scheduler driven with a stub transport)."""

from __future__ import annotations

import random

import pytest

from qworker.engine.lanes import KEEP, FairQueue
from qworker.engine.result import ResultFuture
from qworker.engine.task import NEW, QUEUED, IllegalTransition, Pending
from qworker.transport import wire
from tests.unit.engine.test_scheduler import make, ready


def task(lane: object, i: int) -> Pending:
    return Pending(i.to_bytes(16, "big"), "noop", {}, b"p", None, ResultFuture(), 0.0, lane=lane)


def test_lanes_take_turns_and_put_back_tasks_go_first():
    q = FairQueue()
    for i in range(4):
        q.append(task("a", i))
    for i in range(10, 12):
        q.append(task("b", i))
    assert q.mixed and len(q) == 6 and q[0].lane == "a"
    back = task("a", 99)
    q.extendleft([back])
    assert q.popleft() is back
    assert [q.popleft().lane for _ in range(6)] == ["a", "b", "a", "b", "a", "a"]
    assert not q and len(q) == 0


def test_one_lane_is_first_in_first_out():
    q = FairQueue()
    tasks = [task(0, i) for i in range(5)]
    for p in tasks:
        q.append(p)
    assert not q.mixed and list(q) == tasks and [q.popleft() for _ in range(5)] == tasks


def test_given_back_tasks_return_to_the_front_of_their_own_lane():
    q = FairQueue()
    q.append(task("b", 1))
    q.putback([task("a", 2), task("a", 3)])
    assert [int.from_bytes(q.popleft().key, "big") for _ in range(3)] == [1, 2, 3]  # b's turn came first


def test_a_batch_holding_a_task_that_cannot_be_queued_is_refused_whole():
    q = FairQueue()
    queued = task("a", 1)
    q.append(queued)
    fresh = [task("a", 2), task("b", 3)]
    with pytest.raises(IllegalTransition, match="cannot queue a queued task"):
        q.extend([*fresh, queued])  # the same task twice in the queue would be sent twice
    assert len(q) == 1 and [p.state for p in fresh] == [NEW, NEW] and queued.state is QUEUED
    q.extend(fresh)
    assert [int.from_bytes(q.popleft().key, "big") for _ in range(3)] == [1, 3, 2] and not q  # lanes a, b, a


def submit_lane(s, table, lane, keys):
    with table.registering([(k.to_bytes(16, "big"), b"p") for k in keys], reward="noop", params={}, timeout_s=None, policy=None,
                           now=0.0, hand_on=s.add, lane=lane) as reg:
        reg.hand_on(reg.new)


def test_a_waiting_lane_makes_workers_give_back_another_lanes_prefetch():
    s, stub, table = make()
    submit_lane(s, table, "a", range(100))
    ready(s, "w", granted=100)
    s.dispatch(0.0)
    assert len(stub.tasks_to("w")) == 100  # it asked for all of them ahead
    submit_lane(s, table, "b", range(1000, 1100))
    stub.take()
    s.dispatch(1.0)
    [(peer, msg)] = stub.take()
    assert peer == b"w" and msg == wire.Revoke(100 - KEEP)
    keys = [i.to_bytes(16, "big") for i in range(KEEP, 100)]  # the worker gives back the tail it has not started
    s.handle(b"w", wire.Giveback(100, 100, keys), 1.1)  # back to a's lane, not before b's
    ready(s, "w", granted=120, received=100, finished=98, now=1.2)
    s.dispatch(1.2)
    lanes = ["a" if int.from_bytes(t.key, "big") < 1000 else "b" for t in stub.tasks_to("w")]
    assert lanes[:6] in (["a", "b"] * 3, ["b", "a"] * 3), lanes[:10]


def test_a_single_lane_never_asks_for_tasks_back():
    s, stub, table = make()
    submit_lane(s, table, 0, range(200))
    ready(s, "w", granted=100)
    s.dispatch(0.0)
    stub.take()
    s.dispatch(1.0)
    assert not any(isinstance(m, wire.Revoke) for _, m in stub.take())


def test_tasks_taken_for_a_message_come_in_popleft_order_and_an_unsent_tail_is_first_again():
    def fill(lanes: dict) -> FairQueue:
        q = FairQueue()
        for lane, keys in lanes.items():
            for i in keys:
                q.append(task(lane, i))
        return q

    def keys(tasks) -> list[int]:
        return [int.from_bytes(p.key, "big") for p in tasks]

    for lanes in ({0: range(6)}, {"a": [1, 2, 3], "b": [4, 5], "c": [6]}):
        whole = fill(lanes)
        order = keys([whole.popleft() for _ in range(6)])
        q = fill(lanes)
        taken = q.take(4)
        assert keys(taken) == order[:4] and len(q) == 2
        q.untake(taken[2:])  # the last two did not fit the message
        assert len(q) == 4 and all(p.state is QUEUED for p in taken)
        rest = q.take(10)
        assert keys(rest) == order[2:] and not q and len(q) == 0


def test_a_lane_whose_tasks_were_put_back_at_the_front_still_counts_as_waiting():
    q = FairQueue()
    for lane, i in (("a", 1), ("b", 2)):
        q.append(task(lane, i))
    taken = q.take(2)
    assert q.waiting() == set()
    q.untake(taken)  # not sent after all: first again, at the very front
    assert q.waiting() == {"a", "b"}  # so give-back still makes room for them
    taken[0].finish()  # its result came meanwhile (another delivery's): nothing of lane a waits any more
    assert q.waiting() == {"b"}


@pytest.mark.parametrize("seed", range(40))
def test_take_gives_what_as_many_poplefts_would_and_leaves_the_same_turns(seed):
    rng = random.Random(seed)

    def fill() -> FairQueue:  # the same queue for the same state of ``rng``: lanes of any lengths, maybe a front
        q = FairQueue()
        for i in range(rng.randint(0, 200)):
            q.append(task(rng.choice("abcde"[: rng.randint(1, 5)]), i))
        for i in range(rng.choice([0, 0, 3])):
            q.extendleft([task("a", 1000 + i)])
        return q

    state = rng.getstate()
    q1 = fill()
    rng.setstate(state)
    q2 = fill()
    for n in [rng.randint(1, 80) for _ in range(6)]:
        want = [q1.popleft() for _ in range(min(n, len(q1)))]
        got = q2.take(n)
        assert [p.key for p in got] == [p.key for p in want]
        assert len(q1) == len(q2) and [p.key for p in q1] == [p.key for p in q2]  # the same turns for what is left


def test_a_registered_task_is_in_its_submissions_lane_and_one_shared_keeps_the_first():
    _, _, table = make()
    lanes: dict[object, list[Pending]] = {}
    for lane, keys in ((0, [1]), (b"client-a", [2, 3]), (b"client-b", [3, 4])):
        with table.registering([(k.to_bytes(16, "big"), b"p") for k in keys], reward="noop", params={}, timeout_s=None,
                               policy=None, now=0.0, hand_on=lambda tasks: None, lane=lane) as reg:
            lanes[lane] = reg.new
            reg.hand_on(reg.new)
    by_key = {int.from_bytes(p.key, "big"): p.lane for tasks in lanes.values() for p in tasks}
    assert by_key == {1: 0, 2: b"client-a", 3: b"client-a", 4: b"client-b"}  # 3 was client-a's first
    assert table.get((3).to_bytes(16, "big")).lane == b"client-a"
