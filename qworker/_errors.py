"""Why a task failed: ``ErrorKind``, the first word of every ``Result.error``.

A failed task resolves to a ``Result`` whose ``error`` is ``"<kind>: <detail>"``.
Every place that fails a task builds that text with ``ErrorKind.X.error(detail)``,
so the kinds below are the complete list (the README's table is tested against it).
"""

from __future__ import annotations

import enum
from typing import Optional

__all__ = ["ErrorKind"]


class ErrorKind(str, enum.Enum):
    """The kinds of task failure.  A ``str`` subclass: ``kind == "timeout"`` holds."""

    TIMEOUT = "timeout"  # past its hard limit; the worker was killed and respawned
    WORKER_LOST = "worker_lost"  # every attempt went to a worker that died or went silent
    REWARD_ERROR = "reward_error"  # the reward raised (the exception follows)
    UNKNOWN_REWARD = "unknown_reward"  # no worker could resolve the reward name
    BAD_PAYLOAD = "bad_payload"  # the payload could not be encoded (or, sent encoded, decoded), or was too large
    BAD_RESULT = "bad_result"  # the reward returned something that is not a score
    JUDGE_ERROR = "judge_error"  # an LLM judge's endpoints refused or failed the call
    CANCELLED = "cancelled"  # the producer (or the client) closed first, or its submission failed before handing it on
    SERVICE_LOST = "service_lost"  # a Client's reward service stopped answering and did not come back in time

    def error(self, detail: str) -> str:
        """The ``Result.error`` text for a failure of this kind."""
        return f"{self.value}: {detail}"

    @classmethod
    def of(cls, error: Optional[str]) -> Optional[ErrorKind]:
        """The kind of an error text (None for None, or for text of no known kind)."""
        if error is None:
            return None
        try:
            return cls(error.split(":", 1)[0])
        except ValueError:
            return None

    def __str__(self) -> str:
        return self.value
