"""The dispatcher's logic on a stub transport: credit, leases, redelivery, stealing, quarantine.

No processes and no sockets: ``Scheduler`` sends through a list, and the tests
play the workers and pools by handing it messages and times.
"""

from __future__ import annotations

import pytest

from qworker._errors import ErrorKind
from qworker.cache.results import ResultCache
from qworker.engine.pending import PendingTable
from qworker.engine.scheduler import MAX_DELIVERIES_FACTOR, Scheduler
from qworker.testing import StubTransport
from qworker.transport import wire

HB = 3.0  # heartbeat timeout, seconds


def make(max_attempts: int = 3) -> tuple[Scheduler, StubTransport, PendingTable]:
    stub = StubTransport()
    table = PendingTable(cache=ResultCache(max_entries=1000, ttl_s=None, path=None), fallback_score=0.0)
    return Scheduler(send=stub, table=table, max_attempts=max_attempts, heartbeat_timeout_s=HB, max_message_bytes=1 << 20), stub, table


def submit(s: Scheduler, table: PendingTable, n: int, start: int = 0):
    with table.registering([(i.to_bytes(16, "big"), b"p") for i in range(start, start + n)], reward="noop", params={},
                           timeout_s=None, policy=None, now=0.0, hand_on=s.add) as reg:
        reg.hand_on(reg.new)
    return reg.futures


def ready(s: Scheduler, wid: str, granted: int, received: int = 0, finished: int = 0, now: float = 0.0, pool: str = "pool") -> None:
    s.handle(wid.encode(), wire.Ready(*wire.STAMP, wid, pool, 1, "h", granted, received, finished, [], []), now)


def results(s: Scheduler, wid: str, keys: list[bytes], granted: int, received: int, now: float = 0.0) -> None:
    s.handle(wid.encode(), wire.Results(granted, received, [wire.TaskResult(k, 1.0, None, None, 0.001, None, None) for k in keys]), now)


def lost(s: Scheduler, wid: str, reason: wire.Fault, task: bytes | None, now: float = 0.0) -> None:
    report = wire.PoolReport(*wire.STAMP, "pool", "h", 1, "running", [wire.WorkerReport(wid, 1, False, 0.0, 1, 10.0)], [wire.Lost(wid, reason, task)])
    s.handle(b"pool:pool", report, now)


def test_no_more_is_sent_than_the_credit_granted():
    s, stub, table = make()
    submit(s, table, 10)
    ready(s, "a", granted=3)
    s.dispatch(0.0)
    assert len(stub.tasks_to("a")) == 3 and len(s.queue) == 7
    keys = [t.key for t in stub.tasks_to("a")]
    results(s, "a", keys, granted=6, received=3)  # results carry fresh credit
    s.dispatch(0.1)
    assert len(stub.tasks_to("a")) == 6 and s.table.counts["resolved"] == 3


def test_work_is_shared_and_the_least_loaded_goes_first():
    s, stub, table = make()
    ready(s, "a", granted=100)
    submit(s, table, 4)
    s.dispatch(0.0)
    stub.take()
    ready(s, "b", granted=100)
    submit(s, table, 4, start=100)
    s.dispatch(0.1)
    sent = stub.take()
    assert [peer for peer, _ in sent] == [b"b", b"a"]  # b holds nothing, so it goes first
    assert [len(m.tasks) for _, m in sent] == [2, 2]  # the queue is shared out evenly


def test_a_result_resolves_once_and_a_late_duplicate_is_counted():
    s, stub, table = make()
    [fut] = submit(s, table, 1)
    ready(s, "a", granted=5)
    s.dispatch(0.0)
    key = stub.tasks_to("a")[0].key
    results(s, "a", [key], granted=5, received=1)
    results(s, "a", [key], granted=5, received=1)
    assert fut.result(timeout=0).ok and s.stats["duplicate_results"] == 1


