"""In a fleet of pools with different frame limits, a task too big for a narrow worker waits for a wide one: while a
worker of a wider limit was heard from within the heartbeat timeout (or the fleet is starting: a heartbeat timeout
from the first Ready), it is not failed; it holds up no narrow worker, and makes no worker give tasks back for a worker
that could not take them.  On a stub transport, no sockets."""

from __future__ import annotations

import pytest

from qworker._errors import ErrorKind
from qworker.cache.results import ResultCache
from qworker.engine.pending import PendingTable
from qworker.engine.scheduler import MESSAGE_OVERHEAD, Scheduler, _TaskSizer
from qworker.engine.task import Pending, WorkerState
from qworker.testing import StubTransport
from qworker.transport import wire

MiB = 1 << 20
LOW = 65_536
HB = 3.0  # the heartbeat timeout, s


def make() -> tuple[Scheduler, StubTransport, PendingTable]:
    stub = StubTransport()
    table = PendingTable(cache=ResultCache(max_entries=1000, ttl_s=None, path=None), fallback_score=0.0)
    s = Scheduler(send=stub, table=table, max_attempts=3, heartbeat_timeout_s=HB, max_message_bytes=MiB)
    return s, stub, table


def submit(s: Scheduler, table: PendingTable, sizes: list[int], lane: object = 0, base: int = 0) -> list:
    entries = [(((base + i).to_bytes(16, "big")), b"p" * n) for i, n in enumerate(sizes)]
    with table.registering(entries, reward="noop", params={}, timeout_s=None, policy=None, now=0.0, hand_on=s.add,
                           lane=lane) as reg:
        reg.hand_on(reg.new)
    return reg.futures


def ready(s: Scheduler, wid: str, limit: int, granted: int = 500, received: int = 0, now: float = 0.0) -> None:
    s.handle(wid.encode(), wire.Ready(*wire.STAMP, wid, "pool-" + wid, 1, "h", granted, received, 0, [], [], {}, limit), now)


def revokes_to(stub: StubTransport, wid: str) -> list[int]:
    return [m.n for peer, m in stub.sent if peer == wid.encode() and isinstance(m, wire.Revoke)]


def error(fut) -> str:
    return fut.result(timeout=0).error if fut.done() else ""


def a_loaded_wide_worker_beside_an_idle_narrow_one(sizes: list[int]) -> tuple[Scheduler, StubTransport]:
    """Tasks of ``sizes`` bytes all sent to a wide worker, then a narrow worker ready with credit 5."""
    s, stub, table = make()
    submit(s, table, sizes)
    ready(s, "wide", MiB, granted=len(sizes))
    s.dispatch(0.0)
    ready(s, "narrow", LOW, granted=5)
    return s, stub


def a_big_task_sent_to_the_wide_worker() -> tuple[Scheduler, StubTransport, object]:
    """A wide and a narrow worker (no credit); one task too big for the narrow one, sent to the wide one."""
    s, stub, table = make()
    [fut] = submit(s, table, [200_000])
    ready(s, "wide", MiB, granted=1)
    ready(s, "narrow", LOW, granted=0)
    s.dispatch(0.0)
    assert [t.key[-1] for t in stub.tasks_to("wide")] == [0]
    return s, stub, fut


def test_a_task_handed_back_by_a_wide_worker_that_left_waits_for_a_wide_worker_within_the_heartbeat_timeout():
    s, stub, table = make()
    [fut] = submit(s, table, [200_000])
    submit(s, table, [100] * 40, base=100)
    ready(s, "wide", MiB, granted=41)
    ready(s, "narrow", LOW, granted=0)
    s.dispatch(0.0)
    assert [t.key[-1] for t in stub.tasks_to("wide")][0] == 0
    held = [k for k in s.fleet.workers["wide"].leases if k[-1] != 0 or k[-2] != 0]
    t = 0.25
    while t <= HB + 1:  # past the start-up grace, housekeeping every 0.25 s as the dispatcher runs it; the wide worker
        # busy, heard from by its Results alone (not Ready, no pool report)
        done = wire.TaskResult(held.pop(), 1.0, None, None, 0.0, None, None)
        s.handle(b"wide", wire.Results(41, len(stub.tasks_to("wide")), [done]), t)
        s.housekeeping(t)
        t += 0.25
    s.handle(b"wide", wire.Bye("restarting"), t)
    ready(s, "narrow", LOW, granted=5, now=t + 0.2)
    s.dispatch(t + 0.2)
    s.housekeeping(t + 0.2)
    assert not fut.done(), error(fut)
    ready(s, "wide2", MiB, granted=1, now=t + 1)  # the wide pool is back
    s.dispatch(t + 1)
    assert [t.key[-1] for t in stub.tasks_to("wide2")] == [0] and not any(k.key[-1] == 0 for k in stub.tasks_to("narrow"))


