"""``Result`` and ``ResultFuture``: what a submitted task resolves to."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Generator, Optional, Sequence

from ._errors import ErrorKind
from ._exceptions import GatherTimeout

__all__ = ["Result", "ResultFuture", "gather"]

@dataclass(slots=True, kw_only=True)
class Result:
    """The outcome of one reward task.

    ``score`` is the reward's score, or the producer's ``fallback_score`` when
    ``error`` is set; check ``ok`` (or ``error``) rather than trusting a 0.
    ``latency_s`` runs from submission to resolution as the trainer sees it;
    ``compute_s`` is the time spent inside the reward on the worker.
    """

    score: float = 0.0
    extra: dict = field(default_factory=dict)
    error: Optional[str] = None
    cached: bool = False
    attempts: int = 0
    worker: str = ""
    latency_s: float = 0.0
    compute_s: float = 0.0
    key: str = ""  # hex task hash

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def error_kind(self) -> Optional[ErrorKind]:
        """Why it failed (``ErrorKind.TIMEOUT``, ... which compare equal to ``"timeout"``, ...), or None."""
        return ErrorKind.of(self.error)

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score, "extra": self.extra, "error": self.error, "cached": self.cached,
            "attempts": self.attempts, "worker": self.worker, "latency_s": round(self.latency_s, 6),
            "compute_s": round(self.compute_s, 6), "key": self.key,
        }


_PENDING = concurrent.futures._base.PENDING


class _FutureCondition(threading.Condition):
    """``threading.Condition`` over an RLock, built for one future each.

    The stock constructor binds five of the lock's methods onto the instance and
    makes a 768-byte deque for waiters: eight garbage-collected objects per task,
    which at 100k pending tasks make the cyclic GC a fifth of the producer's
    time.  Here they are ordinary methods and the waiters a list (a future has
    0 or 1 waiters; Condition uses append, remove, [0] and len on it).
    """

    def __init__(self) -> None:  # noqa: D107 - no super().__init__: that is what we avoid
        self._lock = threading.RLock()
        self._waiters: Any = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def _release_save(self) -> Any:
        return self._lock._release_save()  # type: ignore[attr-defined]

    def _acquire_restore(self, state: Any) -> None:
        self._lock._acquire_restore(state)  # type: ignore[attr-defined]

    def _is_owned(self) -> bool:
        return self._lock._is_owned()  # type: ignore[attr-defined]


class ResultFuture(concurrent.futures.Future):
    """A ``concurrent.futures.Future`` of a ``Result`` that is also awaitable.

    It never raises for a failed task: the ``Result`` carries the error.
    Callbacks added with ``add_done_callback`` run on the producer's dispatcher
    thread: keep them short.
    """

    def __init__(self) -> None:
        # Future.__init__'s attributes, with a lighter Condition (see below);
        # tests/test_result.py checks this stays in step with Future's.
        self._condition = _FutureCondition()
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._waiters: list = []
        self._done_callbacks: list = []

    def cancel(self) -> bool:
        """Always False: a task is shared by every duplicate submission, so it
        runs to its result (asyncio's ``wait_for`` timing out leaves it running)."""
        return False

    def __await__(self) -> Generator[Any, None, Result]:
        return asyncio.wrap_future(self).__await__()


def gather(futures: Sequence[concurrent.futures.Future], timeout: Optional[float] = None) -> list[Result]:
    """The ``Result`` of each future, in order; sleeps until all are done.

    Raises ``GatherTimeout`` after ``timeout`` seconds; unfinished futures stay
    pending and may still resolve.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    results: list[Result] = []
    # Waiting on the last future first means one wake-up, not one per result
    # batch: by the time it resolves, most earlier ones have too.
    for f in reversed(futures):
        try:
            results.append(f.result(None if deadline is None else max(0.0, deadline - time.monotonic())))
        except concurrent.futures.TimeoutError:
            not_done = sum(not g.done() for g in futures)
            raise GatherTimeout(
                f"{not_done} of {len(futures)} tasks unfinished after {timeout} s", done=len(futures) - not_done, pending=not_done,
            ) from None
    results.reverse()
    return results
