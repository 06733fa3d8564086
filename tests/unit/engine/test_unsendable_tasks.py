"""Tasks that cannot be put on the wire: every future still resolves, and nothing is left in no queue.

The scheduler takes tasks from its queue before it leases and sends them.  A
task whose params cannot be encoded, or a TASKS message that cannot be built
or sent, must not strand the tasks taken with it: the task at fault fails as
``bad_payload`` naming the reason, the others are sent or queued again.

Stub transport, simulated time: the tests play the workers.
"""

from __future__ import annotations

from typing import Optional

from qworker._errors import ErrorKind
from qworker.cache.results import ResultCache
from qworker.engine.pending import PendingTable
from qworker.engine.scheduler import Scheduler
from qworker.engine.task import LEASED, Pending
from qworker.testing import StubTransport
from qworker.transport import wire
from tests.admission_policy import Slots


class Unencodable:
    """A params value no message can carry."""


def make(send: Optional[StubTransport] = None) -> tuple[Scheduler, StubTransport, PendingTable]:
    stub = send or StubTransport()
    table = PendingTable(cache=ResultCache(max_entries=1000, ttl_s=None, path=None), fallback_score=0.0)
    return Scheduler(send=stub, table=table, max_attempts=3, heartbeat_timeout_s=3.0, max_message_bytes=1 << 20), stub, table


def submit(s: Scheduler, table: PendingTable, first: int, n: int, params: dict):
    with table.registering([(i.to_bytes(16, "big"), b"p") for i in range(first, first + n)], reward="noop", params=params,
                           timeout_s=None, policy=None, now=0.0, hand_on=s.add) as reg:
        reg.hand_on(reg.new)
    return reg.futures


def ready(s: Scheduler, wid: str, granted: int) -> None:
    s.handle(wid.encode(), wire.Ready(*wire.STAMP, wid, "pool", 1, "h", granted, 0, 0, [], []), 0.0)


def answer(s: Scheduler, stub: StubTransport, wid: str) -> None:
    keys = [t.key for t in stub.tasks_to(wid)]
    s.handle(wid.encode(), wire.Results(100, len(keys), [wire.TaskResult(k, 1.0, None, None, 0.001, None, None) for k in keys]), 0.1)


def test_a_task_whose_params_cannot_be_encoded_fails_and_the_tasks_taken_with_it_are_still_sent():
    s, stub, table = make()
    before = submit(s, table, 0, 3, {})
    bad = submit(s, table, 100, 2, {"x": Unencodable()})
    after = submit(s, table, 200, 2, {})
    ready(s, "a", granted=100)
    s.dispatch(0.0)
    assert all(f.done() for f in bad)
    for f in bad:
        r = f.result()
        assert r.error_kind == ErrorKind.BAD_PAYLOAD and "cannot be encoded" in r.error and "Unencodable" in r.error
    assert len(stub.tasks_to("a")) == 5 and len(s.queue) == 0
    answer(s, stub, "a")
    assert all(f.done() and f.result().ok for f in before + after)
    assert len(table) == 0


class FailingOnce(StubTransport):
    """A transport whose first TASKS message cannot be encoded (as ``wire.encode`` raising in the dispatcher's send)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def __call__(self, peer: bytes, msg: wire.Message) -> bool:
        if isinstance(msg, wire.Tasks) and not self.failed:
            self.failed = True
            raise OverflowError("int too big to convert")
        return super().__call__(peer, msg)


def test_a_message_that_cannot_be_sent_fails_its_tasks_instead_of_leaving_them_leased_to_a_worker_that_never_got_them():
    s, stub, table = make(FailingOnce())
    futures = submit(s, table, 0, 3, {})
    ready(s, "a", granted=100)
    s.dispatch(0.0)
    assert all(f.done() for f in futures)
    assert {f.result().error_kind for f in futures} == {ErrorKind.BAD_PAYLOAD}
    assert "OverflowError" in futures[0].result().error
    assert s.fleet.workers["a"].leases == {} and len(table) == 0
    # the worker is still served: the next tasks go to it
    more = submit(s, table, 100, 2, {})
    s.dispatch(0.1)
    assert [p.state for p in s.fleet.workers["a"].leases.values()] == [LEASED, LEASED]
    answer(s, stub, "a")
    assert all(f.done() and f.result().ok for f in more)


class MetaFailsFor(Slots):
    """A policy with a bug: what it attaches to one task's delivery cannot be made."""

    def __init__(self, slots: int, bad: bytes) -> None:
        super().__init__(slots)
        self.bad = bad

    def meta(self, p: Pending) -> dict:
        if p.key == self.bad:
            raise KeyError("no slot for it")
        return super().meta(p)


def test_a_task_whose_policy_cannot_make_its_metadata_fails_and_the_others_of_its_message_are_sent():
    s, stub, table = make()
    policy = MetaFailsFor(10, bad=(1).to_bytes(16, "big"))
    with table.registering([(i.to_bytes(16, "big"), b"p") for i in range(3)], reward="noop", params={}, timeout_s=None,
                           policy=policy, now=0.0, hand_on=s.add) as reg:
        reg.hand_on(reg.new)
    futures = reg.futures
    ready(s, "a", granted=100)
    s.dispatch(0.0)
    assert futures[1].done() and futures[1].result().error_kind == ErrorKind.BAD_PAYLOAD
    assert "KeyError" in futures[1].result().error
    assert [p.key for p in policy.forgotten] == [(1).to_bytes(16, "big")]
    s.dispatch(0.1)  # the others were given back to their policy, which admits them again
    assert sorted(t.key for t in stub.tasks_to("a")) == [(0).to_bytes(16, "big"), (2).to_bytes(16, "big")]
    answer(s, stub, "a")
    assert futures[0].result().ok and futures[2].result().ok and len(table) == 0