def test_a_task_waiting_for_a_wide_worker_fails_once_none_was_heard_from_for_the_heartbeat_timeout():
    s, stub, table = make()
    [fut] = submit(s, table, [200_000])
    ready(s, "wide", MiB, granted=1)
    ready(s, "narrow", LOW, granted=0)
    s.dispatch(0.0)
    s.handle(b"wide", wire.Bye("gone"), HB + 1)
    for t in (HB + 1.5, 2 * HB + 0.9):
        ready(s, "narrow", LOW, granted=5, now=t)
        s.dispatch(t)
        s.housekeeping(t)
    assert not fut.done(), error(fut)
    ready(s, "narrow", LOW, granted=5, now=2 * HB + 1.1)
    s.dispatch(2 * HB + 1.1)
    s.housekeeping(2 * HB + 1.1)
    bad = fut.result(timeout=0)
    assert bad.error_kind == "bad_payload" and not stub.tasks_to("narrow"), bad.error


def test_at_start_up_a_task_over_the_first_pools_limit_waits_a_heartbeat_timeout_for_another_pool():
    s, stub, table = make()
    [fut] = submit(s, table, [200_000])
    ready(s, "narrow", LOW, granted=5, now=0.0)  # the wide pool is still starting
    s.dispatch(0.0)
    s.housekeeping(HB - 0.1)
    assert not fut.done(), error(fut)
    ready(s, "wide", MiB, granted=1, now=HB - 0.1)
    s.dispatch(HB - 0.1)
    assert [t.key[-1] for t in stub.tasks_to("wide")] == [0] and not fut.done()


def test_a_task_over_every_limit_stated_fails_once_the_start_up_grace_is_over_stating_the_bound_a_task_must_fit():
    s, stub, table = make()
    [fut] = submit(s, table, [200_000])
    ready(s, "narrow", LOW, granted=5, now=0.0)
    s.dispatch(0.0)
    assert not fut.done()
    ready(s, "narrow", LOW, granted=5, now=HB + 0.1)
    s.housekeeping(HB + 0.1)
    bad = fut.result(timeout=0)
    assert bad.error_kind == "bad_payload" and bad.attempts == 0, bad.error
    assert f"over the {LOW - MESSAGE_OVERHEAD} bytes a task may be" in bad.error, bad.error


def test_a_task_over_the_producers_own_limit_fails_at_once_even_at_start_up():
    s, stub, table = make()
    [fut] = submit(s, table, [2 * MiB])
    ready(s, "narrow", LOW, granted=5)
    s.dispatch(0.0)
    bad = fut.result(timeout=0)
    assert bad.error_kind == "bad_payload" and f"{MiB - MESSAGE_OVERHEAD} bytes a task may be" in bad.error, bad.error


def test_a_narrow_worker_takes_the_small_tasks_queued_behind_tasks_only_a_wide_worker_can_take():
    s, stub, table = make()
    futs = submit(s, table, [200_000, 200_000] + [100] * 50)
    ready(s, "wide", MiB, granted=0)
    ready(s, "narrow", LOW, granted=2)  # a slow reward: credit for two at a time
    for i in range(30):
        s.dispatch(i / 10)
        sent = len(stub.tasks_to("narrow"))
        ready(s, "narrow", LOW, granted=sent + 2, received=sent, now=i / 10)  # it finished what it had
    assert len(stub.tasks_to("narrow")) == 50 and not any(f.done() for f in futs)
    assert len(s.queue) == 0  # the two big tasks wait apart: they count in no worker's share of the queue
    ready(s, "wide", MiB, granted=2, now=3.0)
    s.dispatch(3.0)
    assert [t.key[-1] for t in stub.tasks_to("wide")] == [0, 1]


