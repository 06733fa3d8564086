"""A short judge outage against the simulator (tests/judge/judgesim.py): back to speed in seconds, no task failed.

Issue 18 (7): against a judge of capacity 64 and 0.5 s latency refusing everything
for 2 s, each refusal of the outage lowered the level to recover to by one, and
throughput took about 4 minutes to come back (10 answers/s at 25-60 s after,
against 128 before); without Retry-After 9 tasks failed.
"""

from __future__ import annotations

import pytest

from . import judgesim
from .judgesim import Server

OUTAGE = (30.0, 32.0)


@pytest.mark.parametrize(
    ("reply", "retry_after"),
    [("429", "s"), ("429", None), ("503", "s"), ("503", None), ("connect", None), ("reset", None)],
)
def test_a_two_second_outage_is_recovered_from_within_ten_seconds(reply, retry_after):
    server = Server(capacity=64, latency=0.5, outage=OUTAGE, outage_reply=reply, retry_after=retry_after)
    t, (c,), _ = judgesim.run(server, 6000)
    assert not c.failed, c.failed[:5]
    before = judgesim.throughput(c.done_at, 20.0, 30.0)
    assert before >= 0.9 * 64 / 0.5
    recovery = judgesim.recovery_s(c.done_at, OUTAGE)
    assert recovery is not None and recovery <= 10.0, recovery
    assert judgesim.throughput(c.done_at, 42.0, 45.0) >= 0.9 * before


def test_the_limit_climbs_back_to_its_level_before_the_outage():
    server = Server(capacity=64, latency=0.5, outage=OUTAGE, outage_reply="429", retry_after="s")
    _, (c,), _ = judgesim.run(server, 6000)
    lim = c.gate.endpoints[0].limit
    before = [x for t, x in c.limits if t < OUTAGE[0]][-1]
    after = [x for t, x in c.limits if t < OUTAGE[1] + 8.0][-1]
    assert lim.outages >= 1
    assert after >= 0.95 * before, (before, after)


def test_overload_at_a_concurrency_cap_is_not_taken_for_an_outage():
    # refusals interleaved with answers (the capacity halving mid-run): the limit follows it down, no outage
    server = Server(capacity=64, latency=0.3, sigma=0.6)
    clients = judgesim.run_staggered(server, 20000, [0.0], until=10.0)
    server.capacity = 32
    judgesim.run_staggered(server, 0, [], until=25.0, sim=clients[0].sim)
    lim = clients[0].gate.endpoints[0].limit
    assert lim.outages == 0 and lim.limit <= 36
