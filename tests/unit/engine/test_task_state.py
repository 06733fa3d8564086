"""A task's state machine (``qworker.engine.task``): legal moves, the one lease index, and loud illegal moves."""

from __future__ import annotations

import pytest

from qworker.engine.fleet import WorkerState
from qworker.engine.lanes import FairQueue
from qworker.engine.result import ResultFuture
from qworker.engine.task import DONE, LEASED, NEW, QUEUED, WAITING, IllegalTransition, Pending


def task(i: int = 1) -> Pending:
    return Pending(i.to_bytes(16, "big"), "noop", {}, b"p", None, ResultFuture(), 0.0)


def worker(wid: str = "w") -> WorkerState:
    return WorkerState(wid, "pool", 1, "h")


def consistent(p: Pending, *workers: WorkerState) -> bool:
    """The lease index's invariant: LEASED <=> a holder <=> in exactly that holder's leases."""
    holders = [w for w in workers if w.leases.get(p.key) is p]
    if p.state is LEASED:
        return holders == [p.holder] and p.holder is not None
    return holders == [] and p.holder is None


def test_an_illegal_transition_raises_instead_of_corrupting_the_task():
    p, w = task(), worker()
    with pytest.raises(IllegalTransition, match="cannot lease a new task"):
        p.lease(w)  # never queued: sending it would bypass the queue
    with pytest.raises(IllegalTransition):
        p.refund()  # nothing to refund: it holds no lease
    q = FairQueue()
    q.append(p)
    with pytest.raises(IllegalTransition, match="cannot queue a queued task"):
        q.append(p)  # in the queue twice would send it twice
    assert len(q) == 1 and p.state is QUEUED and (p.attempts, p.deliveries) == (0, 0) and not w.leases
    q.popleft()
    p.lease(w)
    with pytest.raises(IllegalTransition):
        p.lease(worker("other"))  # leased twice at once
    p.finish()
    for move in (p.finish, p.enqueue, p.wait, p.undeliver):
        with pytest.raises(IllegalTransition):
            move()  # DONE is final
    assert p.state is DONE and p.resolved and not w.leases and p.holder is None


def test_every_move_keeps_the_lease_index_and_the_counts_consistent():
    p, a, b = task(), worker("a"), worker("b")
    assert p.state is NEW and consistent(p, a, b)
    p.wait()
    assert p.state is WAITING and consistent(p, a, b)
    p.enqueue()
    p.lease(a)
    assert p.state is LEASED and p.holder is a and consistent(p, a, b) and (p.attempts, p.deliveries) == (1, 1)
    p.refund()  # lost, not its fault
    p.enqueue()
    assert p.state is QUEUED and consistent(p, a, b) and (p.attempts, p.deliveries) == (0, 1)
    p.lease(b)
    p.undeliver()  # handed back unrun
    p.wait()
    assert p.state is WAITING and consistent(p, a, b) and (p.attempts, p.deliveries) == (0, 1)
    p.enqueue()
    p.lease(a)
    p.finish()
    assert p.state is DONE and consistent(p, a, b) and (p.attempts, p.deliveries) == (1, 2)