def test_a_timeout_fails_only_the_running_task_and_its_neighbours_go_free():
    s, stub, table = make()
    futs = submit(s, table, 5)
    ready(s, "a", granted=5)
    s.dispatch(0.0)
    running = stub.tasks_to("a")[0].key
    lost(s, "a", wire.Fault(ErrorKind.TIMEOUT, "reward ran past its 2 s hard limit"), running)
    assert futs[0].result(timeout=0).error == "timeout: reward ran past its 2 s hard limit (worker a was killed and respawned)"
    assert all(not f.done() for f in futs[1:]) and len(s.queue) == 4
    assert all(p.attempts == 0 for p in s.queue)  # they never ran: not charged
    ready(s, "a2", granted=10)
    s.dispatch(0.1)
    results(s, "a2", [t.key for t in stub.tasks_to("a2")], granted=10, received=4)
    assert all(f.result(timeout=0).ok and f.result().attempts == 1 for f in futs[1:])


def test_a_crashing_task_is_charged_and_fails_after_max_attempts():
    s, stub, table = make(max_attempts=2)
    [poison, innocent] = submit(s, table, 2)
    for gen in range(2):
        wid = f"w.{gen}"
        ready(s, wid, granted=2)
        s.dispatch(float(gen))
        sent = [t.key for t in stub.tasks_to(wid)]
        lost(s, wid, wire.Fault(ErrorKind.WORKER_LOST, "crashed: exit code -11"), sent[0] if sent[0] == (0).to_bytes(16, "big") else sent[1])
    r = poison.result(timeout=0)
    assert r.error_kind == "worker_lost" and "attempt 2 of 2" in r.error and "which was lost (crashed: exit code -11)" in r.error
    assert not innocent.done()  # lost twice with the poison task, charged nothing


def test_a_task_that_only_ever_sees_its_worker_die_stops_after_the_delivery_cap():
    s, stub, table = make(max_attempts=2)
    [fut] = submit(s, table, 1)
    for gen in range(MAX_DELIVERIES_FACTOR * 2):
        wid = f"w.{gen}"
        ready(s, wid, granted=1)
        s.dispatch(float(gen))
        lost(s, wid, wire.Fault(ErrorKind.WORKER_LOST, "crashed: exit code -9"), None)  # the pool saw nothing running: no one to blame
    r = fut.result(timeout=0)
    assert r.error_kind == "worker_lost" and f"delivered {MAX_DELIVERIES_FACTOR * 2} times" in r.error


def test_a_silent_worker_loses_its_leases_after_the_heartbeat_timeout():
    s, stub, table = make()
    futs = submit(s, table, 3)
    ready(s, "a", granted=3, now=0.0)
    s.dispatch(0.0)
    s.housekeeping(HB - 0.5)
    assert "a" in s.fleet.workers
    s.housekeeping(HB + 0.5)
    assert "a" not in s.fleet.workers and len(s.queue) == 3 and s.stats["redelivered"] == 3
    assert all(p.attempts == 0 for p in s.queue)
    assert not any(f.done() for f in futs)


def test_a_pool_report_keeps_a_busy_workers_lease():
    s, stub, table = make()
    submit(s, table, 1)
    ready(s, "a", granted=1, now=0.0)
    s.dispatch(0.0)
    report = wire.PoolReport(*wire.STAMP, "pool", "h", 1, "running", [wire.WorkerReport("a", 1, True, 2.0, 0, 10.0)], [])
    s.handle(b"pool:pool", report, HB)
    s.housekeeping(HB + 1.0)
    assert "a" in s.fleet.workers


def test_given_back_tasks_go_to_the_front_uncharged():
    s, stub, table = make()
    submit(s, table, 4)
    ready(s, "a", granted=4)
    s.dispatch(0.0)
    keys = [t.key for t in stub.tasks_to("a")]
    s.handle(b"a", wire.Giveback(4, 4, keys[2:]), 0.1)
    assert [p.key for p in s.queue] == keys[2:] and all(p.attempts == 0 for p in s.queue)


