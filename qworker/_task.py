"""``Pending``: one submitted task that has not resolved yet, and what it knows about its deliveries.

A leaf module: it imports nothing of the producer's machinery, so the pending
table, the scheduler, the fleet and the judge gates all name ``Pending``
without importing one another.  A task that waits in an admission policy
(``_admission``) names its policy; the policy keeps its own state for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Hashable, Optional

from ._result import ResultFuture
from .transport import wire

if TYPE_CHECKING:
    from ._admission import AdmissionPolicy
    from ._fleet import WorkerState
    from ._identity import TaskIdentity

__all__ = ["Pending", "Resolution"]


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
    policy: Optional[AdmissionPolicy] = None  # what admits it (``_admission``); None: straight to the queue
    lane: Hashable = 0  # who submitted it: lanes are served round-robin (``_lanes``); a service's client each
    identity: Optional[TaskIdentity] = None  # what its key hashes besides the payload (shared by its submission)
    cache_as: Optional[bytes] = None  # the key its result is cached under when not ``key`` (other code ran it); b"": not cached

    def as_task(self, meta: Optional[dict] = None) -> wire.Task:
        """This delivery as the wire carries it; ``meta``: what its admission policy attached (``AdmissionPolicy.meta``)."""
        return wire.Task(self.key, self.reward, self.params, self.payload, self.timeout_s, self.attempts, meta)

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
