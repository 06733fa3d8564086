"""The gate's decisions: routing, retries per status, cooldowns, failover."""

from __future__ import annotations

import pytest

from qworker.engine.task import Pending
from qworker.judge.control.gate import Gate, hash_params


def gate(*eps: dict, **params) -> Gate:
    return Gate({"model": "m", "endpoints": list(eps) or [{"url": "http://a"}], **params})


def task(i: int = 0) -> Pending:
    return Pending(bytes([i]) * 16, "llm_judge", {}, b"x" * 40, None, None, 0.0)


def outcome(status: int = 200, failure: str = "", latency: float = 0.2, retry_after=None, endpoint: int = 0) -> dict:
    return {"endpoint": endpoint, "status": status, "failure": failure, "latency_s": latency, "retry_after_s": retry_after}


def send_one(g: Gate, now: float = 0.0) -> Pending:
    g.queue.append(task())
    sent, failed = g.admit(now, 10)
    assert len(sent) == 1 and not failed
    return sent[0]


@pytest.mark.parametrize(
    ("status", "failure", "retried"),
    [
        (200, "", False), (429, "", True), (503, "", True), (500, "", True), (502, "", True), (408, "", True),
        (409, "", True), (400, "", False), (404, "", False), (422, "", False), (0, "timeout", True), (0, "connect", True),
    ],
)
def test_retry_classification(status, failure, retried):
    g = gate()
    p = send_one(g)
    assert g.settle(p, outcome(status, failure), None, 1.0) is retried
    assert g.endpoints[0].in_flight == 0


def test_401_fails_at_once_with_one_endpoint_and_fails_what_waits():
    g = gate()
    p = send_one(g)
    assert g.settle(p, outcome(401), "judge_error: HTTP 401", 1.0) is False
    assert g.endpoints[0].state(1.0) == "down (auth)"
    g.queue.extend([task(1), task(2)])
    sent, failed = g.admit(1.1, 10)
    assert sent == [] and len(failed) == 2


def test_401_on_one_endpoint_fails_over_to_another():
    g = gate({"url": "http://a"}, {"url": "http://b"})
    p = send_one(g)
    first = g.route(p)
    assert g.settle(p, outcome(401, endpoint=first), None, 1.0) is True
    g.queue.append(p)
    sent, _ = g.admit(1.1, 10)
    assert g.route(sent[0]) == 1 - first


def test_a_task_that_timed_out_is_retried_on_another_endpoint_with_room():
    # The endpoint that timed out has more room than the busy one (its hung requests ended), yet the
    # retry goes to the other: a hung endpoint does not take a task's whole budget.
    g = gate({"url": "http://a"}, {"url": "http://b"})
    g.queue.extend(task(i) for i in range(6))
    sent, _ = g.admit(0.0, 6)
    on_a = [p for p in sent if g.route(p) == 0]
    for p in on_a[1:]:
        g.settle(p, outcome(0, "timeout"), "timeout", 1.0)
    p = on_a[0]
    assert g.settle(p, outcome(0, "timeout"), "timeout", 1.0) is True
    assert g.endpoints[0].free(1.0, 1) > g.endpoints[1].free(1.0, 1)
    g.queue.appendleft(p)
    sent, _ = g.admit(1.0, 1)
    assert sent == [p] and g.route(p) == 1


def test_a_retried_task_goes_back_to_the_endpoint_that_failed_it_when_it_is_the_only_one():
    g = gate()
    p = send_one(g)
    assert g.settle(p, outcome(0, "timeout"), "timeout", 1.0) is True
    g.queue.appendleft(p)
    sent, _ = g.admit(1.0, 1)
    assert sent == [p] and g.route(p) == 0


def test_retry_after_delays_only_the_refused_task():
    g = gate()
    p = send_one(g)
    assert g.settle(p, outcome(429, retry_after=2.0), None, 1.0) is True
    g.queue.appendleft(p)  # as the dispatcher puts a retried task back
    g.queue.append(task(1))
    sent, _ = g.admit(1.5, 10)
    assert [q.key for q in sent] == [task(1).key]  # the other task goes; the refused one waits
    assert g.next_wake(1.5) == pytest.approx(3.0)
    g.settle(sent[0], outcome(200), None, 1.7)
    assert g.admit(2.9, 10)[0] == []
    assert [q.key for q in g.admit(3.01, 10)[0]] == [p.key]


