"""Judge calls from real worker processes through the producer's gate to real mock endpoints."""

from __future__ import annotations

import logging
import threading
import time

from qworker import Producer
from qworker.judge.control import gate as _gate
from qworker.testing import MockJudge


def judge_config(*urls_or_eps, **params) -> dict:
    eps = [u if isinstance(u, dict) else {"url": u} for u in urls_or_eps]
    return {"rewards": {"llm_judge": {"model": "m", "endpoints": eps, "timeout_s": 10, **params}}}


def rows(n: int, tag: str = "") -> list[dict]:
    return [{"prompt": f"q{tag}{i}", "response": f"a{i}", "ground_truth": "g"} for i in range(n)]


def test_two_workers_share_one_adaptive_limit_on_a_capped_endpoint():
    m = MockJudge(capacity=8, latency_s=0.05).start()
    try:
        with Producer(local_workers=2, config=judge_config(m.url)) as p:
            results = p.map("llm_judge", rows(600), timeout=120)
            judge = p.status()["judges"][0]["endpoints"][0]
        assert all(r.ok for r in results), next(r.error for r in results if not r.ok)
        assert m.stats["served"] == 600
        assert m.stats["status_429"] < 0.05 * m.stats["requests"]  # the pair converged on 8 rather than each on its own
        assert 6 <= judge["limit"] <= 12 and judge["ok"] == 600
    finally:
        m.stop()


def test_a_static_cap_holds_across_worker_processes():
    m = MockJudge(capacity=100, latency_s=0.05).start()
    try:
        cfg = judge_config({"url": m.url, "max_concurrency": 4})
        with Producer(local_workers=2, config=cfg) as p:
            assert all(r.ok for r in p.map("llm_judge", rows(200), timeout=120))
        assert m.stats["max_in_flight"] <= 4 and m.stats["status_429"] == 0
        assert m.stats["connections"] <= 2 * 4  # keep-alive: no more connections than could be in use
    finally:
        m.stop()


def test_401_fails_fast_and_the_key_appears_nowhere(monkeypatch, caplog):
    secret = "sk-live-never-print-me-5521"
    monkeypatch.setenv("QW_TEST_JUDGE_KEY", secret)  # local workers inherit the environment
    m = MockJudge(capacity=8, latency_s=0.01, api_key="sk-other").start()
    try:
        caplog.set_level(logging.DEBUG, logger="qworker")
        with Producer(local_workers=1, config=judge_config({"url": m.url, "api_key_env": "QW_TEST_JUDGE_KEY"})) as p:
            t0 = time.monotonic()
            futures = p.submit_batch("llm_judge", rows(20))
            results = p.gather(futures, timeout=60)
            elapsed = time.monotonic() - t0
            status = repr(p.status())
        assert all(r.error_kind == "judge_error" for r in results)
        assert "HTTP 401" in results[0].error
        assert elapsed < 10
        assert m.stats["requests"] < 20  # those sent before the first 401 came back; the rest failed unsent
        for text in [*(repr(r) for r in results), status, caplog.text]:
            assert secret not in text
    finally:
        m.stop()


def test_failover_and_recovery_between_two_endpoints():
    a = MockJudge(capacity=16, latency_s=0.05).start()
    b = MockJudge(capacity=16, latency_s=0.05).start()
    port_a = a.server_address[1]
    try:
        with Producer(local_workers=2, config=judge_config(a.url, b.url)) as p:
            futures = p.submit_batch("llm_judge", rows(4000))
            while a.stats["served"] < 100:
                time.sleep(0.01)
            a.stop()  # endpoint a is gone: connection refused from now on
            killed_at = time.monotonic()
            served_b = b.stats["served"]
            while b.stats["served"] < served_b + 50:
                time.sleep(0.01)
            moved_s = time.monotonic() - killed_at
            time.sleep(0.5)
            a2 = MockJudge(port=port_a, capacity=16, latency_s=0.05).start()  # it comes back on the same address
            try:
                results = p.gather(futures, timeout=120)
                st = p.status()["judges"][0]["endpoints"]
            finally:
                a2.stop()
        assert all(r.ok for r in results), next(r.error for r in results if not r.ok)
        assert moved_s < 2.0
        assert a2.stats["served"] > 50  # traffic returned after the probe
        assert st[0]["connect_errors"] + st[0]["other_errors"] >= 1 and st[0]["state"] == "up"  # refused, or reset
    finally:
        b.stop()


def test_the_judge_config_decides_the_hash_but_routing_does_not():
    m = MockJudge(capacity=8, latency_s=0.01).start()
    try:
        with Producer(local_workers=1, config=judge_config(m.url)) as p:
            first = p.map("llm_judge", rows(3), timeout=60)
        with Producer(local_workers=1, config=judge_config(m.url, m.url, timeout_s=3, max_attempts=2)) as p:
            rerouted = p.map("llm_judge", rows(3), timeout=60)
        with Producer(local_workers=1, config=judge_config(m.url, model="other")) as p:
            other_model = p.map("llm_judge", rows(3), timeout=60)
        assert [r.key for r in first] == [r.key for r in rerouted]
        assert not {r.key for r in first} & {r.key for r in other_model}
    finally:
        m.stop()


def test_a_hung_endpoint_times_out_and_the_task_moves_on():
    a = MockJudge(capacity=8, latency_s=0.01).start()
    b = MockJudge(capacity=8, latency_s=0.01).start()
    a.fault = "hang"
    try:
        with Producer(local_workers=1, config=judge_config(a.url, b.url, timeout_s=1)) as p:
            results = p.map("llm_judge", rows(10), timeout=60)
        assert all(r.ok for r in results), [r.error for r in results if not r.ok]
        assert b.stats["served"] == 10
    finally:
        threading.Thread(target=a.stop, daemon=True).start()  # its handler threads sleep; do not wait
        b.stop()


