"""``FairQueue``: the scheduler's queue of tasks waiting for credit, served round-robin across lanes.

A task's ``lane`` names who submitted it (a reward service gives each client
its own; a producer's own submissions share lane 0).  New tasks wait in their
lane, and ``popleft`` takes one task from each lane in turn, so several
trainers sharing one service all progress instead of being served one whole
batch after the other.  Tasks put back at the front (redeliveries, tasks a
judge gate admitted) go first, before any lane.

With one lane it is a deque.  The deque calls the scheduler makes are the
ones it has: ``append``, ``extendleft``, ``popleft``, ``[0]``, ``len``,
iteration (front, then lanes in turn order); ``take(n)``, a TASKS message's worth of
``popleft`` in one call, and ``untake``, which puts back at the very front
the tail of what ``take`` returned that did not fit the message.

Turns at the queue are not enough: workers ask for credit ahead (up to
``max_hold`` tasks, from their past speed), so a lane that arrives while
workers hold the whole batch of another would still wait for it.
``overserved`` names how many unstarted tasks each worker should give back
(``Revoke``) when lanes wait while others hold more than their share; what
comes back goes to the front of its own lane (``putback``), so the lanes then
take turns.

Every way in (``append``, ``extend``, ``putback``, ``extendleft``) moves the task to
QUEUED (``Pending.enqueue``, which raises for a task that cannot be queued:
one already queued or resolved), so a task is in the queue only while it is
QUEUED, or DONE and not yet dropped from the front (``Scheduler.dispatch``).
"""

from __future__ import annotations

from collections import Counter, deque
from itertools import chain, groupby, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Callable, Hashable, Iterable, Iterator

from ..transport import wire
from .task import DONE, Pending, enqueue_all

if TYPE_CHECKING:
    from .fleet import WorkerState

__all__ = ["FairQueue", "Turns", "overserved", "KEEP"]

_LANE = attrgetter("lane")
KEEP = 2  # tasks a worker keeps when asked to give back: the one it runs and the next


