"""Errors cross the admission-policy seam as (kind, detail) and become ``Result.error``'s text only as the result is made."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Optional

from qworker._errors import ErrorKind
from qworker.cache.hashing import encode_payload
from qworker.engine.admission import Decision
from qworker.engine.task import Pending
from qworker.host.worker import call_reward
from qworker.transport import wire
from qworker.transport.wire import Fault
from tests.admission_policy import Slots
from tests.unit.engine.test_admission import make
from tests.unit.engine.test_scheduler import ready


class Recording(Slots):
    """``Slots`` that keeps each error it is handed, and fails the tasks named in ``refuse`` instead of admitting them."""

    def __init__(self, slots: int, refuse: tuple[bytes, ...] = ()) -> None:
        super().__init__(slots)
        self.errors: list[Optional[Fault]] = []
        self.refuse = refuse

    def admit(self, now: float, budget: int) -> tuple[list[Pending], list[tuple[Pending, Fault]]]:
        failed = [(p, Fault(ErrorKind.JUDGE_ERROR, "no endpoint has room: endpoint 0 down")) for p in self.queue if p.key in self.refuse]
        self.queue = type(self.queue)(p for p in self.queue if p.key not in self.refuse)
        sent, _ = super().admit(now, budget)
        return sent, failed

    def on_result(self, p: Pending, meta: Optional[dict], error: Optional[Fault], now: float) -> Decision:
        self.errors.append(error)
        return super().on_result(p, meta, error, now)


def boom(payload: object, call: object = None) -> float:
    raise ValueError("boom: at the second colon")


def test_a_policy_is_handed_a_workers_failure_as_its_kind_and_detail_with_no_text_to_parse():
    policy = Recording(1)
    s, stub, futures = make(policy, 1)
    ready(s, "a", granted=10)
    s.dispatch(0.0)
    task = stub.tasks_to("a")[0]
    # the worker runs the reward and reports its failure as it does, and the message crosses the wire's codec
    score, extra, error, outcome = call_reward(SimpleNamespace(fn=boom), encode_payload({"x": 1}), {}, task.meta)
    kind, body = wire.encode(wire.Results(10, 1, [wire.TaskResult(task.key, score, extra, error, 0.001, outcome, None)]))
    s.handle(b"a", wire.PRODUCER.decode(kind, body, max_bytes=1 << 20), 0.1)
    assert policy.errors == [wire.Fault(ErrorKind.REWARD_ERROR, "ValueError: boom: at the second colon")]
    result = futures[0].result(0)
    assert result.error == "reward_error: ValueError: boom: at the second colon" and result.error_kind is ErrorKind.REWARD_ERROR


def test_a_task_its_policy_fails_resolves_with_the_policys_kind_and_detail_as_text():
    policy = Recording(2, refuse=((0).to_bytes(16, "big"),))
    s, stub, futures = make(policy, 2)
    ready(s, "a", granted=10)
    s.dispatch(0.0)
    failed = futures[0].result(0)
    assert failed.error == "judge_error: no endpoint has room: endpoint 0 down" and failed.error_kind is ErrorKind.JUDGE_ERROR
    assert [t.key for t in stub.tasks_to("a")] == [(1).to_bytes(16, "big")]  # the other was admitted and sent
