"""The bundled mock judge: its capacity accounting, over real HTTP."""

from __future__ import annotations

import json
import socket
import time

import urllib3

from qworker.testing import MockJudge, expected_score


def test_back_to_back_requests_at_capacity_are_served_and_counted():
    # capacity 1 and one keep-alive connection: each request is sent as soon as the
    # previous answer is read, and none may be refused
    m = MockJudge(capacity=1, latency_s=0.002).start()
    try:
        http = urllib3.PoolManager(maxsize=1)
        statuses = []
        for i in range(200):
            body = {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}
            r = http.request("POST", m.url, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            statuses.append(r.status)
            if r.status == 200:
                assert json.loads(r.data)["choices"][0]["message"]["content"].endswith(f"Score: {expected_score(f'q{i}')}")
        assert statuses == [200] * 200
        stats = json.loads(http.request("GET", m.url.replace("/v1/chat/completions", "/stats")).data)
        assert stats["served"] == 200 and stats["status_429"] == 0 and stats["connections"] == 1
        assert 0.002 <= stats["mean_held_s"] < 0.05
    finally:
        m.stop()


def post(http, m, i=0, max_tokens=16):
    body = {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": max_tokens}
    return http.request("POST", m.url, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


def stats(http, m):
    return json.loads(http.request("GET", m.url.replace("/v1/chat/completions", "/stats")).data)


def test_queue_mode_never_refuses_and_reports_time_queued():
    import threading

    m = MockJudge(capacity=2, latency_s=0.05, queue=True).start()
    try:
        http = urllib3.PoolManager(maxsize=8)
        statuses = []
        threads = [threading.Thread(target=lambda i=i: statuses.append(post(http, m, i).status)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        st = stats(http, m)
        assert statuses == [200] * 8 and st["status_429"] == 0 and st["max_in_flight"] <= 2
        assert st["mean_queued_s"] > 0.02  # 8 at 2 at a time: most waited
        text = http.request("GET", m.url.replace("/v1/chat/completions", "/metrics")).data.decode()
        assert "vllm:num_requests_running" in text and "vllm:num_requests_waiting" in text
    finally:
        m.stop()


def test_whole_second_retry_after_and_provider_headers():
    m = MockJudge(capacity=64, latency_s=0.001, rpm=60, retry_after="seconds", ratelimit_headers="anthropic").start()
    try:
        http = urllib3.PoolManager(maxsize=1)
        first, second = post(http, m, 1), post(http, m, 2)  # a bucket of 1 request per second
        assert first.status == 200 and second.status == 429
        assert second.headers["Retry-After"] == "1" and "retry-after-ms" not in second.headers
        assert second.headers["anthropic-ratelimit-requests-limit"] == "60"
        assert second.headers["anthropic-ratelimit-requests-remaining"] == "0"
        assert second.headers["anthropic-ratelimit-requests-reset"].endswith("Z")
    finally:
        m.stop()


def test_lognormal_latency_spreads_and_per_token_reports_usage():
    m = MockJudge(capacity=64, latency_s=0.01, latency_dist="lognormal", sigma=0.6)
    draws = sorted(m.draw()[0] for _ in range(2000))
    m.server_close()
    assert 0.009 < sum(draws) / len(draws) < 0.011 and draws[1979] / draws[20] > 5  # p99 / p1: a 10x spread
    m = MockJudge(latency_dist="per-token", per_token_s=0.001, ttft_s=0.0, tokens_mean=100)
    lat, n = m.draw()
    m.server_close()
    assert lat == 0.001 * n


def test_go_down_answers_503_with_retry_after_then_comes_back():
    m = MockJudge(capacity=8, latency_s=0.001).start()
    try:
        http = urllib3.PoolManager(maxsize=1, retries=False)
        m.go_down(0.5, "503")
        r = post(http, m)
        assert r.status == 503 and r.headers["Retry-After"] == "1"
        time.sleep(0.6)
        assert post(http, m).status == 200
        assert stats(http, m)["outage_replies"] == 1
    finally:
        m.stop()


def test_go_down_refusing_connections_listens_again_on_the_same_port():
    m = MockJudge(capacity=8, latency_s=0.001).start()
    try:
        http = urllib3.PoolManager(maxsize=1, retries=False)
        assert post(http, m).status == 200
        m.go_down(0.5, "refuse")
        deadline = time.monotonic() + 5
        refused = False
        while not refused and time.monotonic() < deadline:  # the command takes effect off this thread
            try:
                post(http, m)
            except urllib3.exceptions.HTTPError:
                refused = True
        assert refused
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if post(http, m).status == 200:
                    break
            except urllib3.exceptions.HTTPError:
                time.sleep(0.05)
        else:
            raise AssertionError("the mock did not listen again")
    finally:
        m.stop()


def test_admin_routes_set_hostile_headers_and_giant_bodies():
    m = MockJudge(capacity=8, latency_s=0.001).start()
    try:
        http = urllib3.PoolManager(maxsize=1, retries=False)
        admin = m.url.replace("/v1/chat/completions", "/admin/")
        r = http.request("POST", admin + "headers", body=json.dumps({"headers": {"x-ratelimit-limit-requests": "-1"}, "count": 1}))
        assert r.status == 200
        assert post(http, m).headers["x-ratelimit-limit-requests"] == "-1"
        assert "x-ratelimit-limit-requests" not in post(http, m).headers  # count 1: the next reply only
        assert http.request("POST", admin + "giant", body=json.dumps({"count": 1, "bytes": 3_000_000})).status == 200
        assert len(post(http, m).data) > 3_000_000 and len(post(http, m).data) < 1000
        assert http.request("POST", admin + "down", body=json.dumps({"seconds": 0.3, "how": "nope"})).status == 400
    finally:
        m.stop()


def test_a_hung_request_holds_its_slot_until_its_client_gives_up():
    m = MockJudge(capacity=1, latency_s=0.002).start()
    http = urllib3.PoolManager(maxsize=1)
    try:
        m.fault = "hang"
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "q0"}]}).encode()
        host, port = m.url.split("//")[1].split("/")[0].split(":")
        client = socket.create_connection((host, int(port)), timeout=5.0)
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + 5.0
        while stats(http, m)["hangs"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        m.fault = None
        assert post(http, m, 1).status == 429  # its slot is held while its client waits
        client.close()  # the client gives up
        while (status := post(http, m, 2).status) == 429 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status == 200 and stats(http, m)["hangs"] == 1
    finally:
        http.clear()
        m.stop()
