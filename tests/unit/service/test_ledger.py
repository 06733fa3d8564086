"""The reward service's ledger: results kept until acknowledged, resent, bounded in bytes and age (no sockets)."""

from __future__ import annotations

from qworker import Result
from qworker.service.ledger import FLUSH_EVERY, MAX_RESEND_EVERY_S, Ledger
from qworker.transport import client_wire as cw

A, B = b"client-a", b"client-b"


def rows(request: int, n: int, start: int = 0) -> list[cw.Group]:
    """One group: ``n`` results of ``request``, from position ``start``."""
    return [(request, list(range(start, start + n)), [Result(score=1.0, attempts=1, worker="w") for _ in range(n)])]


def seq_of(frames: list[bytes]) -> int:
    msg = cw.CLIENT.decode(frames[0], frames[1], max_bytes=1 << 30)
    assert isinstance(msg, cw.Resolved)
    return msg.seq


def test_results_are_kept_until_acknowledged_and_a_request_is_held_until_all_are():
    led = Ledger(instance="i")
    led.taken(A, 1, 3)
    out = led.add(A, rows(1, 2), now=0.0)
    assert [seq_of(f) for f in out] == [1] and len(led) == 1 and led.holds(A, 1)
    led.ack(A, [1])
    assert len(led) == 0 and led.holds(A, 1)  # one result still owed
    out = led.add(A, rows(1, 1, start=2), now=0.0)
    led.ack(A, [seq_of(out[0])])
    assert not led.holds(A, 1) and led.bytes == 0
    led.ack(A, [1, 2, 99])  # repeated and unknown acks change nothing
    assert led.counts["acked"] == 2


def test_unacknowledged_messages_are_resent_with_backoff_and_at_once_when_the_client_speaks():
    led = Ledger(instance="i", resend_after_s=1.0)
    led.taken(A, 1, 10)
    [frames] = led.add(A, rows(1, 10), now=0.0)
    assert led.due(0.5) == []
    assert led.due(1.0) == [(A, frames)]  # resent after 1 s ...
    assert led.due(2.5) == [] and led.due(3.0) == [(A, frames)]  # ... then 2 s later, doubling
    t = 3.0
    for _ in range(10):
        t += MAX_RESEND_EVERY_S
        assert led.due(t) == [(A, frames)]  # never waits longer than the cap
    assert led.poke(A, t + 0.1) == []  # just sent
    assert led.poke(A, t + 1.0) == [frames]  # the client spoke: resend now, not at the next backoff
    assert led.counts["resent"] == 13


def test_big_batches_are_split_and_rows_of_requests_not_held_are_dropped():
    led = Ledger(instance="i")
    led.taken(A, 1, FLUSH_EVERY + 5)
    out = led.add(A, rows(1, FLUSH_EVERY + 5) + rows(7, 3), now=0.0)
    assert len(out) == 2 and led.counts["dropped_rows"] == 3
    led.ack(A, [seq_of(f) for f in out])
    assert not led.holds(A, 1)


def test_unknown_names_the_requests_a_client_waits_on_that_are_not_held():
    led = Ledger(instance="i")
    led.taken(A, 1, 1)
    led.taken(A, 2, 1)
    assert led.unknown(A, [1, 2, 3]) == [3]
    assert led.unknown(B, [1]) == [1]


def test_the_byte_bound_evicts_the_oldest_and_its_requests_become_unknown():
    one = len(cw.encode_resolved("i", 1, rows(1, 10))[1])
    led = Ledger(instance="i", max_bytes=int(2.5 * one))
    for r in (1, 2, 3):
        led.taken(A if r != 2 else B, r, 10)
    led.add(A, rows(1, 10), now=0.0)
    led.add(B, rows(2, 10), now=1.0)
    assert led.evict(1.0) == 0
    led.add(A, rows(3, 10), now=2.0)
    assert led.evict(2.0) == 1 and led.bytes <= led.max_bytes
    assert led.unknown(A, [1, 3]) == [1] and led.holds(B, 2)
    assert led.counts["evicted"] == 1


