"""A pool's report of a lost worker that reaches the producer after it gave the worker up for silent.

The producer gives up a worker that neither it nor its pool has been heard from for the heartbeat
timeout, and redelivers what it held free (it cannot tell which task was running).  When the pool's
report then comes, late, naming the task the worker was running when it hung or crashed, that task
is charged as it would have been had the report come first: max_attempts bounds how many workers a
poison task can take down whichever arrives first.

Stub transport, simulated time: the tests play the workers and the pool.
"""

from __future__ import annotations

from qworker._errors import ErrorKind
from qworker.cache.results import ResultCache
from qworker.engine.pending import PendingTable
from qworker.engine.scheduler import Scheduler
from qworker.testing import StubTransport
from qworker.transport import wire

HB = 3.0  # heartbeat timeout, seconds
CRASH = wire.Fault(ErrorKind.WORKER_LOST, "crashed: exit code -11")


def make(max_attempts: int) -> tuple[Scheduler, StubTransport, PendingTable]:
    stub = StubTransport()
    table = PendingTable(cache=ResultCache(max_entries=1000, ttl_s=None, path=None), fallback_score=0.0)
    return Scheduler(send=stub, table=table, max_attempts=max_attempts, heartbeat_timeout_s=HB, max_message_bytes=1 << 20), stub, table


def submit(s: Scheduler, table: PendingTable, n: int):
    with table.registering([(i.to_bytes(16, "big"), b"p") for i in range(n)], reward="noop", params={},
                           timeout_s=None, policy=None, now=0.0, hand_on=s.add) as reg:
        reg.hand_on(reg.new)
    return reg.futures


def ready(s: Scheduler, wid: str, granted: int, now: float) -> None:
    s.handle(wid.encode(), wire.Ready(*wire.STAMP, wid, "pool", 1, "h", granted, 0, 0, [], []), now)


def pool_reports_lost(s: Scheduler, wid: str, reason: wire.Fault, task: bytes | None, now: float) -> None:
    report = wire.PoolReport(*wire.STAMP, "pool", "h", 1, "running", [wire.WorkerReport(wid, 1, False, 0.0, 1, 10.0)], [wire.Lost(wid, reason, task)])
    s.handle(b"pool:pool", report, now)


POISON = (0).to_bytes(16, "big")


def test_a_task_that_hung_its_worker_fails_with_its_timeout_when_the_pools_report_comes_after_the_worker_was_given_up():
    s, stub, table = make(max_attempts=3)
    poison, innocent = submit(s, table, 2)
    ready(s, "w0", granted=2, now=0.0)
    s.dispatch(0.0)
    s.housekeeping(HB + 0.5)  # the pool's report is late: the producer gives w0 up, and redelivers both free
    assert "w0" not in s.fleet.workers and not poison.done()
    ready(s, "w1", granted=2, now=HB + 0.5)
    s.dispatch(HB + 0.5)
    assert {t.key for t in stub.tasks_to("w1")} == {POISON, (1).to_bytes(16, "big")}
    pool_reports_lost(s, "w0", wire.Fault(ErrorKind.TIMEOUT, "reward ran past its 2 s hard limit"), POISON, now=HB + 1.0)
    assert poison.result(timeout=0).error == "timeout: reward ran past its 2 s hard limit (worker w0 was killed and respawned)"
    assert not innocent.done()
    assert table.get((1).to_bytes(16, "big")).attempts == 1  # its delivery to w1 only: w0's was refunded and stays so
    assert POISON not in s.fleet.workers["w1"].leases  # the resolved task holds no lease


def test_a_poison_task_takes_down_at_most_max_attempts_workers_when_every_pool_report_comes_late():
    max_attempts = 2
    s, stub, table = make(max_attempts=max_attempts)
    poison, innocent = submit(s, table, 2)
    taken_down = 0
    t = 0.0
    previous = None
    for gen in range(10):
        wid = f"w{gen}"
        ready(s, wid, granted=2, now=t)
        s.dispatch(t)
        if previous is not None:  # the report of the worker before this one, late: it crashed running the poison task
            pool_reports_lost(s, previous, CRASH, POISON, now=t + 0.1)
        if poison.done():
            break
        taken_down += POISON in {k.key for k in stub.tasks_to(wid)}
        t += HB + 0.5
        s.housekeeping(t)  # the worker crashed; its pool's report has not come yet
        previous = wid
    r = poison.result(timeout=0)
    assert r.error_kind == "worker_lost" and f"attempt {max_attempts} of {max_attempts} was on worker w1" in r.error, r.error
    assert taken_down == max_attempts
    assert not innocent.done() and table.get((1).to_bytes(16, "big")).attempts <= 1  # lost beside it every time, charged nothing