def test_an_idle_worker_too_narrow_for_a_loaded_workers_tasks_does_not_make_it_give_them_back():
    s, stub = a_loaded_wide_worker_beside_an_idle_narrow_one([200_000] * 6)
    for i in range(1, 20):
        s.dispatch(i / 10)
    assert revokes_to(stub, "wide") == [] and not stub.tasks_to("narrow")


def test_a_lane_waiting_only_for_a_wide_worker_makes_no_narrow_worker_give_back():
    s, stub, table = make()
    ready(s, "wide", MiB, granted=0)
    ready(s, "narrow", LOW, granted=30)
    submit(s, table, [200_000], lane="X")
    submit(s, table, [100] * 30, lane="Y", base=1000)
    for i in range(40):
        s.dispatch(i * 0.05)
    assert revokes_to(stub, "narrow") == [] and len(stub.tasks_to("narrow")) == 30


def test_a_limit_stated_under_the_least_a_process_accepts_counts_as_that_least():
    s, stub, table = make()
    submit(s, table, [40_000])
    ready(s, "tiny", 1000, granted=5)
    s.dispatch(0.0)
    assert [t.key[-1] for t in stub.tasks_to("tiny")] == [0]
    assert s.fleet.workers["tiny"].max_message_bytes == LOW


def test_a_task_of_a_wide_worker_its_pool_reports_lost_waits_while_that_pool_reports_and_respawns_it():
    s, stub, fut = a_big_task_sent_to_the_wide_worker()
    crashed = wire.Lost("wide", wire.Fault(ErrorKind.WORKER_LOST, "crashed: exit code -9"), None)
    for i, t in enumerate((HB + 1, 2 * HB, 3 * HB)):  # the wide pool reports every heartbeat while its worker respawns
        s.handle(b"pool-wide", wire.PoolReport(*wire.STAMP, "pool-wide", "h", 2, "running", [], [crashed] if i == 0 else []), t)
        ready(s, "narrow", LOW, granted=5, now=t)
        s.dispatch(t)
        s.housekeeping(t)
    assert not fut.done(), error(fut)
    s.handle(b"wide-2", wire.Ready(*wire.STAMP, "wide-2", "pool-wide", 3, "h", 1, 0, 0, [], [], {}, MiB), 3 * HB + 0.5)
    s.dispatch(3 * HB + 0.5)
    assert [t.key[-1] for t in stub.tasks_to("wide-2")] == [0] and not stub.tasks_to("narrow")


def report(s: Scheduler, pool: str, now: float, workers: tuple[str, ...] = ()) -> None:
    s.handle(pool.encode(), wire.PoolReport(*wire.STAMP, pool, "h", 2, "running",
                                            [wire.WorkerReport(w, 1, True, 0.0, 0, 1.0) for w in workers], []), now)


def test_the_limit_of_a_pool_whose_live_workers_are_all_quarantined_stops_counting():
    s, stub, fut = a_big_task_sent_to_the_wide_worker()
    # idle with its lease outstanding, long after the send, twice: the lease vanished twice, and the worker is quarantined
    s.handle(b"wide", wire.Ready(*wire.STAMP, "wide", "pool-wide", 1, "h", 2, 1, 1, [], [], {}, MiB), HB + 1)
    s.dispatch(HB + 1)
    s.handle(b"wide", wire.Ready(*wire.STAMP, "wide", "pool-wide", 1, "h", 3, 2, 2, [], [], {}, MiB), 2 * HB + 2)
    assert s.fleet.workers["wide"].quarantined
    t = 2 * HB + 2
    while t < 4 * HB + 3:  # its pool goes on reporting it alive
        report(s, "pool-wide", t, ("wide",))
        ready(s, "narrow", LOW, granted=5, now=t)
        s.dispatch(t)
        s.housekeeping(t)
        t += 1.0
    assert fut.done() and "65472 bytes a task may be" in error(fut), error(fut)
    assert len(stub.tasks_to("wide")) == 2