def test_prometheus_metrics_and_status_show_the_endpoint():
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = MockJudge(capacity=8, latency_s=0.01).start()
    try:
        with Producer(local_workers=1, config=judge_config(m.url), metrics_port=port) as p:
            p.map("llm_judge", rows(30), timeout=60)
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            ep = p.status()["judges"][0]["endpoints"][0]
        assert f'qworker_judge_requests_total{{endpoint="{m.url}",model="m",outcome="ok"}} 30.0' in text
        assert "qworker_judge_limit{" in text and "qworker_judge_latency_seconds{" in text
        assert f'qworker_judge_other_producers{{endpoint="{m.url}",model="m"}} 0.0' in text and "qworker_judge_share{" in text
        assert 'qworker_tasks_total{state="resolved"} 30.0' in text
        assert ep["ok"] == 30 and ep["latency_p50_s"] > 0
    finally:
        m.stop()


def test_a_typo_in_the_judge_config_is_an_error_at_submission():
    import pytest

    from qworker import ConfigError

    with Producer(local_workers=0, config=judge_config("http://127.0.0.1:9/v1/chat/completions", score_patern="x")) as p:
        with pytest.raises(ConfigError, match=r"llm_judge: unknown param\(s\) \['score_patern'\]"):
            p.submit_batch("llm_judge", rows(1))


def test_a_failing_gate_does_not_strand_tasks(monkeypatch, caplog):

    def broken(self, p, outcome, error, now):
        raise RuntimeError("a bug in the gate")

    monkeypatch.setattr(_gate.Gate, "settle", broken)  # the producer's side runs in this process
    m = MockJudge(capacity=64, latency_s=0.01).start()  # room for all 20: no 429 to retry
    try:
        with caplog.at_level(logging.ERROR, logger="qworker"), Producer(local_workers=1, config=judge_config(m.url)) as p:
            results = p.map("llm_judge", rows(20, "broken-gate"), timeout=60)
        assert all(r.ok for r in results)  # each resolved as its worker reported it
        assert "the admission policy failed on a result" in caplog.text
    finally:
        m.stop()


def test_lognormal_latency_from_real_processes_every_task_scored():
    m = MockJudge(capacity=16, latency_s=0.05, latency_dist="lognormal", sigma=0.6).start()
    try:
        with Producer(local_workers=2, config=judge_config(m.url)) as p:
            results = p.map("llm_judge", rows(800, "lognormal"), timeout=120)
            judge = p.status()["judges"][0]["endpoints"][0]
        assert all(r.ok for r in results), next(r.error for r in results if not r.ok)
        assert m.stats["served"] == 800 and judge["ok"] == 800
        assert judge["limit"] >= 8  # the spread of latency did not cut it to the floor (capacity 16)
        assert m.stats["status_429"] < 0.05 * m.stats["requests"]
    finally:
        m.stop()


def test_a_metrics_url_steers_the_limit_on_a_queueing_server():
    # vLLM-like: never refuses, queues beyond its batch of 8; /metrics says how many run and wait.
    m = MockJudge(capacity=8, latency_s=0.05, latency_dist="lognormal", sigma=0.6, queue=True).start()
    try:
        cfg = judge_config({"url": m.url, "metrics_url": m.url.replace("/v1/chat/completions", "/metrics")})
        with Producer(local_workers=2, config=cfg) as p:
            results = p.map("llm_judge", rows(800, "metrics"), timeout=120)
            judge = p.status()["judges"][0]["endpoints"][0]
        assert all(r.ok for r in results), next(r.error for r in results if not r.ok)
        assert m.stats["metrics_reads"] >= 3  # read by the producer's poller while the tasks ran
        assert judge["limit"] <= 24  # the batch and the next one queued (``ServerLoad``), not the server's queue (ceiling 512)
        assert m.queued_s <= 1.5 * m.service_s  # (about one batch's service; measured 1.18 here)
    finally:
        m.stop()


def test_a_closed_producer_stops_reading_its_judges_metrics_url():
    m = MockJudge(capacity=8, latency_s=0.01, queue=True).start()
    try:
        cfg = judge_config({"url": m.url, "metrics_url": m.url.replace("/v1/chat/completions", "/metrics")})
        with Producer(local_workers=1, config=cfg) as p:
            assert all(r.ok for r in p.map("llm_judge", rows(20, "closed"), timeout=120))
            pollers = [t for t in threading.enumerate() if t.name.startswith("qworker-load-")]
            assert pollers
        for t in pollers:
            t.join(timeout=10)  # a poll in flight ends within its 2 s timeout
        assert not any(t.is_alive() for t in pollers)  # before: polling until the endpoint was garbage-collected
    finally:
        m.stop()


def test_a_dead_endpoint_fails_tasks_with_an_explicit_error_and_recovers():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    with Producer(local_workers=1, config=judge_config(url, dead_after_s=2)) as p:
        results = p.map("llm_judge", rows(20, "dead"), timeout=60)
        assert all(not r.ok for r in results)
        for r in results:
            assert "no endpoint of this judge answered" in r.error or "Connection" in r.error, r.error
            assert url in r.error or f"127.0.0.1:{port}" in r.error
        assert any("unreachable" in r.error and "dead_after_s" in r.error for r in results)
        m = MockJudge(port=port, capacity=8, latency_s=0.01).start()  # it comes back
        try:
            again = p.map("llm_judge", rows(10, "back"), timeout=60)
        finally:
            m.stop()
    assert all(r.ok for r in again), next(r.error for r in again if not r.ok)