def test_headers_saying_the_quota_is_spent_cool_the_whole_endpoint():
    g = gate()
    p = send_one(g)
    rl = {"requests": {"limit": 60, "remaining": 0, "reset_s": 30.0}}
    g.settle(p, {**outcome(429, retry_after=2.0), "ratelimit": rl}, None, 1.0)
    g.queue.append(task(1))
    assert g.admit(1.5, 10)[0] == []  # no task goes: the endpoint as a whole is out
    assert g.endpoints[0].state(1.5) == "cooling" and g.snapshot(1.5)["endpoints"][0]["cool_reason"] == "quota spent"


@pytest.mark.parametrize(("after", "cools"), [(0.005, True), (0.2, False), (1.0, False)])
def test_a_short_exact_retry_after_holds_the_whole_endpoint_that_long(after, cools):
    # 5 ms (retry-after-ms) is when a token bucket's next token comes: nothing sent before then
    # would be accepted.  Beyond a quarter of a round trip (0.2 s of 0.4 s), or in whole seconds,
    # it delays the refused task only.
    g = gate()
    g.settle(send_one(g), outcome(200, latency=0.4), None, 0.4)
    g.settle(send_one(g, 0.4), outcome(429, retry_after=after), None, 0.41)
    g.queue.append(task(1))
    assert (g.admit(0.412, 10)[0] == []) is cools
    assert (g.endpoints[0].state(0.412) == "cooling") is cools
    if cools:
        assert len(g.admit(0.41 + after + 0.001, 10)[0]) == 1  # and goes once it is over


def test_a_streak_of_refusals_across_the_board_cools_the_endpoint():
    g = gate()
    g.queue.extend(task(i) for i in range(20))
    sent, _ = g.admit(0.0, 20)
    for k, p in enumerate(sent):
        g.settle(p, outcome(429, retry_after=1.0), None, 0.5 + k * 0.001)
    assert g.endpoints[0].state(0.6) == "up"  # what was in flight when the capacity dropped: not yet the whole endpoint
    g.queue.extend(task(i) for i in range(40, 42))
    later = g.admit(0.6, 2)[0]
    assert len(later) == 1  # the limit capped at what was in flight
    g.settle(later[0], outcome(429, retry_after=1.0), None, 0.7)  # sent after the streak began, refused too
    assert g.endpoints[0].state(0.71) == "cooling"
    assert g.endpoints[0].cool_until == pytest.approx(1.7, abs=0.02)


def test_refusals_of_what_was_in_flight_when_the_capacity_dropped_do_not_pause_the_endpoint():
    g = gate(initial_concurrency=64)
    g.queue.extend(task(i) for i in range(64))
    sent, _ = g.admit(0.0, 64)
    for k, p in enumerate(sent[:48]):  # the capacity fell to 16: 48 of 64 refused, with a whole-second Retry-After
        g.settle(p, outcome(429, retry_after=1.0), None, 0.3 + k * 0.002)
        assert g.endpoints[0].state(0.3 + k * 0.002) == "up", k


def test_rate_limit_headers_pace_requests_before_any_refusal():
    g = gate(initial_concurrency=100)  # room under the limit: only pacing holds
    g.queue.extend(task(i) for i in range(200))
    sent, _ = g.admit(0.0, 32)
    rl = {"requests": {"limit": 600, "remaining": 0, "reset_s": 1.0}}  # 10 per second, nothing left now
    g.settle(sent[-1], {**outcome(200), "ratelimit": rl}, None, 0.2)  # the last one sent: none sent after it
    assert g.snapshot(0.2)["endpoints"][0]["paced_rpm"] == 600
    assert len(g.admit(0.2, 200)[0]) == 2  # the 0.2 s of refill since it was counted, and no more
    assert g.admit(0.25, 200)[0] == []
    assert len(g.admit(0.31, 200)[0]) == 1  # then one per 0.1 s
    g.settle(sent[0], {**outcome(200), "ratelimit": rl}, None, 0.4)  # the first one: 34 were sent after it
    assert g.endpoints[0].sent == 35
    assert g.endpoints[0].paced_requests.level(0.4) < -20


def test_random_503s_within_the_error_budget_leave_the_limit_alone():
    g = gate()
    e = g.endpoints[0]
    e.limit.slow_start = False
    g.queue.extend(task(i % 250) for i in range(2000))
    t, errors = 0.0, 0
    for i in range(2000):
        sent, _ = g.admit(t, 64)
        for p in sent:
            t += 0.005
            status = 503 if i % 20 == 0 and errors < 100 else 200
            errors += status == 503
            if g.settle(p, outcome(status), None, t):
                g.queue.appendleft(p)
            break
    assert e.limit.limit >= 32 and e.limit.drops == 0  # 5% 503s: noise, not overload
    assert e.error_share() < 0.15


