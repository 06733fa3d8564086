"""What one answer says (the table atop ``gate``): an ``Answer``, its ``Kind``, and the ``Verdict`` on it.

``classify(answer, health)`` reads an answer's meaning, given its endpoint's
health (a 503 is a refusal only with Retry-After or once errors are over the
error budget); it changes nothing.  ``health.Health.observe`` then records it
and returns the ``Verdict`` that the gate (retries) and the limiter act on.
Units: seconds (the gate's clock), requests.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Protocol

__all__ = ["AUTH_DOWN_S", "MAX_RETRY_AFTER_S", "Answer", "Kind", "Verdict", "classify"]

AUTH_DOWN_S = 60.0
ERROR_STREAK_DOWN = 5
MAX_RETRY_AFTER_S = 60.0
SHORT_RETRY_AFTER = 0.25  # an exact Retry-After up to this fraction of a round trip holds the whole endpoint
OVERLOAD_STATUSES = (503, 529)


class Kind(enum.Enum):
    """What an answer means for its endpoint."""

    NONE = "none"  # no call was made (a bad payload): nothing about the endpoint
    SERVED = "served"  # 200
    REFUSED = "refused"  # 429, or 503/529 with Retry-After or past the error budget: the server is at capacity
    TIMEOUT = "timeout"
    HUNG = "hung"  # a timeout while the server answered requests sent well after it (``estimators.Hangs``): not its load
    UNREACHABLE = "unreachable"  # connection refused / host unreachable
    AUTH = "auth"  # 401, 403: our credentials
    ERROR = "error"  # reset, 408, 409, other 5xx: noise within the error budget
    REJECTED = "rejected"  # another 4xx: the request itself; not retried


@dataclass(frozen=True, slots=True)
class Answer:
    """One call's answer, as the gate read and screened it (``checks.measured``, ``checks.screen``)."""

    status: int  # HTTP status (0: none)
    failure: str  # "timeout", "connect", "reset", ... ("" when the server answered)
    at: float  # when the answer came back (the gate's clock)
    routed_at: float  # when the gate let the call go
    latency: float = 0.0  # seconds at the server, as the worker measured them (0: not measured)
    retry_after: Optional[float] = None  # seconds
    ratelimit: Optional[dict] = None  # the screened rate-limit headers (``ratelimit``)
    error: str = ""  # the worker's error text, clipped


@dataclass(frozen=True, slots=True)
class Verdict:
    """What follows from one answer.

    ``again``: the task is tried again; ``park_until``: not before then (None: as the gate's retry rules say);
    ``came_back``: the endpoint was down and this answered its probe (its limit starts afresh);
    ``cuts_limit``: a timeout while errors are over the budget (the limiter takes it as a drop);
    ``charged``: an error that counts against the task's attempts (not when the endpoint is down: its fault).
    """

    kind: Kind
    again: bool
    park_until: Optional[float] = None
    came_back: bool = False
    cuts_limit: bool = False
    charged: bool = True


class ErrorBudget(Protocol):
    """What ``classify`` reads of an endpoint's health (``health.Health`` is one)."""

    def over_budget(self) -> bool: ...


def classify(answer: Answer, health: ErrorBudget) -> Kind:
    """The meaning of ``answer`` for an endpoint in ``health`` (reads its error budget; changes nothing)."""
    status, failure = answer.status, answer.failure
    if status == 200:
        return Kind.SERVED
    if status == 429 or (status in OVERLOAD_STATUSES and (answer.retry_after is not None or health.over_budget())):
        return Kind.REFUSED
    if failure == "timeout":
        return Kind.TIMEOUT
    if failure == "connect":
        return Kind.UNREACHABLE
    if status in (401, 403):
        return Kind.AUTH
    if failure == "reset" or status in (408, 409) or status >= 500:
        return Kind.ERROR
    return Kind.REJECTED
