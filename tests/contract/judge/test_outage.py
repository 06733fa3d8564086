"""A short judge outage against the simulator (tests/contract/judge/judgesim.py): back to speed in seconds, no task failed.

The guarantee: against a judge of capacity 64 and 0.5 s latency refusing everything
for 2 s, throughput is back within seconds and no task fails, with or without
Retry-After (an outage's refusals must not each lower the level to recover to).
"""

from __future__ import annotations

import pytest

from qworker.engine.task import Pending
from qworker.judge.control.gate import Gate
from qworker.judge.control.limiter import AdaptiveLimit
from tests.contract.judge import judgesim
from tests.contract.judge.judgesim import Server

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


# ---- the pieces, one at a time ----

def steady(lim: AdaptiveLimit, t: float, level: int = 64, n: int = 400) -> float:
    for _ in range(n):
        t += 0.005
        lim.on_success(0.5, level, t)
    return t


def test_after_an_outage_the_level_to_recover_to_is_the_one_before_it():
    lim = AdaptiveLimit(initial=64, ceiling=64)
    lim.slow_start = False
    lim.last_drop_level = 65.0
    t = steady(lim, 0.0)
    before = lim.limit
    for k in range(200):  # 2 s of refusals at every level, down to one in flight
        t += 0.01
        lim.on_drop(max(1, 64 - k), t, sent_at=t - 0.005)
    assert lim.limit == 1.0  # every refusal caps
    lim.on_drop(3, t + 0.6, sent_at=t - 0.5)  # sent before it ended, refused after: not evidence
    t += 1.0
    lim.on_success(0.5, 1, t)  # the first answer to a request sent after the outage
    assert lim.outages == 1 and lim.last_drop_level == 65.0
    lim.on_drop(2, t + 0.01, sent_at=t - 0.6)  # an echo of the outage arriving late: ignored
    assert lim.last_drop_level == 65.0
    trips = 0
    while lim.limit < before and trips < 20:  # x2 per round trip: every request in flight answered adds one
        trips += 1
        for _ in range(int(lim.limit)):
            t += 0.5 / max(1, int(lim.limit))
            lim.on_success(0.5, int(lim.limit), t)
    assert trips <= 8 and lim.limit >= before - 1


def test_an_endpoint_back_from_down_climbs_to_its_old_limit_at_twice_per_round_trip():
    lim = AdaptiveLimit(initial=8, ceiling=512)
    lim.limit = 100.0
    lim.reset()
    assert lim.limit == 8
    t = 0.0
    for _ in range(5):
        for _ in range(int(lim.limit)):
            t += 0.01
            lim.on_success(0.2, int(lim.limit), t)
    assert lim.limit >= 100


def task(i: int) -> Pending:
    return Pending(bytes([i]) * 16, "llm_judge", {}, b"x" * 40, None, None, 0.0)


def ok(status: int = 200, **kw) -> dict:
    return {"endpoint": 0, "status": status, "failure": "", "latency_s": 0.2, "retry_after_s": None, **kw}


def test_an_answer_to_a_request_sent_before_the_endpoint_went_down_does_not_bring_it_back():
    g = Gate({"model": "m", "endpoints": [{"url": "http://a"}]})
    g.queue.extend(task(i) for i in range(2))
    old, new = g.admit(0.0, 2)[0]
    g.settle(new, ok(0, failure="connect"), "refused", 0.1)
    assert g.endpoints[0].state(0.1).startswith("down")
    g.settle(old, ok(), None, 0.2)  # in service before the outage: old news
    assert g.endpoints[0].state(0.2).startswith("down")


def test_a_streak_of_refusals_without_retry_after_cools_the_endpoint_with_backoff():
    g = Gate({"model": "m", "endpoints": [{"url": "http://a"}]})
    e = g.endpoints[0]
    g.queue.extend(task(i) for i in range(10))
    sent, _ = g.admit(0.0, 10)
    for k, p in enumerate(sent):
        assert g.settle(p, ok(429), "HTTP 429", 0.01 + k * 0.001)
    assert e.cool_until == 0.0  # refusals of what was in flight: a capacity that dropped looks the same
    g.queue.append(task(30))
    later = g.admit(0.1, 10)[0]
    assert g.settle(later[0], ok(429), "HTTP 429", 0.11)  # sent a round trip after the streak began: refused too
    assert e.cool_until > 0.2 and e.cool_reason.endswith("refusals in a row")
    first = e.cool_until - 0.11
    g.queue.append(task(20))
    probe = g.admit(e.cool_until, 10)[0]
    assert len(probe) >= 1
    at = e.cool_until
    g.settle(probe[0], ok(429), "HTTP 429", at + 0.01)
    assert e.cool_until - (at + 0.01) > first  # doubled


def test_a_tasks_second_error_parks_its_retry_the_first_does_not():
    g = Gate({"model": "m", "endpoints": [{"url": "http://a"}]})
    g.queue.append(task(1))
    a = g.admit(0.0, 1)[0][0]
    assert g.settle(a, ok(503), "HTTP 503", 0.1)
    g.queue.appendleft(a)
    assert [p.key for p in g.admit(0.1, 1)[0]] == [a.key]  # a first error: at once
    assert g.settle(a, ok(503), "HTTP 503", 0.2)
    g.queue.appendleft(a)
    assert g.admit(0.3, 1)[0] == []  # the second: 0.25 s later
    assert [p.key for p in g.admit(0.5, 1)[0]] == [a.key]


def test_errors_of_an_endpoint_that_is_down_are_not_the_tasks():
    g = Gate({"model": "m", "endpoints": [{"url": "http://a"}], "max_attempts": 2})
    g.queue.append(task(1))
    p = g.admit(0.0, 1)[0][0]
    for k in range(6):  # refused connections, probe after probe: the endpoint's fault
        assert g.settle(p, ok(0, failure="connect"), "refused", 0.1 + k), k
        g.queue.appendleft(p)
        p = g.admit(g.next_wake(0.1 + k) or 0.0, 1)[0][0]
    assert g.calls[p].tries == 0


def test_an_endpoint_refusing_everything_for_good_fails_what_waits_in_bounded_time():
    server = Server(capacity=64, latency=0.5, outage=(0.0, 1e9), outage_reply="429", retry_after=None)
    t, (c,), _ = judgesim.run(server, 200, dead_after_s=3)
    assert len(c.failed) == 200 and t <= 60.0, t  # measured: 39 s (6 s with Retry-After: 1)
    assert sum("refused every request" in why for why in c.failed) >= 150