def test_an_idle_worker_makes_loaded_ones_give_back_unstarted_tasks():
    s, stub, table = make()
    submit(s, table, 9)
    ready(s, "a", granted=9)
    s.dispatch(0.0)
    ready(s, "b", granted=5)
    stub.take()
    s.dispatch(0.1)
    [(peer, msg)] = stub.take()
    assert peer == b"a" and msg == wire.Revoke(4)  # half of what it holds beyond the running task


def test_bye_redelivers_what_the_worker_held():
    s, stub, table = make()
    submit(s, table, 2)
    ready(s, "a", granted=2)
    s.dispatch(0.0)
    s.handle(b"a", wire.Bye("draining"), 0.1)
    assert len(s.queue) == 2 and "a" not in s.fleet.workers


def test_a_worker_that_leaves_on_its_own_is_news_in_one_line_not_a_loss(caplog):
    s, stub, table = make()
    submit(s, table, 2)
    ready(s, "a", granted=2)
    ready(s, "b", granted=0)
    s.dispatch(0.0)
    with caplog.at_level("INFO", logger="qworker"):
        caplog.clear()
        s.handle(b"a", wire.Bye("draining"), 0.1)
        s.handle(b"b", wire.Bye("draining"), 0.1)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [("INFO", "qworker: worker a left (draining); redelivering the 2 task(s) it held"),
                     ("INFO", "qworker: worker b left (draining)")]


def test_a_rogue_peer_that_swallows_tasks_is_quarantined_and_costs_no_attempts():
    # A peer says READY with 512 credits, then only heartbeats: it never runs what it is sent.
    s, stub, table = make(max_attempts=3)
    futs = submit(s, table, 50)
    ready(s, "rogue", granted=512, now=0.0)
    s.dispatch(0.0)
    t = 0.0
    for _ in range(6):  # it keeps saying "idle, received 0" for many heartbeat timeouts
        t += HB + 0.5
        ready(s, "rogue", granted=512, received=0, finished=0, now=t)
        s.dispatch(t)
    w = s.fleet.workers["rogue"]
    assert w.quarantined and w.vanished == 2 and not w.leases
    ready(s, "good", granted=100, now=t)
    s.dispatch(t)
    sent = [t.key for t in stub.tasks_to("good")]
    results(s, "good", sent, granted=100, received=len(sent), now=t)
    assert all(f.result(timeout=0).ok for f in futs)
    assert max(f.result().attempts for f in futs) == 1


def test_a_quarantined_peers_credit_neither_asks_workers_to_give_back_nor_admits_work():
    s, stub, table = make(max_attempts=3)
    submit(s, table, 50)
    ready(s, "rogue", granted=512, now=0.0)
    s.dispatch(0.0)
    t = 0.0
    for _ in range(6):
        t += HB + 0.5
        ready(s, "rogue", granted=512, received=0, finished=0, now=t)
        s.dispatch(t)
    assert s.fleet.workers["rogue"].quarantined
    ready(s, "good", granted=100, now=t)
    s.dispatch(t)
    stub.take()
    for _ in range(5):  # the rogue keeps its credit and holds nothing: it is no idle worker to give work to
        t += 0.06
        s.dispatch(t)
    assert not [m for _, m in stub.take() if isinstance(m, wire.Revoke)]


def test_an_unreachable_worker_is_lost_and_its_batch_redelivered():
    s, stub, table = make()
    submit(s, table, 3)
    ready(s, "a", granted=3)
    stub.gone.add(b"a")
    s.dispatch(0.0)
    assert "a" not in s.fleet.workers and len(s.queue) == 3
    assert all(p.attempts == 0 and p.deliveries == 0 for p in s.queue)


