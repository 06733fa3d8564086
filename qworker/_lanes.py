"""``FairQueue``: the scheduler's queue of tasks waiting for credit, served round-robin across lanes.

A task's ``lane`` names who submitted it (a reward service gives each client
its own; a producer's own submissions share lane 0).  New tasks wait in their
lane, and ``popleft`` takes one task from each lane in turn, so several
trainers sharing one service all progress instead of being served one whole
batch after the other.  Tasks put back at the front (redeliveries, tasks a
judge gate admitted) go first, before any lane.

With one lane it is a deque.  The deque calls the scheduler makes are the
ones it has: ``append``, ``extendleft``, ``popleft``, ``[0]``, ``len``,
iteration (front, then lanes in turn order).
"""

from __future__ import annotations

from collections import deque
from typing import Hashable, Iterable, Iterator

from ._task import Pending

__all__ = ["FairQueue"]


class FairQueue:
    __slots__ = ("_front", "_lanes", "_turn", "_len")

    def __init__(self) -> None:
        self._front: deque[Pending] = deque()  # put back: goes first
        self._lanes: dict[Hashable, deque[Pending]] = {}
        self._turn: deque[Hashable] = deque()  # lanes with tasks, the next to serve first
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[Pending]:
        yield from self._front
        for lane in self._turn:
            yield from self._lanes[lane]

    def append(self, p: Pending) -> None:
        """A new task, at the back of its lane."""
        lane = p.lane
        q = self._lanes.get(lane)
        if q is None:
            q = self._lanes[lane] = deque()
        if not q:
            self._turn.append(lane)
        q.append(p)
        self._len += 1

    def extendleft(self, tasks: Iterable[Pending]) -> None:
        """Tasks put back, each to the very front (as ``deque.extendleft``: pass them reversed to keep their order)."""
        before = len(self._front)
        self._front.extendleft(tasks)
        self._len += len(self._front) - before

    def __getitem__(self, i: int) -> Pending:
        if i != 0:
            raise IndexError("FairQueue supports [0] only")
        if self._front:
            return self._front[0]
        if not self._turn:
            raise IndexError("the queue is empty")
        return self._lanes[self._turn[0]][0]

    def popleft(self) -> Pending:
        """The front's first task, else the next lane's first (that lane then waits its turn)."""
        if self._front:
            self._len -= 1
            return self._front.popleft()
        turn = self._turn
        if not turn:
            raise IndexError("pop from an empty queue")
        lane = turn[0]
        q = self._lanes[lane]
        p = q.popleft()
        self._len -= 1
        if not q:
            turn.popleft()
            del self._lanes[lane]
        elif len(turn) > 1:
            turn.rotate(-1)
        return p
