"""An admission policy that is not the judge's, for the tests of the seam (``qworker.engine.admission``).

``Slots`` lets at most ``slots`` tasks be in flight, gives each delivery the
slot it holds (``{"slot": n}``), and retries a call once when the reward
reports ``{"busy": True}``; a failure after a retry says so.  ``SlotsSource``
makes one per producer; the instances made are kept in ``SOURCES`` so a test in
the producer's process can look at what its policy saw.
"""

from __future__ import annotations

from collections import deque
from typing import Optional

from qworker.engine.admission import RESOLVE, Decision, Fault, PolicyStatus, Submission
from qworker.engine.task import Pending

SOURCES: list[SlotsSource] = []


class Slots:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.queue: deque[Pending] = deque()
        self.held: dict[Pending, int] = {}  # task in flight -> its slot
        self.retried: set[Pending] = set()
        self.reported: list[Optional[dict]] = []  # every result's meta, in order
        self.forgotten: list[Pending] = []

    def add(self, tasks: list[Pending]) -> None:
        self.queue.extend(tasks)

    def admit(self, now: float, budget: int) -> tuple[list[Pending], list[tuple[Pending, Fault]]]:
        sent = []
        while self.queue and len(sent) < budget and len(self.held) < self.slots:
            p = self.queue.popleft()
            if p.resolved:
                continue
            self.held[p] = min(set(range(self.slots)) - set(self.held.values()))
            sent.append(p)
        return sent, []

    def meta(self, p: Pending) -> dict:
        return {"slot": self.held[p]}

    def next_wake(self, now: float) -> Optional[float]:
        return None

    def tick(self, now: float) -> None:
        pass

    def on_result(self, p: Pending, meta: Optional[dict], error: Optional[Fault], now: float) -> Decision:
        self.reported.append(meta)
        self.held.pop(p, None)
        if (meta or {}).get("busy") and p not in self.retried:
            self.retried.add(p)
            self.queue.appendleft(p)
            return Decision(True)
        if error is not None and p in self.retried:
            return Decision(False, Fault(error.kind, f"{error.detail} (after a retry)"))
        return RESOLVE if error is None else Decision(False, error)

    def give_back(self, tasks: list[Pending]) -> None:
        for p in tasks:
            self.held.pop(p, None)
        self.queue.extendleft(reversed(tasks))

    def forget(self, p: Pending) -> None:
        self.held.pop(p, None)
        self.forgotten.append(p)

    def waiting(self) -> int:
        return len(self.queue)

    def snapshot(self, now: float) -> PolicyStatus:
        return {"model": "slots", "queued": len(self.queue), "delayed": 0, "endpoints": []}


class SlotsSource:
    def __init__(self) -> None:
        self.policies: dict[int, Slots] = {}
        SOURCES.append(self)

    def submission(self, params: dict) -> Submission:
        slots = int(params.get("slots", 1))
        policy = self.policies.setdefault(slots, Slots(slots))
        return Submission(policy, {k: v for k, v in params.items() if k != "slots"})

    def close(self) -> None:
        pass
