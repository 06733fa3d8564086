"""Each TASKS message fits the frame limit its worker states in ``Ready`` (libzmq drops a larger one unread, with the
link): a batch is cut to it, a task too big for one worker goes to another it fits, and one that fits no worker
heard from within the heartbeat timeout fails as ``bad_payload`` naming its size and the limit (the limits of a fleet
starting are known a heartbeat timeout after its first Ready).  On a stub transport, no sockets."""

from __future__ import annotations

from qworker.cache.results import ResultCache
from qworker.engine.pending import PendingTable
from qworker.engine.scheduler import MESSAGE_OVERHEAD, TASK_OVERHEAD, Scheduler
from qworker.testing import StubTransport
from qworker.transport import wire
from qworker.transport.sockets import CURVE_FRAME_BYTES

MiB = 1 << 20
LOW = 65_536
HB = 3.0  # the heartbeat timeout, s: a fleet's limits are known this long after its first Ready


def make(framing_bytes: int = 0) -> tuple[Scheduler, StubTransport, PendingTable]:
    stub = StubTransport()
    table = PendingTable(cache=ResultCache(max_entries=1000, ttl_s=None, path=None), fallback_score=0.0)
    s = Scheduler(send=stub, table=table, max_attempts=3, heartbeat_timeout_s=HB, max_message_bytes=MiB, framing_bytes=framing_bytes)
    return s, stub, table


def submit(s: Scheduler, table: PendingTable, sizes: list[int]) -> list:
    entries = [(i.to_bytes(16, "big"), b"p" * n) for i, n in enumerate(sizes)]
    with table.registering(entries, reward="noop", params={}, timeout_s=None, policy=None, now=0.0, hand_on=s.add) as reg:
        reg.hand_on(reg.new)
    return reg.futures


def ready(s: Scheduler, wid: str, limit: int, granted: int = 500, now: float = 0.0) -> None:
    s.handle(wid.encode(), wire.Ready(*wire.STAMP, wid, "pool-" + wid, 1, "h", granted, 0, 0, [], [], {}, limit), now)


def messages(stub: StubTransport, wid: str) -> list[bytes]:
    """The bodies of the TASKS messages sent to ``wid``, as the socket sends them."""
    return [wire.encode(m)[1] for peer, m in stub.sent if peer == wid.encode() and isinstance(m, wire.Tasks)]


def test_a_batch_over_a_workers_stated_limit_goes_in_messages_under_it():
    s, stub, table = make()
    futs = submit(s, table, [20_000] * 100)  # 2 MB: over the producer's limit too, and 30 times the worker's
    ready(s, "a", LOW)
    for i in range(200):
        s.dispatch(i / 100)
    bodies = messages(stub, "a")
    assert sum(len(wire.decode(wire.TASKS, b, max_bytes=LOW).tasks) for b in bodies) == 100
    assert len(bodies) > 1 and all(len(b) <= LOW // 2 + MESSAGE_OVERHEAD for b in bodies)
    assert not any(f.done() for f in futs)


def test_every_tasks_message_states_the_producers_limit():
    s, stub, table = make()
    submit(s, table, [10] * 3)
    ready(s, "a", LOW)
    s.dispatch(0.0)
    assert [m.max_message_bytes for _, m in stub.sent if isinstance(m, wire.Tasks)] == [MiB]


def test_a_task_over_one_workers_limit_goes_to_a_worker_it_fits_and_waits_for_it_apart_from_the_queue():
    s, stub, table = make()
    futs = submit(s, table, [200_000 if i % 2 else 100 for i in range(20)])
    ready(s, "narrow", LOW)
    ready(s, "wide", MiB, granted=0)  # no credit yet
    s.dispatch(0.0)
    assert [t.key[-1] for t in stub.tasks_to("narrow")] == list(range(0, 20, 2))  # it takes what it fits
    assert [p.key[-1] for p, _ in s.wide] == list(range(1, 20, 2)) and not s.queue  # the rest wait, in order, apart
    ready(s, "wide", MiB, granted=500)
    for i in range(10):  # two of them to a message (half the frame limit)
        s.dispatch(0.1 + i / 100)
    assert [t.key[-1] for t in stub.tasks_to("wide")] == list(range(1, 20, 2)) and not s.queue and not s.wide
    assert not any(f.done() for f in futs)


def test_a_task_over_every_workers_limit_fails_at_once_naming_its_size_and_the_largest_limit():
    s, stub, table = make()
    futs = submit(s, table, [100, 200_000, 100])
    for now in (0.0, HB + 1):  # the fleet started: its limits are known
        ready(s, "a", LOW, now=now)
        ready(s, "b", 2 * LOW, now=now)
    s.dispatch(HB + 1)
    bad = futs[1].result(timeout=0)
    assert bad.error_kind == "bad_payload" and bad.attempts == 0, bad.error
    assert f"{2 * LOW}-byte message limit of every worker heard from in the last 3 s" in bad.error, bad.error
    assert f"producer's is {MiB}" in bad.error and f"over the {2 * LOW - MESSAGE_OVERHEAD} bytes a task may be" in bad.error
    assert 200_000 < int(bad.error.split("the task is ")[1].split(" bytes")[0]) < 201_000
    assert sorted(t.key[-1] for peer in ("a", "b") for t in stub.tasks_to(peer)) == [0, 2] and not s.queue


def test_a_worker_that_states_no_limit_is_sent_up_to_the_producers():
    s, stub, table = make()
    futs = submit(s, table, [200_000, 2 * MiB])
    s.handle(b"old", wire.Ready(*wire.STAMP, "old", "pool", 1, "h", 10, 0, 0, [], []), 0.0)  # a Ready without the field
    s.dispatch(0.0)
    assert [t.key[-1] for t in stub.tasks_to("old")] == [0]
    bad = futs[1].result(timeout=0)
    assert bad.error_kind == "bad_payload" and f"the {MiB}-byte message limit (max_message_bytes)" in bad.error, bad.error


def test_curve_framing_is_counted_against_a_workers_limit():
    # a task whose message fits the worker's limit by less than CURVE's framing: sent without CURVE, failed with it
    size = LOW - MESSAGE_OVERHEAD - CURVE_FRAME_BYTES // 2
    for framing, sent in ((0, True), (CURVE_FRAME_BYTES, False)):
        s, stub, table = make(framing_bytes=framing)
        [fut] = submit(s, table, [size - TASK_OVERHEAD - len(wire.encode_body(["noop", {}]))])  # its size, as counted
        ready(s, "a", LOW)
        ready(s, "a", LOW, now=HB + 1)  # the fleet started: its limits are known
        s.dispatch(HB + 1)
        assert bool(stub.tasks_to("a")) is sent and fut.done() is not sent
