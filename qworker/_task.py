"""``Pending``: one submitted task that has not resolved yet, and what it knows about its deliveries.

A leaf module: it imports nothing of the producer's machinery, so the pending
table, the scheduler, the fleet and the judge gates all name ``Pending``
without importing one another.  A task that waits for a judge's capacity
holds its gate through the ``TaskGate`` protocol, the part of a gate the
scheduler uses.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Hashable, Optional, Protocol

from ._result import ResultFuture
from .transport import wire

if TYPE_CHECKING:
    from ._fleet import WorkerState
    from ._identity import TaskIdentity
    from ._status import JudgeStatus

__all__ = ["Pending", "Resolution", "TaskGate"]


class TaskGate(Protocol):
    """What the scheduler does with a task's gate (``qworker.judge.gate.Gate`` is the one kind)."""

    queue: deque[Pending]

    def admit(self, now: float, budget: int) -> tuple[list[Pending], list[tuple[Pending, str]]]: ...

    def next_wake(self, now: float) -> Optional[float]: ...

    def tick(self, now: float) -> None: ...

    def settle(self, p: Pending, outcome: Optional[dict], error: Optional[str], now: float) -> bool: ...

    def forget(self, p: Pending) -> None: ...

    def snapshot(self, now: float) -> JudgeStatus: ...


@dataclass(slots=True, eq=False)
class Pending:
    """One unresolved task; duplicate submissions share it (and its future)."""

    key: bytes
    reward: str
    params: dict
    payload: bytes
    timeout_s: Optional[float]
    future: ResultFuture
    submitted: float  # monotonic seconds
    attempts: int = 0  # deliveries charged to this task (a loss it did not cause is refunded)
    deliveries: int = 0  # every delivery, refunded or not: bounds redelivery loops
    holder: Optional[WorkerState] = None  # the worker holding its lease
    resolved: bool = False  # set under the table's lock when the future is claimed
    gate: Optional[TaskGate] = None  # set when the task calls a rate-limited endpoint
    route: int = wire.NO_ROUTE  # the endpoint the gate chose for this delivery
    routed_at: float = 0.0  # when the gate let it go to that endpoint (monotonic seconds)
    tries: int = 0  # endpoint calls retried by the gate after errors
    throttled: int = 0  # endpoint calls refused with 429/503 (a budget of their own)
    failed_on: int = wire.NO_ROUTE  # the endpoint whose error it is retried after: its next call prefers another
    lane: Hashable = 0  # who submitted it: lanes are served round-robin (``_lanes``); a service's client each
    identity: Optional[TaskIdentity] = None  # what its key hashes besides the payload (shared by its submission)
    cache_as: Optional[bytes] = None  # the key its result is cached under when not ``key`` (other code ran it); b"": not cached

    def as_task(self) -> wire.Task:
        return wire.Task(self.key, self.reward, self.params, self.payload, self.timeout_s, self.attempts, self.route)

    def deliver(self) -> None:
        """It is being sent to a worker: one more delivery, charged."""
        self.attempts += 1
        self.deliveries += 1

    def undeliver(self) -> None:
        """The last delivery does not count: never sent, handed back unrun, or its endpoint call is retried."""
        self.attempts -= 1
        self.deliveries -= 1

    def refund(self) -> None:
        """Its worker was lost, and not because of this task: the delivery is not charged (it still counts
        toward the cap on deliveries)."""
        self.attempts -= 1


# How a task ended: (pending, score, extra, error, worker id, compute_s); error is an
# ``ErrorKind.X.error(...)`` text or None.  A plain tuple: one is made per result.
Resolution = tuple[Pending, Optional[float], Optional[dict], Optional[str], str, float]
