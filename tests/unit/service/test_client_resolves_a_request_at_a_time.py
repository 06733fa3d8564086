"""A Client resolves each request's results from a ``Resolved`` a request at a time: a group names its request, the
positions in it and their results; a group it cannot place (a request answered before, a position the request does
not have, arrays of two lengths) is dropped whole and the other groups of the message still resolve.  No socket."""

from __future__ import annotations

import time

from qworker._recent import RecentKeys
from qworker.engine.futures import FutureTable
from qworker.engine.result import Result
from qworker.service import client as cl
from qworker.transport import client_wire as cw


def _client(sizes: dict[int, int]) -> tuple[cl.Client, dict[int, list]]:
    c = cl.Client.__new__(cl.Client)
    c._table = FutureTable(fallback_score=0.0)
    c._requests = {}
    c._instance, c._refusals_logged, c._known = "svc", set(), RecentKeys(cl.KNOWN_TARGETS)
    futures = {}
    for number, n in sizes.items():
        batch = c._table.register(n)
        futures[number] = c._table.hand_out(batch)
        # the request's payloads are positions 1.. of its batch (position 0 was refused at the client)
        c._requests[number] = cl._Request(number, "noop", None, [], None, batch, list(range(1, n)), time.monotonic() - 1.0)
    return c, futures


def test_each_group_resolves_the_futures_at_its_positions_and_sets_the_latency_the_caller_saw():
    c, futures = _client({1: 4, 2: 3})
    c._resolve([cw.ResolvedRequest(1, [2, 0], [Result(score=3.0), Result(score=1.0)]),
                cw.ResolvedRequest(2, [1, 0], [Result(score=5.0), Result(score=4.0)])])
    assert [f.result(0).score if f.done() else None for f in futures[1]] == [None, 1.0, None, 3.0]
    assert [f.result(0).score if f.done() else None for f in futures[2]] == [None, 4.0, 5.0]
    assert all(f.result(0).latency_s >= 1.0 for fs in futures.values() for f in fs if f.done())
    assert 1 in c._requests and 2 not in c._requests  # request 2 is answered in full: forgotten; request 1 is not
    assert c._requests[1].left == 1


def test_a_group_that_cannot_be_placed_is_dropped_whole_and_the_others_resolve():
    c, futures = _client({1: 3, 2: 3, 3: 3})
    c._resolve([cw.ResolvedRequest(1, [0, 5], [Result(score=1.0), Result(score=2.0)]),  # position 5: request 1 has two
                cw.ResolvedRequest(2, [0, 1], [Result(score=1.0)]),  # two positions, one result
                cw.ResolvedRequest(9, [0], [Result(score=1.0)]),  # a request answered before (or never made)
                cw.ResolvedRequest(3, [1], [Result(score=7.0)])])
    assert not any(f.done() for f in futures[1][1:]) and not any(f.done() for f in futures[2][1:])
    assert futures[3][2].result(0).score == 7.0 and c._requests[3].left == 1
