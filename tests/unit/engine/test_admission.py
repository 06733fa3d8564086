"""The admission-policy seam: the scheduler holds, sends, retries and forgets a policy's tasks only through its hooks."""

from __future__ import annotations

from qworker._errors import ErrorKind
from qworker.cache.results import ResultCache
from qworker.engine.pending import PendingTable
from qworker.engine.scheduler import Scheduler
from qworker.testing import StubTransport
from qworker.transport import wire
from tests.admission_policy import Slots
from tests.unit.engine.test_scheduler import HB, lost, ready


def make(policy: Slots, n: int) -> tuple[Scheduler, StubTransport, list]:
    stub = StubTransport()
    table = PendingTable(cache=ResultCache(max_entries=100, ttl_s=None, path=None), fallback_score=0.0)
    s = Scheduler(send=stub, table=table, max_attempts=3, heartbeat_timeout_s=HB, max_message_bytes=1 << 20)
    with table.registering([(i.to_bytes(16, "big"), b"p") for i in range(n)], reward="r", params={}, timeout_s=None,
                           policy=policy, now=0.0, hand_on=s.add) as reg:
        reg.hand_on(reg.new)
    return s, stub, reg.futures


def fault(error: str | None) -> wire.Fault | None:
    """``"kind: detail"`` as the wire carries it."""
    if error is None:
        return None
    kind, _, detail = error.partition(": ")
    return wire.Fault(ErrorKind(kind), detail)


def answer(s: Scheduler, task: wire.Task, meta: dict | None, error: str | None = None, now: float = 0.1) -> None:
    """Worker "a" (granted 10) returns ``task``'s result, having received all that was sent to it."""
    received = s.fleet.workers["a"].sent
    s.handle(b"a", wire.Results(10, received, [wire.TaskResult(task.key, None if error else 1.0, None, fault(error), 0.001, meta, None)]), now)


def test_a_policy_holds_its_tasks_until_it_admits_them_and_each_delivery_carries_its_meta():
    policy = Slots(2)
    s, stub, futures = make(policy, 3)
    ready(s, "a", granted=10)
    s.dispatch(0.0)
    first = stub.tasks_to("a")
    assert [t.meta for t in first] == [{"slot": 0}, {"slot": 1}]  # two slots: the third task waits in the policy
    assert s.waiting_for_admission() == 1 and not s.queue
    answer(s, first[0], {"ok": 1})
    s.dispatch(0.2)
    third = stub.tasks_to("a")[2]
    assert third.key == (2).to_bytes(16, "big") and third.meta == {"slot": 0}  # the freed slot
    assert policy.reported == [{"ok": 1}] and futures[0].result(0).score == 1.0


def test_a_call_the_policy_retries_is_sent_again_uncharged_and_its_failure_carries_the_policys_account():
    policy = Slots(1)
    s, stub, futures = make(policy, 1)
    ready(s, "a", granted=10)
    s.dispatch(0.0)
    answer(s, stub.tasks_to("a")[0], {"busy": True}, "reward_error: busy")
    assert not futures[0].done()
    s.dispatch(0.2)
    again = stub.tasks_to("a")[1]
    assert again.attempt == 1  # the attempt of the first delivery was not charged: the call, not the delivery, was retried
    answer(s, again, {"busy": True}, "reward_error: busy again")
    assert futures[0].result(0).error == "reward_error: busy again (after a retry)"


def test_tasks_lost_with_their_worker_go_back_to_their_policy_and_a_task_that_fails_with_it_is_forgotten():
    policy = Slots(2)
    s, stub, futures = make(policy, 2)
    ready(s, "a", granted=10)
    s.dispatch(0.0)
    running = stub.tasks_to("a")[0].key
    lost(s, "a", wire.Fault(ErrorKind.TIMEOUT, "killed past its hard limit"), running)
    assert futures[0].result(0).error.startswith("timeout")
    assert [p.key for p in policy.forgotten] == [running]
    assert [p.key for p in policy.queue] == [(1).to_bytes(16, "big")] and not policy.held  # given back, slot released




class ForgetRaises(Slots):
    """``Slots`` whose ``forget`` hook has a bug."""

    def forget(self, p) -> None:
        raise RuntimeError("the policy's forget broke")


def test_a_policy_whose_forget_raises_neither_strands_its_task_nor_stops_the_scheduler():
    stub = StubTransport()
    table = PendingTable(cache=ResultCache(max_entries=100, ttl_s=None, path=None), fallback_score=0.0)
    s = Scheduler(send=stub, table=table, max_attempts=1, heartbeat_timeout_s=HB, max_message_bytes=1 << 20)
    with table.registering([(i.to_bytes(16, "big"), b"p") for i in range(2)], reward="r", params={}, timeout_s=None,
                           policy=ForgetRaises(2), now=0.0, hand_on=s.add) as reg:
        reg.hand_on(reg.new)
    ready(s, "a", granted=10)
    s.dispatch(0.0)
    sent = stub.tasks_to("a")
    assert len(sent) == 2
    lost(s, "a", wire.Fault(ErrorKind.WORKER_LOST, "crashed: exit code -11"), sent[0].key, now=0.1)  # its one attempt: it fails
    failed = reg.futures[0].result(timeout=0)
    assert failed.error_kind is ErrorKind.WORKER_LOST
    assert s.stats["policy_errors"] >= 1 and not reg.futures[1].done()
    s.dispatch(0.2)
    ready(s, "b", granted=10, now=0.2)
    s.dispatch(0.3)
    assert [t.key for t in stub.tasks_to("b")] == [sent[1].key]  # the innocent task is delivered again
