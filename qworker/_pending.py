"""The pending table: every submitted task not yet resolved, and its resolution.

``Pending`` is one unresolved task; duplicate submissions share it (and its
future).  ``PendingTable`` is the one place a task's future is resolved:

* the caller's thread ``add``\\s tasks (sharing the pending entry of an
  identical task already in flight);
* the dispatcher thread ``resolve``\\s them from results; the first result for a
  task wins (``claim``), later ones are dropped;
* a resolution writes the result cache and counts the outcome.

Thread-safe: one lock guards the table; futures are resolved outside it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from ._errors import ErrorKind
from ._result import Result, ResultFuture
from ._resultcache import ResultCache
from .transport import wire

if TYPE_CHECKING:
    from ._fleet import WorkerState
    from .judge.gate import Gate

__all__ = ["Pending", "PendingTable", "Resolution"]


@dataclass(slots=True, eq=False)
class Pending:
    """One unresolved task."""

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
    gate: Optional[Gate] = None  # set when the task calls a rate-limited endpoint
    route: int = wire.NO_ROUTE  # the endpoint the gate chose for this delivery
    routed_at: float = 0.0  # when the gate let it go to that endpoint (monotonic seconds)
    tries: int = 0  # endpoint calls retried by the gate after errors
    throttled: int = 0  # endpoint calls refused with 429/503 (a budget of their own)

    def as_task(self) -> wire.Task:
        return (self.key, self.reward, self.params, self.payload, self.timeout_s, self.attempts, self.route)

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


class PendingTable:
    def __init__(self, *, cache: ResultCache, fallback_score: float) -> None:
        self.cache = cache
        self.fallback_score = fallback_score
        self._lock = threading.Lock()
        self._pending: dict[bytes, Pending] = {}
        # "submitted", "rejected", "cache_hits", "deduplicated": the caller's thread; "resolved", "failed": the dispatcher's
        self.counts = {"submitted": 0, "rejected": 0, "resolved": 0, "failed": 0, "cache_hits": 0, "deduplicated": 0}

    def __len__(self) -> int:
        return len(self._pending)

    def get(self, key: bytes) -> Optional[Pending]:
        return self._pending.get(key)

    def add(self, entries: list[tuple[bytes, bytes]], *, reward: str, params: dict, timeout_s: Optional[float],
            gate: Optional[Gate], now: float) -> tuple[list[ResultFuture], list[Pending]]:
        """Register ``(key, payload bytes)`` entries; returns their futures, in order, and the new tasks.

        An entry whose key is already pending shares that task's future.
        """
        futures: list[ResultFuture] = []
        new: list[Pending] = []
        with self._lock:
            pending = self._pending
            for key, payload in entries:
                p = pending.get(key)
                if p is None:
                    p = pending[key] = Pending(key, reward, params, payload, timeout_s, ResultFuture(), now, gate=gate)
                    new.append(p)
                futures.append(p.future)
        self.counts["deduplicated"] += len(entries) - len(new)
        return futures, new

    def claim(self, tasks: list[Pending]) -> list[Pending]:
        """Take the right to resolve each task; returns those still unresolved, each once."""
        claimed = []
        with self._lock:
            pending = self._pending
            for p in tasks:
                if pending.get(p.key) is p:
                    del pending[p.key]
                    p.resolved = True
                    claimed.append(p)
        return claimed

    def resolve(self, done: Sequence[Resolution]) -> None:
        """Resolve tasks from their outcomes (the first outcome of a task wins); cache the scores."""
        now = time.monotonic()
        with self._lock:
            pending = self._pending
            fresh = []
            for d in done:
                p = d[0]
                if pending.get(p.key) is p:
                    del pending[p.key]
                    p.resolved = True
                    fresh.append(d)
        to_cache = []
        failed = 0
        for p, score, extra, error, worker, compute_s in fresh:
            extra = extra or {}
            if error is None and score is not None:
                to_cache.append((p.key, score, extra, p.reward))  # the disk cache records each row's reward
            else:
                score = self.fallback_score
                failed += 1
            p.future.set_result(Result(
                score=score, extra=extra, error=error, attempts=p.attempts, worker=worker,
                latency_s=now - p.submitted, compute_s=compute_s, key=p.key.hex(),
            ))
        self.cache.put_many(to_cache)
        self.counts["failed"] += failed
        self.counts["resolved"] += len(fresh)

    def resolve_cached(self, tasks: list[Pending], found: dict[bytes, tuple[float, dict]]) -> None:
        """Resolve tasks whose results a slower cache tier had (the memory tier learns them)."""
        hits = self.claim(tasks)
        self.cache.remember([(p.key, *found[p.key]) for p in hits])
        self.counts["cache_hits"] += len(hits)
        for p in hits:
            score, extra = found[p.key]
            p.future.set_result(Result(score=score, extra=extra, cached=True, key=p.key.hex()))

    def cancel_all(self, why: str) -> None:
        """Resolve every task still pending as cancelled."""
        with self._lock:
            left = list(self._pending.values())
        for p in self.claim(left):
            p.future.set_result(Result(score=self.fallback_score, error=ErrorKind.CANCELLED.error(why), attempts=p.attempts, key=p.key.hex()))