def test_503s_beyond_the_error_budget_cut_the_limit():
    g = gate()
    e = g.endpoints[0]
    g.queue.extend(task(i) for i in range(64))
    sent, _ = g.admit(0.0, 64)
    for k, p in enumerate(sent):
        g.settle(p, outcome(503 if k % 2 else 200), None, 0.3 + k * 0.001)
    assert e.limit.drops >= 1 and e.limit.limit < 32


def test_with_every_endpoint_dead_waiting_tasks_fail_within_the_bound_naming_the_endpoint():
    g = gate({"url": "http://a"}, dead_after_s=10)
    p = send_one(g)
    g.settle(p, outcome(0, "connect"), "judge_error: endpoint 0 (http://a): ConnectionRefusedError", 0.1)
    g.queue.appendleft(p)
    g.queue.extend(task(i) for i in range(1, 20))
    failed_at, t = None, 0.1
    while failed_at is None and t < 30:
        t = g.next_wake(t) or t + 0.25
        sent, failed = g.admit(t, 100)
        for q in sent:  # probes: still refused
            g.settle(q, outcome(0, "connect"), "judge_error: ConnectionRefusedError", t + 0.001)
            g.queue.appendleft(q)
        if failed:
            failed_at = t
            why = str(failed[0][1])
    assert failed_at is not None and failed_at <= 10.2
    assert "http://a" in why and "unreachable" in why and "ConnectionRefusedError" in why
    # it comes back: a new task is the probe, and flows
    fresh = task(99)
    fresh.submitted = 40.0
    g.queue.append(fresh)
    sent, failed = g.admit(40.0, 10)
    assert [q.key for q in sent] == [fresh.key] and not failed
    g.settle(sent[0], outcome(200), None, 40.2)
    assert g.endpoints[0].state(40.3) == "up"


def test_routes_to_the_most_free_capacity_times_weight():
    g = gate({"url": "http://a", "max_concurrency": 4}, {"url": "http://b", "max_concurrency": 4, "weight": 3})
    g.queue.extend(task(i) for i in range(8))
    sent, _ = g.admit(0.0, 8)
    assert len(sent) == 8  # 4 + 4: both full
    assert [g.route(p) for p in sent[:3]] == [1, 1, 1]  # b first while its free room x 3 is larger
    g.queue.append(task(9))
    assert g.admit(0.0, 8)[0] == []  # static caps hold


def test_connection_failure_takes_the_endpoint_down_then_a_probe_brings_it_back():
    g = gate({"url": "http://a"}, {"url": "http://b"})
    g.queue.extend(task(i) for i in range(2))
    a = next(p for p in g.admit(0.0, 2)[0] if g.route(p) == 0)
    assert g.settle(a, outcome(0, "connect"), None, 0.1) is True
    assert g.endpoints[0].state(0.2).startswith("down")
    g.queue.extend(task(i) for i in range(10, 20))
    assert all(g.route(p) == 1 for p in g.admit(0.2, 10)[0])  # everything to the survivor
    g.queue.append(task(30))
    probe = g.admit(0.7, 10)[0]  # after 0.5 s, exactly one probe
    assert [g.route(p) for p in probe] == [0]
    assert g.endpoints[0].state(0.7) == "probing"
    g.settle(probe[0], outcome(200, endpoint=0), None, 0.9)
    assert g.endpoints[0].state(1.0) == "up"


def test_error_streak_takes_an_endpoint_down():
    g = gate()
    for i in range(5):
        p = send_one(g, now=i)
        g.settle(p, outcome(500), None, i + 0.1)
    assert g.endpoints[0].state(5.0).startswith("down (5 errors")


def test_retry_budgets():
    g = gate(max_attempts=2)
    p = send_one(g)
    assert g.settle(p, outcome(500), None, 1.0) is True  # error 1 of 2
    g.queue.append(p)
    p = g.admit(1.0, 1)[0][0]  # a lone error: sent again at once
    assert g.settle(p, outcome(500), None, 1.1) is False  # the budget is spent
    q = send_one(g, now=2.0)
    results = []
    for i in range(12):  # 429s have a budget of 5 x max_attempts
        results.append(g.settle(q, outcome(429), None, 3.0 + i))
        g.calls[q].route = 0
        g.endpoints[0].in_flight += 1
    assert results.count(True) == 9 and results[9] is False


