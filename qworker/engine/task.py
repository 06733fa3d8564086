"""``Pending``: one submitted task, its state, and the transitions that keep its indexes consistent.

A leaf module: it imports nothing of the producer's machinery, so the pending
table, the scheduler, the fleet and the admission policies all name ``Pending``
without importing one another.  A task that waits in an admission policy
(``engine.admission``) names its policy; the policy keeps its own state for it.

A task's lifetime (``TaskState``), every legal move::

    NEW     -> QUEUED | WAITING | DONE
    QUEUED  -> LEASED | DONE
    WAITING -> QUEUED | DONE            (its policy admits it)
    LEASED  -> QUEUED | WAITING | DONE  (back: its worker was lost, unreachable, or gave it back)
    DONE    (final: a result, a cache hit, a failure or a cancellation)

* NEW: registered in the pending table, not with a scheduler: the submitting
  thread's until it hands the task on (a ``Client``'s until the service's
  result settles it).
* QUEUED: in the scheduler's ``FairQueue``, waiting for a worker's credit
  (``FairQueue`` makes the move as it takes the task in).
* WAITING: in its admission policy's hands, waiting for admission (for the
  judge's policy: its queue, or its heap of tasks parked until a Retry-After,
  which of the two is the policy's own state).
* LEASED: sent to a worker and not answered.
* DONE: resolved; its future is set.  Final.

**Invariants**, kept by the transition methods below (and their batch forms
``enqueue_all``, ``lease_all``, ``finish_all``), which are the only writers of
``state``, ``holder``, ``attempts`` and ``deliveries``:

* ``p.state is LEASED`` ⇔ ``p.holder is not None`` ⇔ ``p.holder.leases[p.key] is p``:
  ``WorkerState.leases`` and ``holder`` are one lease index, and a task
  leaves it the moment it is requeued, handed to its policy or resolved.
* ``p.state is DONE`` ⇔ the task has left the pending table (``finish`` is
  called only by ``PendingTable``, under its lock, as it removes the task).
  A DONE task is in no lease index.  It may still sit in a queue (removing
  it from the middle of a deque costs O(n)): the scheduler drops it when it
  reaches the front of ``FairQueue`` (``Scheduler.dispatch``), a policy when it
  reaches the front of its queue.
* ``attempts <= deliveries``; both grow by one per ``lease``; ``refund`` and
  ``undeliver`` adjust only the current lease's delivery; ``charge`` takes
  back a refund.

A transition from a state it does not start from raises ``IllegalTransition``:
it is a bug in qworker, and failing loudly beats a task that is in two
queues, or leased and queued at once.

Threads: a task's transitions run on the dispatcher's thread, except
``finish`` (under the table's lock, on the thread that resolves it).  A
LEASED task is finished on the dispatcher's thread or once it has stopped,
so the lease index is only ever written by one thread at a time.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Hashable, Optional, Protocol, Sequence

import msgspec

from ..transport import wire
from ..transport.wire import Fault
from .result import ResultFuture
from .status import JudgeStatus as PolicyStatus  # the one kind of status row a policy gives today

if TYPE_CHECKING:
    from ..cache.identity import TaskIdentity

__all__ = ["AdmissionPolicy", "Decision", "DONE", "Fault", "IllegalTransition", "LEASED", "NEW", "Pending", "PolicyPending", "QUEUED",
           "Resolution", "TaskState", "WAITING", "WorkerState", "RESOLVE", "enqueue_all", "finish_all", "lease_all"]


class TaskState(enum.Enum):
    """Where a task is (see the module's docstring for the transitions)."""

    NEW = "new"
    QUEUED = "queued"
    WAITING = "waiting"
    LEASED = "leased"
    DONE = "done"


NEW, QUEUED, WAITING, LEASED, DONE = TaskState.NEW, TaskState.QUEUED, TaskState.WAITING, TaskState.LEASED, TaskState.DONE


class IllegalTransition(RuntimeError):
    """A task was asked to move from a state it cannot leave that way: a bug in qworker."""


class Pending(msgspec.Struct, eq=False, gc=False):
    """One submitted task, from registration until its future is set (DONE); duplicate submissions share it
    (and its future) while it is not DONE.

    A struct (compared by identity) that the cyclic garbage collector does not track (``gc=False``): a
    producer holds one per pending task, and tracking them made the collections after a large
    submission rescan the whole backlog.  Its one reference cycle, ``holder`` <-> ``holder.leases``,
    is undone as the task leaves its lease, and every task finishes (``PendingTable.close`` cancels
    what is left).  A task with an admission policy is a ``PolicyPending``, which the collector
    tracks: a policy's per-task tables refer back to it while its ``policy`` refers to them.

    ``empty_extra`` is the ``Result.extra`` it resolves with when its worker reports none, made with
    the task rather than with its result: then resolving a batch of results allocates no object the
    collector counts that outlives the batch, so results streaming in set off no young collection,
    which would move the caller's pending futures to older generations (and, once per large batch, a
    full collection of the process).  An empty dict refers to nothing: it adds no cycle.
    """

    key: bytes
    reward: str
    params: dict
    payload: bytes
    timeout_s: Optional[float]
    future: ResultFuture
    submitted: float  # monotonic seconds
    identity: Optional[TaskIdentity] = None  # what its key hashes besides the payload (shared by its submission)
    # written only by the transitions below (see the module's invariants)
    state: TaskState = NEW
    attempts: int = 0  # deliveries charged to this task (a loss it did not cause is refunded)
    deliveries: int = 0  # every delivery, refunded or not: bounds redelivery loops
    holder: Optional[WorkerState] = None  # the worker holding its lease: set exactly while LEASED
    policy: Optional[AdmissionPolicy] = None  # what admits it (``engine.admission``); None: straight to the queue
    lane: Hashable = 0  # who submitted it: lanes are served round-robin (``engine.lanes``); a service's client each
    cache_as: Optional[bytes] = None  # the key its result is cached under when not ``key`` (other code ran it); b"": not cached
    empty_extra: dict = msgspec.field(default_factory=dict)  # its ``Result.extra`` if its worker reports none (see above)

    def as_task(self, meta: Optional[dict] = None) -> wire.Task:
        """This delivery as the wire carries it; ``meta``: what its admission policy attached (``AdmissionPolicy.meta``)."""
        return wire.Task(self.key, self.reward, self.params, self.payload, self.timeout_s, self.attempts, meta)

    @property
    def resolved(self) -> bool:
        """Whether its future is claimed (it is DONE)."""
        return self.state is DONE

    def _illegal(self, move: str) -> IllegalTransition:
        return IllegalTransition(f"task {self.key.hex()[:16]}: cannot {move} a {self.state.value} task")

    # transitions (the only writers of state, holder, attempts and deliveries) ---------------------------
    def enqueue(self) -> None:
        """NEW, WAITING or LEASED -> QUEUED (ending its lease).  ``FairQueue`` calls it as it takes the task in."""
        enqueue_all((self,))

    def wait(self) -> None:
        """NEW or LEASED -> WAITING (ending its lease): its admission policy holds it until it admits it."""
        state = self.state
        if state is LEASED:
            del self.holder.leases[self.key]  # type: ignore[union-attr]  # LEASED: it has a holder
            self.holder = None
        elif state is not NEW:
            raise self._illegal("hand to its admission policy")
        self.state = WAITING

    def lease(self, worker: WorkerState) -> None:
        """QUEUED -> LEASED to ``worker``: it is being sent there; one more delivery, charged."""
        lease_all((self,), worker)

    def undeliver(self) -> None:
        """LEASED: its current delivery does not count (never sent, handed back unrun, or its endpoint call
        is retried).  It stays LEASED until it is requeued."""
        if self.state is not LEASED:
            raise self._illegal("undeliver")
        self.attempts -= 1
        self.deliveries -= 1

    def refund(self) -> None:
        """LEASED: its worker was lost, and not because of this task: the current delivery is not charged
        (it still counts toward the cap on deliveries).  It stays LEASED until it is requeued or failed."""
        if self.state is not LEASED:
            raise self._illegal("refund")
        self.attempts -= 1

    def charge(self) -> None:
        """Not DONE: a delivery ``refund`` made free turns out to have been this task's fault (its pool's report
        came after its worker was given up): it is charged after all.  Only a refunded delivery can be."""
        if self.state is DONE or self.attempts >= self.deliveries:
            raise self._illegal("charge a refunded delivery of")
        self.attempts += 1

    def finish(self) -> None:
        """Any state but DONE -> DONE, leaving its lease index.  Only ``PendingTable`` calls it (or
        ``finish_all``), under its lock, as the task leaves the table."""
        finish_all((self,))


class PolicyPending(Pending, gc=True):
    """A ``Pending`` with an admission ``policy``: tracked by the cyclic garbage collector, so that a policy
    dropped while its tables still hold tasks (a producer closed with tasks waiting) is reclaimed."""


def finish_all(tasks: Sequence[Pending]) -> None:
    """``Pending.finish`` for each of ``tasks`` (one call for a batch of results: the dispatcher's hot path).
    If one is DONE already (a bug), those before it are finished and it raises."""
    for p in tasks:
        holder = p.holder
        if holder is not None:  # LEASED
            del holder.leases[p.key]
            p.holder = None
        elif p.state is DONE:
            raise p._illegal("resolve")
        p.state = DONE


def enqueue_all(tasks: Sequence[Pending]) -> None:
    """``Pending.enqueue`` for each of ``tasks`` (``FairQueue.extend``'s batch).  If one cannot be queued (a bug:
    QUEUED or DONE already), it raises before any of them moves."""
    for p in tasks:
        state = p.state
        if state is not NEW and state is not WAITING and state is not LEASED:
            raise p._illegal("queue")
    for p in tasks:
        holder = p.holder
        if holder is not None:  # LEASED
            del holder.leases[p.key]
            p.holder = None
        p.state = QUEUED


def lease_all(tasks: Sequence[Pending], worker: WorkerState) -> None:
    """``Pending.lease(worker)`` for each of ``tasks`` (one call for a TASKS message: the dispatcher's hot path).
    If one is not QUEUED (a bug), those before it are leased and it raises."""
    leases = worker.leases
    for p in tasks:
        if p.state is not QUEUED:
            raise p._illegal("lease")
        p.state = LEASED
        p.holder = worker
        leases[p.key] = p
        p.attempts += 1
        p.deliveries += 1


# How a task ended: (pending, score, extra, error, worker id, compute_s); error is a ``Fault`` (kind, detail) or
# None, rendered as ``Result.error``'s text only as the result is made (``PendingTable.resolve``).  A plain tuple:
# one is made per result.
Resolution = tuple[Pending, Optional[float], Optional[dict], Optional[Fault], str, float]


# -- what holds a task: a worker's lease, or an admission policy (both written by Pending's transitions) --
@dataclass(slots=True, eq=False)
class WorkerState:
    id: str
    pool: str
    pid: int
    host: str
    granted: int = 0
    sent: int = 0
    last_seen: float = 0.0
    last_sent_at: float = 0.0
    last_revoke_at: float = 0.0
    leases: dict[bytes, Pending] = field(default_factory=dict)  # key -> task LEASED here; written by Pending's transitions only
    done: int = 0
    failed: int = 0
    last_progress: float = 0.0  # when it last returned a result or a task, or was sent work while idle
    vanished: int = 0  # times its leases vanished: it took tasks and neither ran nor returned them
    quarantined: bool = False  # sent nothing more (see Scheduler)
    max_message_bytes: int = 0  # its frame limit as its Ready states it, bytes; 0: not said (the producer's own)

    @property
    def credit(self) -> int:
        return self.granted - self.sent

    def sync_credit(self, granted: int, received: int) -> None:
        self.granted = granted
        if received > self.sent:  # a producer restarted under a running worker
            self.sent = received


@dataclass(frozen=True, slots=True)
class Decision:
    """What a policy decided about a result: tried again, or resolved with ``error``, a ``Fault`` (None: success)."""

    retry: bool
    error: Optional[Fault] = None


RESOLVE = Decision(False)


class AdmissionPolicy(Protocol):
    """The hooks the scheduler calls (contracts in the module docstring)."""

    def add(self, tasks: list[Pending]) -> None: ...

    def admit(self, now: float, budget: int) -> tuple[list[Pending], list[tuple[Pending, Fault]]]: ...

    def meta(self, p: Pending) -> dict: ...

    def next_wake(self, now: float) -> Optional[float]: ...

    def tick(self, now: float) -> None: ...

    def on_result(self, p: Pending, meta: Optional[dict], error: Optional[Fault], now: float) -> Decision: ...

    def give_back(self, tasks: list[Pending]) -> None: ...

    def forget(self, p: Pending) -> None: ...

    def waiting(self) -> int: ...

    def snapshot(self, now: float) -> PolicyStatus: ...
