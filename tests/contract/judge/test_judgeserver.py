"""The second judge server model (``judgeserver.py``) behaves as specified, over real HTTP on loopback.

Its capacity moves while requests are in flight, it refuses slowly with a whole-second
Retry-After, it queues in queue mode, and its vLLM-like ``/metrics`` (read with qworker's own
parser) and its ledger count what is running and waiting.  Latencies are long and fixed so that
the states checked last seconds; every wait is on the server's own state, with a bound.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Callable

from qworker.judge.control.endpoint import parse_vllm_load
from tests.contract.judge.judgeserver import Schedule, ServerThread


def post(url: str, i: int) -> tuple[int, dict, bytes, float]:
    """(status, headers, body, seconds) of one chat request."""
    body = json.dumps({"model": "judge", "messages": [{"role": "user", "content": f"question {i}"}]}).encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read(), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read(), time.monotonic() - t0


def get(base: str, path: str) -> bytes:
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return r.read()


def in_background(url: str, count: int) -> tuple[list[threading.Thread], list]:
    replies: list = []
    threads = [threading.Thread(target=lambda i=i: replies.append(post(url, i)), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    return threads, replies


def wait_for(what: str, check: Callable[[], bool], bound: float = 30.0) -> None:
    deadline = time.monotonic() + bound
    while not check():
        assert time.monotonic() < deadline, f"the judge server did not reach {what} within {bound} s"
        time.sleep(0.02)


def load(base: str) -> tuple[float, float]:
    got = parse_vllm_load(get(base, "/metrics").decode())
    assert got is not None
    return got


def test_a_capacity_lowered_under_requests_in_flight_refuses_newcomers_slowly_with_whole_second_retry_after():
    schedule = Schedule(capacity=3, steps=((1.0, 1),), horizon=6.0)
    with ServerThread(schedule=schedule, latency=3.0, sigma=0.0, load_slope=0.0, refusal_latency=(0.2, 0.3), duration=60) as s:
        threads, replies = in_background(s.url, 3)
        wait_for("3 running", lambda: load(s.base) == (3.0, 0.0))
        wait_for("the step to capacity 1", lambda: json.loads(get(s.base, "/health"))["now_s"] >= 1.0)
        status, headers, body, took = post(s.url, 99)  # 3 still in flight, capacity now 1
        assert status == 429 and took >= 0.2
        assert headers["Retry-After"].isdigit() and int(headers["Retry-After"]) >= 1
        assert "retry-after-ms" not in {k.lower() for k in headers}
        assert load(s.base)[0] == 3.0  # what was in flight is served out, not dropped
        for t in threads:
            t.join(60)
        assert sorted(r[0] for r in replies) == [200, 200, 200]
        assert all(b"Score: " in r[2] and json.loads(r[2])["usage"]["completion_tokens"] > 0 for r in replies)
        ledger = json.loads(get(s.base, "/ledger"))
    first, second = ledger["phases"]
    assert (first["capacity"], second["capacity"]) == (3, 1)
    assert second["refused"] == 1 and second["served"] == 3
    assert any(t >= 1.0 and running == 3 and capacity == 1 for t, running, _, _, capacity in ledger["in_flight"])


def test_a_queueing_server_waits_instead_of_refusing_and_starts_the_waiting_when_its_capacity_rises():
    schedule = Schedule(capacity=1, steps=((0.5, 3),), horizon=6.0)
    with ServerThread(schedule=schedule, mode="queue", latency=2.0, sigma=0.0, load_slope=0.0, duration=60) as s:
        threads, replies = in_background(s.url, 3)
        wait_for("1 running and 2 waiting", lambda: load(s.base) == (1.0, 2.0))
        wait_for("3 running after the step", lambda: load(s.base) == (3.0, 0.0))
        for t in threads:
            t.join(60)
        ledger = json.loads(get(s.base, "/ledger"))
    assert sorted(r[0] for r in replies) == [200, 200, 200]
    assert sum(p["refused"] for p in ledger["phases"]) == 0
    assert any(waiting == 2 for _, _, _, waiting, _ in ledger["in_flight"])


def test_a_second_tenant_takes_its_share_of_the_slots_and_leaves():
    schedule = Schedule(capacity=4, tenant=(0.5, 1.5, 0.5), horizon=4.0)
    with ServerThread(schedule=schedule, latency=0.2, sigma=0.0, load_slope=0.0, duration=60) as s:
        post(s.url, 0)  # starts the clock
        wait_for("the tenant holding 2", lambda: load(s.base)[0] == 2.0)
        wait_for("the tenant gone", lambda: json.loads(get(s.base, "/health"))["now_s"] >= 1.5 and load(s.base)[0] == 0.0)
        ledger = json.loads(get(s.base, "/ledger"))
    before, during, after = ledger["phases"]
    assert during["tenant_served"] > 0 and before["tenant_mean_slots"] == 0
    assert 1.5 <= during["tenant_mean_slots"] <= 2.0
    assert after["tenant_mean_slots"] < 0.5  # what it had in flight drains: at most 0.2 s of 2 slots


def test_bad_requests_get_one_clear_line_and_the_connection_survives():
    with ServerThread(schedule=Schedule(capacity=2), latency=0.05, sigma=0.0, duration=60) as s:
        req = urllib.request.Request(s.url, b"not json", {"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=10)
            raise AssertionError("a body that is not JSON was accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 400 and b"bad request" in e.read()
        assert post(s.url, 1)[0] == 200