def _redelivered_then_reported_late(max_attempts: int):
    """The poison task's worker w0 goes silent and is given up; the task is redelivered to w1, which is running it when
    w0's pool reports, late, that w0 crashed running it."""
    s, stub, table = make(max_attempts=max_attempts)
    [poison] = submit(s, table, 1)
    ready(s, "w0", granted=1, now=0.0)
    s.dispatch(0.0)
    s.housekeeping(HB + 0.5)
    ready(s, "w1", granted=1, now=HB + 0.5)
    s.dispatch(HB + 0.5)
    assert [t.key for t in stub.tasks_to("w1")] == [POISON]
    pool_reports_lost(s, "w0", CRASH, POISON, now=HB + 1.0)
    assert not poison.done() and POISON in s.fleet.workers["w1"].leases  # w1's delivery goes on
    return s, stub, table, poison


def test_a_late_report_that_uses_up_a_tasks_attempts_lets_the_worker_running_it_finish_and_its_result_resolves_it():
    s, stub, table, poison = _redelivered_then_reported_late(max_attempts=1)
    s.handle(b"w1", wire.Results(1, 1, [wire.TaskResult(POISON, 0.5, None, None, 0.001, None, None)]), HB + 1.5)
    r = poison.result(timeout=0)
    assert r.ok and r.score == 0.5 and r.worker == "w1"
    assert s.stats["duplicate_results"] == 0 and len(table) == 0


def test_a_task_whose_attempts_a_late_report_used_up_is_not_delivered_again_when_it_is_handed_back_unrun():
    s, stub, table, poison = _redelivered_then_reported_late(max_attempts=1)
    s.handle(b"w1", wire.Giveback(1, 1, [POISON]), HB + 1.5)  # w1 hands it back unrun (draining)
    ready(s, "w2", granted=1, now=HB + 1.5)
    s.dispatch(HB + 1.5)
    assert stub.tasks_to("w2") == []  # not delivered a third time
    r = poison.result(timeout=0)
    assert r.error_kind == "worker_lost" and "attempt 1 of 1 was on worker w0" in r.error, r.error
    assert len(table) == 0


def test_a_task_whose_attempts_a_late_report_used_up_fails_when_the_worker_running_it_is_lost_too():
    s, stub, table, poison = _redelivered_then_reported_late(max_attempts=1)
    s.housekeeping(2 * HB + 1.0)  # w1 goes silent as well
    assert "w1" not in s.fleet.workers
    r = poison.result(timeout=0)
    assert r.error_kind == "worker_lost" and "attempt 1 of 1 was on worker w0" in r.error, r.error
    assert len(table) == 0 and len(s.queue) == 0


def _fail_on(s: Scheduler, wid: str, key: bytes, now: float) -> None:
    w = s.fleet.workers[wid]
    s.handle(wid.encode(), wire.Results(w.granted, 1, [wire.TaskResult(key, None, None, wire.Fault(ErrorKind.REWARD_ERROR, "boom"), 0.1, None, None)]), now)


def test_a_task_submitted_again_after_a_late_report_used_up_the_attempts_of_its_earlier_one_is_delivered_afresh():
    s, stub, table = make(max_attempts=2)
    (first,) = submit(s, table, 1)
    t = 0.0
    for wid in ("w0", "w1"):  # two workers given up for silent while holding it: both refunded
        ready(s, wid, granted=1, now=t)
        s.dispatch(t)
        t += HB + 0.5
        s.housekeeping(t)
    ready(s, "w2", granted=1, now=t)
    s.dispatch(t)
    pool_reports_lost(s, "w0", CRASH, POISON, now=t)
    pool_reports_lost(s, "w1", CRASH, POISON, now=t)  # its attempts used up while w2 runs it: that delivery finishes
    _fail_on(s, "w2", POISON, now=t)
    assert first.result(timeout=0).error == "reward_error: boom"
    (again,) = submit(s, table, 1)  # an error is not cached: the same payload submitted again is a new task
    ready(s, "w2", granted=2, now=t)
    s.dispatch(t)
    assert not again.done() and [x.key for x in stub.tasks_to("w2")] == [POISON, POISON]


def test_a_late_report_naming_a_task_resolved_and_submitted_again_since_leaves_the_new_task_alone():
    s, stub, table = make(max_attempts=3)
    (first,) = submit(s, table, 1)
    t = 0.0
    ready(s, "w0", granted=1, now=t)
    s.dispatch(t)
    t += HB + 0.5
    s.housekeeping(t)  # w0 given up: its task refunded, until its pool's report
    ready(s, "w1", granted=1, now=t)
    s.dispatch(t)
    _fail_on(s, "w1", POISON, now=t)
    (again,) = submit(s, table, 1)
    ready(s, "w1", granted=2, now=t)
    s.dispatch(t)
    report = wire.PoolReport(*wire.STAMP, "pool", "h", 1, "running", [], [
        wire.Lost("w0", CRASH, POISON),  # about the first task: the new one is not charged for it
        wire.Lost("w1", wire.Fault(ErrorKind.TIMEOUT, "reward ran past its 2 s hard limit"), POISON)])  # read too
    s.handle(b"pool:pool", report, t)
    assert "w1" not in s.fleet.workers
    assert again.result(timeout=0).error.startswith("timeout: reward ran past its 2 s hard limit")