def test_a_fleet_that_starts_again_after_every_worker_left_gives_its_pools_the_start_up_grace_again():
    s, stub, table = make()
    ready(s, "wide", MiB, granted=0)
    ready(s, "narrow", LOW, granted=0)
    s.handle(b"wide", wire.Bye("restart"), 10.0)
    s.handle(b"narrow", wire.Bye("restart"), 10.0)
    s.housekeeping(20.0)
    [fut] = submit(s, table, [200_000])
    s.dispatch(50.0)
    ready(s, "narrow2", LOW, granted=5, now=100.0)  # the narrow pool is back first
    s.dispatch(100.0)
    s.housekeeping(100.0)
    assert not fut.done(), error(fut)
    ready(s, "wide2", MiB, granted=5, now=100.5)
    s.dispatch(100.5)
    assert [t.key[-1] for t in stub.tasks_to("wide2")] == [0]


def test_a_worker_whose_frame_fits_no_waiting_task_does_not_walk_them():
    s, stub, table = make()
    submit(s, table, [70_000] * 50)
    ready(s, "wide", MiB, granted=0)
    for i in range(5):
        ready(s, f"n{i}", LOW, granted=1 if i == 0 else 0)
    s.dispatch(0.0)
    for i in range(5):
        ready(s, f"n{i}", LOW, granted=100, now=0.1)
    assert len(s.wide) == 50 and not s.queue
    walks: list[str] = []
    take = s._take_wide

    def counted(w: WorkerState, alone: int, room: int, leased: list) -> int:
        walks.append(w.id)
        return take(w, alone, room, leased)

    s._take_wide = counted  # type: ignore[method-assign]
    for i in range(5):
        s.dispatch(0.2 + i * 0.01)
    assert walks == []
    ready(s, "wide", MiB, granted=3, now=0.3)
    s.dispatch(0.3)
    assert walks == ["wide"] and [t.key[-1] for t in stub.tasks_to("wide")] == [0, 1, 2]
    assert [p.key[-1] for p, _ in s.wide] == list(range(3, 50))


@pytest.mark.parametrize("sizes, revoked", [
    ([100] * 6, [2]),  # all small: half of what it holds beyond the task it runs
    ([200_000] + [100] * 20, [10]),  # running a big one: the small ones queued behind it still come back
    ([100] * 4 + [200_000] + [100] * 3, [3]),  # only its newest that fit (a worker gives back its newest first)
], ids=["all-small", "running-a-big-one", "newest-that-fit"])
def test_a_wide_worker_gives_an_idle_narrow_one_back_its_newest_tasks_that_fit_it(sizes, revoked):
    s, stub = a_loaded_wide_worker_beside_an_idle_narrow_one(sizes)
    s.dispatch(0.1)
    assert revokes_to(stub, "wide") == revoked


def test_what_a_wide_worker_could_give_back_is_weighed_at_most_once_a_revoke_interval():
    s, stub = a_loaded_wide_worker_beside_an_idle_narrow_one([200_000] * 6)
    s.dispatch(0.1)  # the tasks the wide worker has no credit for go to wait for it
    assert s.wide and not s.queue
    sized: list[bytes] = []

    class Counted(_TaskSizer):
        def task_bytes(self, p: Pending) -> int:
            sized.append(p.key)
            return super().task_bytes(p)

    s._sizer = Counted()
    for i in range(1, 11):  # ten dispatch turns within one REVOKE_EVERY_S (0.05 s)
        s.dispatch(0.1 + i * 0.004)
    assert len(sized) == 1 and revokes_to(stub, "wide") == []


def test_a_narrow_worker_keeps_getting_a_policys_small_tasks_while_its_big_ones_wait_for_a_wide_worker():
    from tests.admission_policy import Slots

    s, stub, table = make()
    policy = Slots(1000)
    entries = [(i.to_bytes(16, "big"), b"p" * (200_000 if i < 5 else 100)) for i in range(100)]
    with table.registering(entries, reward="noop", params={}, timeout_s=None, policy=policy, now=0.0,
                           hand_on=s.add) as reg:
        reg.hand_on(reg.new)
    ready(s, "wide", MiB, granted=0)  # busy: no credit
    ready(s, "narrow", LOW, granted=5)
    for i in range(20):
        s.dispatch(i * 0.01)
    assert len(s.wide) == 5 and stub.tasks_to("narrow"), "the narrow worker got none of the small tasks"