def test_the_age_bound_evicts_and_silent_clients_are_forgotten():
    led = Ledger(instance="i", max_age_s=300.0)
    led.heard(A, 0.0)
    led.taken(A, 1, 1)
    led.add(A, rows(1, 1), now=0.0)
    assert led.evict(299.0) == 0 and led.clients == 1
    assert led.evict(301.0) == 1 and led.unknown(A, [1]) == [1]
    assert led.evict(302.0) == 0 and led.clients == 0  # nothing owed, silent past the age bound
    snap = led.snapshot()
    assert snap["unacked"] == 0 and snap["unacked_bytes"] == 0 and snap["evicted"] == 1 and snap["sent"] == 1


def test_groups_kept_as_tuples_reach_the_client_as_the_resolved_requests_it_decodes():
    """The service keeps each request's results as a ``(request, indexes, results)`` tuple: its message is byte for
    byte the ``Resolved`` of ``ResolvedRequest``\\s the client's decoder takes."""
    led = Ledger(instance="i")
    led.taken(A, 3, 2)
    led.taken(A, 4, 1)
    got = [(3, [1, 0], [Result(score=0.5, extra={"p": 1}, attempts=1, worker="w", key="ab"), Result(score=0.0, error="timeout: x", worker="w")]),
           (4, [0], [Result(score=1.0)])]
    [frames] = led.add(A, got, now=0.0)
    expected = cw.Resolved("i", 1, [cw.ResolvedRequest(request, indexes, results) for request, indexes, results in got])
    assert frames == cw.encode(expected)
    assert cw.CLIENT.decode(*frames, max_bytes=1 << 20) == expected


def test_a_group_larger_than_a_message_is_split_in_order_and_each_message_counts_its_own_results():
    led = Ledger(instance="i")
    led.taken(A, 1, FLUSH_EVERY + 10)
    led.taken(A, 2, 5)
    out = led.add(A, rows(2, 5) + rows(1, FLUSH_EVERY + 10), now=0.0)
    got = [cw.CLIENT.decode(*frames, max_bytes=1 << 30) for frames in out]
    assert [[(g.request, len(g.indexes), len(g.results)) for g in m.requests] for m in got] == [  # type: ignore[union-attr]
        [(2, 5, 5), (1, FLUSH_EVERY - 5, FLUSH_EVERY - 5)], [(1, 15, 15)]]
    assert [i for m in got for g in m.requests if g.request == 1 for i in g.indexes] == list(range(FLUSH_EVERY + 10))  # type: ignore[union-attr]
    led.ack(A, [got[0].seq])  # type: ignore[union-attr]
    assert led.holds(A, 1) and not led.holds(A, 2)  # the first message carried all of request 2, part of request 1
    led.ack(A, [got[1].seq])  # type: ignore[union-attr]
    assert not led.holds(A, 1)


def test_results_too_big_for_one_message_go_in_several_each_under_the_bound_in_order(monkeypatch):
    import qworker.service.ledger as ledger_module

    monkeypatch.setattr(ledger_module, "RESOLVED_MAX_BYTES", 20_000)
    led = Ledger(instance="i")
    led.taken(A, 1, 30)
    led.taken(A, 2, 30)
    big = [(r, list(range(30)), [Result(score=float(i), extra={"blob": "x" * 2000}) for i in range(30)]) for r in (1, 2)]
    out = led.add(A, big, now=0.0)  # 60 results of ~2 kB: one message would be ~120 kB
    msgs = [cw.CLIENT.decode(f[0], f[1], max_bytes=1 << 30) for f in out]
    assert len(msgs) > 1 and all(len(f[1]) <= 20_000 for f in out), [len(f[1]) for f in out]
    assert [m.seq for m in msgs] == list(range(1, len(msgs) + 1))  # numbered in order, none skipped
    got = [(g.request, i, r.score) for m in msgs for g in m.requests for i, r in zip(g.indexes, g.results, strict=True)]
    assert got == [(r, i, float(i)) for r in (1, 2) for i in range(30)]  # every result once, in order
    led.ack(A, [m.seq for m in msgs])
    assert not led.holds(A, 1) and not led.holds(A, 2) and led.bytes == 0
