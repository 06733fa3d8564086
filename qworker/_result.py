"""``Result`` and ``ResultFuture``: what a submitted task resolves to."""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass, field
from typing import Any, Generator, Optional

__all__ = ["Result", "ResultFuture"]

# Error kinds: the text before the first ':' of ``Result.error``.
ERROR_KINDS = (
    "timeout",  # past its hard limit; the worker was killed and respawned
    "worker_lost",  # every attempt went to a worker that died or went silent
    "reward_error",  # the reward raised (the exception follows)
    "unknown_reward",  # no worker could resolve the reward name
    "bad_payload",  # the payload could not be encoded, or was too large
    "bad_result",  # the reward returned something that is not a score
    "cancelled",  # the producer closed before the task finished
)


@dataclass(slots=True)
class Result:
    """The outcome of one reward task.

    ``score`` is the reward's score, or the producer's ``fallback_score`` when
    ``error`` is set; check ``ok`` (or ``error``) rather than trusting a 0.
    ``latency_s`` runs from submission to resolution as the trainer sees it;
    ``compute_s`` is the time spent inside the reward on the worker.
    """

    score: float
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
    def error_kind(self) -> Optional[str]:
        """``"timeout"``, ``"worker_lost"``, ``"reward_error"``, ... or None."""
        return None if self.error is None else self.error.split(":", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score, "extra": self.extra, "error": self.error, "cached": self.cached,
            "attempts": self.attempts, "worker": self.worker, "latency_s": round(self.latency_s, 6),
            "compute_s": round(self.compute_s, 6), "key": self.key,
        }


class ResultFuture(concurrent.futures.Future):
    """A ``concurrent.futures.Future`` of a ``Result`` that is also awaitable.

    It never raises for a failed task: the ``Result`` carries the error.
    Callbacks added with ``add_done_callback`` run on the producer's dispatcher
    thread: keep them short.
    """

    def __init__(self) -> None:
        super().__init__()
        # A pending future has 0 or 1 waiters; the Condition's default deque of
        # waiters costs 768 bytes, a list 56.  Condition uses only append,
        # remove, [0], len and truthiness on it, which a list supports.
        self._condition._waiters = []  # type: ignore[attr-defined]

    def __await__(self) -> Generator[Any, None, Result]:
        return asyncio.wrap_future(self).__await__()