@pytest.mark.parametrize("bad", [wire.Ready(*wire.STAMP, "other", "p", 1, "h", 5, 0, 0, [], []), wire.Revoke(3)])
def test_messages_a_producer_does_not_accept_are_dropped_and_counted(bad):
    s, stub, table = make()
    s.handle(b"peer", bad, 0.0)
    assert s.stats["dropped_frames"] == 1 and not s.fleet.workers


def test_a_stranger_claiming_to_be_busy_loses_its_leases_after_their_hard_limit():
    # No pool vouches for it; it acknowledges its tasks (received = sent) and says it is running them.
    s, stub, table = make()
    s.task_timeout_s = 2.0
    futs = submit(s, table, 20)
    ready(s, "stranger", granted=10, now=0.0)
    s.dispatch(0.0)
    t, received = 0.0, 10
    while t < 30:
        t += 1.0
        w = s.fleet.workers["stranger"]
        received = w.sent
        ready(s, "stranger", granted=received + 10, received=received, finished=0, now=t)  # "busy", and offers more
        s.housekeeping(t)
        s.dispatch(t)
    w = s.fleet.workers["stranger"]
    assert w.quarantined and w.vanished == 2 and not w.leases  # its second stall: nothing more is sent to it
    assert len(s.queue) == 20 and all(p.attempts == 0 for p in s.queue) and not any(f.done() for f in futs)


def test_a_worker_its_pool_vouches_for_may_run_long():
    s, stub, table = make()
    s.task_timeout_s = 2.0
    submit(s, table, 1)
    ready(s, "w", granted=1, now=0.0)
    s.dispatch(0.0)
    for t in range(1, 30):
        report = wire.PoolReport(*wire.STAMP, "pool", "h", 1, "running", [wire.WorkerReport("w", 1, True, float(t), 0, 10.0)], [])
        s.handle(b"pool:pool", report, float(t))
        s.housekeeping(float(t))
    assert len(s.fleet.workers["w"].leases) == 1  # the pool's watchdog enforces its hard limit, not the producer


def quarantine_rogue(s: Scheduler) -> float:
    """Make "rogue" swallow its tasks twice (it is quarantined); returns the time."""
    ready(s, "rogue", granted=512, now=0.0)
    s.dispatch(0.0)
    t = 0.0
    for _ in range(6):
        t += HB + 0.5
        ready(s, "rogue", granted=512, received=0, finished=0, now=t)
        s.dispatch(t)
    assert s.fleet.workers["rogue"].quarantined
    return t


def test_quarantine_sticks_when_the_peer_says_bye_then_ready_again():
    s, stub, table = make()
    submit(s, table, 20)
    t = quarantine_rogue(s)
    s.handle(b"rogue", wire.Bye("draining"), t)
    assert "rogue" not in s.fleet.workers
    stub.take()
    ready(s, "rogue", granted=512, received=0, finished=0, now=t + 0.1)  # a fresh hello under the same identity
    s.dispatch(t + 0.1)
    assert s.fleet.workers["rogue"].quarantined and not stub.tasks_to("rogue")
    s.housekeeping(t + 10 * HB)  # lost for silence, then back again: still quarantined
    assert "rogue" not in s.fleet.workers
    ready(s, "rogue", granted=512, now=t + 10 * HB + 1)
    s.dispatch(t + 10 * HB + 1)
    assert s.fleet.workers["rogue"].quarantined and not stub.tasks_to("rogue") and len(s.queue) == 20


def test_results_from_a_quarantined_peer_resolve_nothing_and_are_counted():
    s, stub, table = make()
    futs = submit(s, table, 20)
    t = quarantine_rogue(s)
    swallowed = sorted({t.key for t in stub.tasks_to("rogue")})
    s.handle(b"rogue", wire.Results(512, 20, [wire.TaskResult(k, 0.0, {"forged": True}, None, 0.0, None, None) for k in swallowed]), t)
    assert not any(f.done() for f in futs) and s.stats["dropped_results"] == 20 and s.stats["dropped_frames"] == 1
    ready(s, "good", granted=100, now=t)
    s.dispatch(t)
    sent = [t.key for t in stub.tasks_to("good")]
    results(s, "good", sent, granted=100, received=len(sent), now=t)
    assert all(f.result(timeout=0).score == 1.0 and not f.result().extra for f in futs)