class FairQueue:
    __slots__ = ("_front", "_lanes", "_turn", "_len", "_first", "mixed")

    def __init__(self) -> None:
        self._front: deque[Pending] = deque()  # put back: goes first
        self._lanes: dict[Hashable, deque[Pending]] = {}
        self._turn: deque[Hashable] = deque()  # lanes with tasks, the next to serve first
        self._len = 0
        self._first: Hashable = None
        self.mixed = False  # a second lane was ever seen: turns (and giving back) matter

    def waiting(self) -> set[Hashable]:
        """Lanes with tasks queued (in their lanes, or put back at the front and not finished since)."""
        lanes = set(self._turn)
        for p in self._front:
            if p.state is not DONE:
                lanes.add(p.lane)
        return lanes

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
        p.enqueue()
        self._lane(p.lane).append(p)
        self._len += 1

    def extend(self, tasks: list[Pending]) -> None:
        """New tasks, each at the back of its lane (``append`` for a batch).  If one cannot be queued (a bug),
        it raises and none is taken in (``enqueue_all``)."""
        enqueue_all(tasks)
        lanes = self._lanes
        # a run of tasks of one lane at a time (a batch is one submission's, or a reward service's turn of several
        # clients' requests, each a run): no Python step per task
        for lane, run in groupby(tasks, _LANE):
            q = lanes.get(lane)
            if q is None:
                q = self._lane(lane)
            q.extend(run)
        self._len += len(tasks)

    def _lane(self, lane: Hashable) -> deque[Pending]:
        q = self._lanes.get(lane)
        if q is None:
            if self._first is None:
                self._first = lane
            elif lane != self._first:
                self.mixed = True
            q = self._lanes[lane] = deque()
            self._turn.append(lane)
        return q

    def putback(self, tasks: Iterable[Pending]) -> None:
        """Tasks given back unstarted, each to the front of its own lane (their order kept)."""
        for p in reversed(list(tasks)):
            p.enqueue()
            self._lane(p.lane).appendleft(p)
            self._len += 1

    def extendleft(self, tasks: Iterable[Pending]) -> None:
        """Tasks put back, each to the very front (as ``deque.extendleft``: pass them reversed to keep their order)."""
        front = self._front
        for p in tasks:
            p.enqueue()
            front.appendleft(p)
            self._len += 1

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

    def take(self, n: int) -> list[Pending]:
        """Up to ``n`` tasks, in the order as many ``popleft`` calls would give them (one call for a TASKS message).
        With one lane and nothing at the front, in C but for one Python step per task; with several, a whole round
        of turns at a time (``_rounds``)."""
        if not self._front and len(self._turn) == 1:
            lane = self._turn[0]
            q = self._lanes[lane]
            k = min(n, len(q))
            pop = q.popleft
            taken = [pop() for _ in range(k)]
            self._len -= k
            if not q:
                self._turn.popleft()
                del self._lanes[lane]
            return taken
        n = min(n, self._len)
        front = self._front
        taken = list(map(deque.popleft, repeat(front, min(n, len(front)))))  # put back: first
        self._len -= len(taken)
        if len(taken) < n:
            self._rounds(n - len(taken), taken)
        return taken

    def _rounds(self, n: int, taken: list[Pending]) -> None:
        """Append ``n`` tasks from the lanes to ``taken`` as ``popleft`` gives them: ``r`` whole rounds (each lane in
        turn, ``r`` times: one lane's first ``r`` tasks, interleaved with the others') while every lane has ``r`` and
        there is room for them, each a few calls in C whatever ``r``; what is left of ``n``, fewer than one round,
        one ``popleft`` at a time.  A whole round leaves the turns as they were, but for the lanes it emptied."""
        turn, lanes = self._turn, self._lanes
        while n:
            k = len(turn)
            r = n // k
            if r:  # (the lanes are scanned only when a whole round fits in ``n``)
                r = min(r, min(len(lanes[lane]) for lane in turn))
            if not r:
                popleft = self.popleft
                taken.extend(popleft() for _ in range(n))  # a last part of a round (fewer than k tasks)
                return
            columns = [list(map(deque.popleft, repeat(lanes[lane], r))) for lane in turn]
            taken.extend(chain.from_iterable(zip(*columns, strict=True)))  # (r tasks in each column)
            self._len -= r * k
            n -= r * k
            emptied = [lane for lane in turn if not lanes[lane]]  # by the last round: out of the turns, in one pass
            if emptied:
                kept = [lane for lane in turn if lanes[lane]]
                turn.clear()
                turn.extend(kept)
                for lane in emptied:
                    del lanes[lane]

    def untake(self, tasks: list[Pending]) -> None:
        """Tasks ``take`` just returned (still QUEUED), not sent after all: first again, in their order, at the very
        front (with one lane, exactly where they were; with several, the lanes' turns have moved on past them)."""
        self._front.extendleft(reversed(tasks))
        self._len += len(tasks)


def overserved(queue: FairQueue, workers: Iterable[WorkerState]) -> dict[WorkerState, int]:
    """Unstarted tasks each worker should give back so that waiting lanes get their turn.

    Only while lanes wait: a lane holding more than an equal share of the tasks
    held (lanes waiting or held, counted alike) plus ``KEEP`` is over-served;
    a worker holding its tasks gives back up to that many, keeping ``KEEP``.
    """
    waiting = queue.waiting()
    if not waiting:
        return {}
    held: Counter = Counter()
    per: dict[WorkerState, Counter] = {}
    for w in workers:
        if len(w.leases) > KEEP and not w.quarantined:
            c = per[w] = Counter(p.lane for p in w.leases.values())
            held.update(c)
    lanes = waiting | set(held)
    if len(lanes) < 2:
        return {}
    share = sum(held.values()) / len(lanes)
    over = {lane for lane, n in held.items() if n > share + KEEP}
    out = {}
    for w, c in per.items():
        n = min(len(w.leases) - KEEP, sum(c[lane] for lane in over))
        if n > 0:
            out[w] = n
    return out


class Turns:
    """Asks over-served workers to give back (``Revoke``), at most once per ``every_s``, each worker too."""

    def __init__(self, *, every_s: float) -> None:
        self.every_s = every_s
        self._at = float("-inf")

    def check(self, queue: FairQueue, workers: Iterable[WorkerState], now: float, send: Callable[[bytes, wire.Message], bool]) -> None:
        if now - self._at < self.every_s:
            return
        self._at = now
        for w, n in overserved(queue, workers).items():
            if now - w.last_revoke_at >= self.every_s:
                w.last_revoke_at = now
                send(w.id.encode(), wire.Revoke(n))
