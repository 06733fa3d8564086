"""The bundled mock judge: its capacity accounting, over real HTTP."""

from __future__ import annotations

import json

import urllib3

from qworker._mockjudge import MockJudge, expected_score


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