def test_routing_params_are_not_hashed():
    params = {"model": "m", "endpoints": [{"url": "http://a"}], "timeout_s": 5, "max_attempts": 3, "prompt_template": "t"}
    assert hash_params(params) == {"model": "m", "prompt_template": "t"}


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"model": "m", "endpoints": []}, "endpoints"),
        ({"endpoints": [{"url": "http://a"}]}, "model"),
        ({"model": "m", "endpoints": [{"url": "http://a"}], "score_patern": "x"}, r"unknown param\(s\) \['score_patern'\]"),
        ({"model": "m", "endpoints": [{"url": "http://a", "api_key": "sk-1"}]}, r"endpoints\[0\]: unknown key\(s\) \['api_key'\]"),
    ],
)
def test_bad_judge_params_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        Gate(params)


def test_hung_timeouts_stay_out_of_the_error_budget_so_a_later_503_is_noise_not_a_refusal():
    g = gate()
    e = g.endpoints[0]
    g.queue.extend(task(i) for i in range(30))
    hanging, _ = g.admit(0.0, 30)  # sent at 0 and never answered: each times out at 60 s
    t = 0.0
    for i in range(100):  # meanwhile the server answers everything else in 20 ms
        g.queue.append(task(100 + i % 100))
        sent, _ = g.admit(t, 1)
        assert len(sent) == 1
        g.settle(sent[0], outcome(200, latency=0.02), None, t + 0.02)
        t += 0.03
    limit = e.limit.limit
    for p in hanging:
        assert g.settle(p, outcome(0, "timeout", latency=0.0), None, 60.0) is True  # retried
    assert e.health.counts["timeouts"] == 30 and e.limit.hangs.count == 30
    assert e.error_share() == 0.0  # 30 of 130 answers: timeouts would be 23%, over the 15% budget
    assert e.limit.limit == limit and e.limit.drops == 0
    g.queue.append(task(250))
    sent, _ = g.admit(60.1, 1)
    g.settle(sent[0], outcome(503), None, 60.2)  # noise within the budget: no cut
    assert e.limit.drops == 0


def test_a_task_whose_calls_hang_fails_after_max_attempts_like_one_that_times_out():
    g = gate(max_attempts=2)
    p = send_one(g)  # sent at 0; it hangs
    for k in range(3):  # meanwhile others are answered in 20 ms
        g.queue.append(task(10 + k))
        sent, _ = g.admit(0.1 * (k + 1), 1)
        g.settle(sent[0], outcome(200, latency=0.02), None, 0.1 * (k + 1) + 0.02)
    assert g.settle(p, outcome(0, "timeout", latency=0.0), None, 60.0) is True  # the first hang: tried again
    g.queue.append(p)
    sent, _ = g.admit(60.0, 1)
    assert sent == [p]
    for k in range(3):
        g.queue.append(task(20 + k))
        more, _ = g.admit(60.1 + 0.1 * k, 1)
        g.settle(more[0], outcome(200, latency=0.02), None, 60.12 + 0.1 * k)
    assert g.settle(p, outcome(0, "timeout", latency=0.0), None, 120.0) is False  # the second: its attempts are spent
    assert g.endpoints[0].limit.hangs.count == 2


def test_a_hung_request_sent_before_the_endpoint_went_down_neither_frees_its_probe_nor_is_charged():
    g = gate(max_attempts=2)
    e = g.endpoints[0]
    hung = send_one(g)  # sent at 0; it hangs
    for k in range(3):  # others are answered in 20 ms
        g.queue.append(task(10 + k))
        sent, _ = g.admit(0.1 * (k + 1), 1)
        g.settle(sent[0], outcome(200, latency=0.02), None, 0.1 * (k + 1) + 0.02)
    g.queue.append(task(20))
    sent, _ = g.admit(0.5, 1)
    g.settle(sent[0], outcome(0, "connect"), None, 0.6)  # down
    g.queue.append(task(21))
    probe, _ = g.admit(5.0, 10)  # past the first wait: one probe goes
    assert len(probe) == 1 and e.health.probing
    assert g.settle(hung, outcome(0, "timeout", latency=0.0), None, 5.1) is True
    assert e.health.probing  # the probe is still out: nothing else may go
    assert g.calls[hung].tries == 0  # the endpoint's fault, not the task's
