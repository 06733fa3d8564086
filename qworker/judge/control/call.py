"""``JudgeCall``: what the judge's gate keeps about one task's calls to its endpoints, in its own table.

A leaf module (``gate``, ``routing`` and ``outcome`` name it).  One lives from
the task's first admission until it resolves or leaves (``Gate.forget``); the
route of a delivery is cleared when its answer comes back or the task is handed
back, while the counts of retries and refusals last across calls.  Units:
monotonic seconds, endpoint indices (``NO_ROUTE``: none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["JudgeCall", "NO_ROUTE"]

NO_ROUTE = -1


@dataclass(slots=True)
class JudgeCall:
    route: int = NO_ROUTE  # the endpoint the gate chose for the delivery in flight
    routed_at: float = 0.0  # when the gate let it go to that endpoint
    seq: int = 0  # that endpoint's send number when it went (``Endpoint.sent``)
    level: int = 0  # every producer's requests at its server once this one gets there, itself included (``Endpoint.total_at_server``)
    surely: int = 0  # the same, counting only the requests surely at the server (``Endpoint.surely_at_server``)
    tries: int = 0  # endpoint calls retried after errors
    throttled: int = 0  # endpoint calls refused with 429/503 (a budget of their own)
    failed_on: int = NO_ROUTE  # the endpoint whose error it is retried after: its next call prefers another
    not_before: Optional[float] = None  # refused with Retry-After: not sent again before then
