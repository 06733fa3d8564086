"""``FutureTable``: a Client's futures resolve once, whichever thread gets there first."""

from __future__ import annotations

import threading

import pytest

from qworker import ProducerClosed
from qworker.engine.futures import FutureTable
from qworker.engine.result import Result


def test_the_first_result_of_a_future_wins_and_a_resolved_batch_leaves_the_table():
    t = FutureTable(fallback_score=-1.0)
    batch = t.register(3)
    futures = t.hand_out(batch)
    assert len(t) == 3
    assert t.resolve(batch, [0, 1], [Result(score=1.0), Result(score=2.0)]) == 2
    assert t.resolve(batch, [0], [Result(score=9.0)]) == 0  # a resend: changes nothing
    assert t.fail(batch, [0, 1, 2], "service_lost: gone") == 1  # only the one still pending
    assert [f.result().score for f in futures] == [1.0, 2.0, -1.0]
    assert futures[2].result().error_kind == "service_lost"
    assert len(t) == 0 and not t._live


def test_close_cancels_what_was_handed_out_and_refuses_what_was_not():
    t = FutureTable(fallback_score=0.0)
    out = t.register(4)
    futures = t.hand_out(out)
    t.resolve(out, [0], [Result(score=1.0)])
    held = t.register(1_000)  # registered, its submission still waiting: nobody holds its futures yet
    t.close("the client closed")
    assert futures[0].result().ok
    assert all(f.result().error_kind == "cancelled" and "the client closed" in f.result().error for f in futures[1:])
    with pytest.raises(ProducerClosed):
        t.hand_out(held)
    with pytest.raises(ProducerClosed):
        t.register(1)
    assert len(t) == 0


def test_a_large_registration_racing_close_stops_and_raises():
    t = FutureTable(fallback_score=0.0)
    started = threading.Event()
    out: dict = {}

    def register() -> None:
        started.set()
        try:
            out["batch"] = t.register(2_000_000)
        except ProducerClosed as exc:
            out["error"] = exc

    th = threading.Thread(target=register, daemon=True)
    th.start()
    assert started.wait(10)
    t.close("closed while registering")
    th.join(30)
    assert not th.is_alive()
    # 2M futures take seconds to make; close() came within moments of the start, so the registration saw it
    # part-way and stopped (a registration that ran to the end would leave "batch" here instead)
    assert "error" in out and "closed while registering" in str(out["error"]), out.keys()
    assert len(t) == 0