def test_results_from_an_unknown_peer_resolve_nothing_and_are_counted():
    s, stub, table = make()
    futs = submit(s, table, 3)
    ready(s, "a", granted=3)
    s.dispatch(0.0)
    keys = [t.key for t in stub.tasks_to("a")]
    s.handle(b"stranger", wire.Results(0, 0, [wire.TaskResult(k, 0.0, None, None, 0.0, None, None) for k in keys]), 0.1)
    assert not any(f.done() for f in futs) and s.stats["dropped_results"] == 3 and s.stats["dropped_frames"] == 1
    results(s, "a", keys, granted=3, received=3, now=0.2)
    assert all(f.result(timeout=0).score == 1.0 for f in futs)


def test_task_batches_are_cut_by_bytes_counting_params_and_an_oversized_task_fails_alone():
    s, stub, table = make()  # 1 MiB frames
    params = {"reference": "r" * 20_000}  # one dict shared by the batch, as submit_batch does
    entries = [(i.to_bytes(16, "big"), b"p" * 30_000) for i in range(100)]
    entries[50] = (entries[50][0], b"p" * (2 << 20))  # alone it is over the frame limit
    with table.registering(entries, reward="noop", params=params, timeout_s=None, policy=None, now=0.0, hand_on=s.add) as reg:
        reg.hand_on(reg.new)
    futs = reg.futures
    ready(s, "a", granted=500)
    for i in range(200):
        s.dispatch(i / 100)
    batches = [m for _, m in stub.take() if isinstance(m, wire.Tasks)]
    assert len(batches) > 1 and sum(len(b.tasks) for b in batches) == 99
    assert all(len(wire.encode(b)[1]) <= (1 << 20) // 2 + 64 for b in batches)  # well under the frame limit
    bad = futs[50].result(timeout=0)
    assert bad.error_kind == "bad_payload" and f"{1 << 20}-byte message limit" in bad.error and bad.attempts == 0
    assert not any(f.done() for i, f in enumerate(futs) if i != 50)


def test_a_lost_workers_innocent_tasks_are_refunded_and_requeued_and_it_holds_no_lease():
    from qworker.engine.task import QUEUED

    s, stub, table = make(max_attempts=3)
    submit(s, table, 4)
    ready(s, "a", granted=4)
    s.dispatch(0.0)
    w = s.fleet.workers["a"]
    held = list(w.leases.values())
    guilty = held[0]
    lost(s, "a", wire.Fault(ErrorKind.WORKER_LOST, "crashed: exit code -11"), guilty.key)
    assert not w.leases and list(s.queue) == held  # requeued in their order, at the front
    assert all(p.state is QUEUED and p.holder is None for p in held)
    assert (guilty.attempts, guilty.deliveries) == (1, 1)  # the task it was running is charged
    assert all((p.attempts, p.deliveries) == (0, 1) for p in held[1:])  # the others never ran: refunded
    ready(s, "b", granted=4)
    s.dispatch(0.1)
    assert set(s.fleet.workers["b"].leases.values()) == set(held) and all(p.holder is s.fleet.workers["b"] for p in held)


def test_tasks_sent_to_an_unreachable_worker_are_neither_charged_nor_counted_nor_held():
    from qworker.engine.task import QUEUED

    s, stub, table = make()
    submit(s, table, 3)
    ready(s, "a", granted=3)
    stub.gone.add(b"a")
    s.dispatch(0.0)
    assert "a" not in s.fleet.workers and len(s.queue) == 3
    assert all(p.state is QUEUED and p.holder is None and (p.attempts, p.deliveries) == (0, 0) for p in s.queue)


def test_a_task_resolved_while_leased_is_in_no_lease_index():
    s, stub, table = make()
    futs = submit(s, table, 3)
    ready(s, "a", granted=3)
    s.dispatch(0.0)
    w = s.fleet.workers["a"]
    held = list(w.leases.values())
    assert len(held) == 3
    table.close("the producer closed")  # resolves them as cancelled while a worker holds them
    assert all(f.result(timeout=0).error_kind == "cancelled" for f in futs)
    assert not w.leases and all(p.resolved and p.holder is None for p in held)
    assert s.in_flight() == 0  # status no longer counts them in flight



def test_a_hook_that_raises_while_a_message_is_assembled_leaves_the_taken_tasks_queued(monkeypatch):
    s, stub, table = make()
    futs = submit(s, table, 10)
    table.resolve([(s.queue[0], 1.0, {}, None, "late", 0.0)])  # resolved while queued: dropped at dispatch, through _forget

    def forget_that_raises(p):  # as an admission policy's forget() hook might
        raise RuntimeError("the hook broke")

    monkeypatch.setattr(s, "_forget", forget_that_raises)
    ready(s, "a", granted=10)
    with pytest.raises(RuntimeError):
        s.dispatch(0.0)
    assert len(s.queue) == 9 and not stub.tasks_to("a")  # none of what the message had taken is in no queue
    monkeypatch.undo()
    s.dispatch(0.1)
    assert len(stub.tasks_to("a")) == 9 and sum(not f.done() for f in futs) == 9


def test_a_pool_of_workers_under_the_producers_frame_limit_is_warned_of_once(caplog):
    s, stub, table = make()  # the producer's frame limit: 1 MiB
    with caplog.at_level("INFO", logger="qworker"):
        caplog.clear()
        for k in range(4):  # four workers of one narrow pool, then one of another
            s.handle(f"n{k}".encode(), wire.Ready(*wire.STAMP, f"n{k}", "narrow", k, "h", 1, 0, 0, [], [], {}, 1 << 16), 0.0)
        s.handle(b"m", wire.Ready(*wire.STAMP, "m", "other", 9, "h", 1, 0, 0, [], [], {}, 1 << 16), 0.0)
        for lone in ("x", "y"):  # workers of no pool: each its own
            s.handle(lone.encode(), wire.Ready(*wire.STAMP, lone, "", 7, "h", 1, 0, 0, [], [], {}, 1 << 16), 0.0)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 4 and "worker n0 ready (pool narrow" in warned[0] and "worker m ready (pool other" in warned[1]
    assert sum("frame limit 65536 bytes" in r.getMessage() for r in caplog.records if r.levelname == "INFO") == 3


def test_a_hook_that_raises_while_a_message_is_assembled_still_forgets_the_resolved_tasks_it_had_not_reached(monkeypatch):
    s, stub, table = make()
    submit(s, table, 10)
    late = list(s.queue)[5]
    table.resolve([(late, 1.0, {}, None, "late", 0.0)])  # resolved while queued, behind the task whose hook raises
    forgotten = []
    real_forget = s._forget
    monkeypatch.setattr(s, "_forget", lambda p: (forgotten.append(p), real_forget(p)))
    calls = []

    def spent_hook_that_raises(p):  # as a policy's on_result hook might, while a spent task fails
        calls.append(p)
        if len(calls) == 2:
            raise RuntimeError("the hook broke")
        return False

    monkeypatch.setattr(s, "_spent", {b"x"})  # a late report is on record: every task is checked
    monkeypatch.setattr(s, "_fail_if_spent", spent_hook_that_raises)
    ready(s, "a", granted=10)
    with pytest.raises(RuntimeError):
        s.dispatch(0.0)
    assert forgotten == [late] and len(s.queue) == 9  # the resolved one left every index; the others wait
