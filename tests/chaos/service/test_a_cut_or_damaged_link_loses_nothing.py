"""Link seams: a Client and ``qworker serve``, a producer and ``qworker-pool``, through a TCP
proxy that cuts the link.  Real processes, real sockets; every future resolves within a stated bound, scored
right (``count_eval`` scores its index), and the count of evaluations shows what was paid twice."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from qworker import Client, Producer
from tests.chaos_scenarios.measure import evaluations
from tests.chaos_scenarios.processes import start_pool, stop_proc
from tests.chaos_scenarios.seams_link import link_cuts
from tests.conftest import TEST_REWARDS
from tests.contract.service.test_service import free_port, serve, stop
from tests.faults.proxy import Proxy

SERVICE_TIMEOUT_S = 20.0
RESOLVE_WITHIN_S = SERVICE_TIMEOUT_S  # after the link heals: the ledger resends, the client re-asks


@pytest.fixture(scope="module")
def service():
    port = free_port()
    proc = serve(port, "--workers", "2")
    yield port
    stop(proc)


def payloads(tmp_path, n: int, sleep_ms: int = 20) -> list[dict]:
    return [{"log": str(tmp_path / "evals"), "i": i, "sleep_ms": sleep_ms} for i in range(n)]


def check(results, n: int) -> None:
    assert len(results) == n
    bad = [(i, r.error, r.score) for i, r in enumerate(results) if not r.ok or r.score != float(i)]
    assert not bad, bad[:5]


def test_a_cut_of_3_s_loses_nothing(service, tmp_path):
    with Proxy(service) as proxy, Client(proxy.endpoint, service_timeout_s=SERVICE_TIMEOUT_S) as c:
        futures = c.submit_batch("count_eval", payloads(tmp_path, 40, sleep_ms=50))
        time.sleep(0.3)
        proxy.cut(3.0)  # the service resolves what it holds while the client is away
        results = c.gather(futures, timeout=3.0 + RESOLVE_WITHIN_S)
        status = c.status()
    check(results, 40)
    assert status["service"]["ledger"]["resent"] >= 1 and status["service"]["ledger"]["unacked"] == 0


def test_a_cut_longer_than_the_reconnect_backoff(service, tmp_path):
    with Proxy(service) as proxy, Client(proxy.endpoint, service_timeout_s=SERVICE_TIMEOUT_S) as c:
        futures = c.submit_batch("count_eval", payloads(tmp_path, 60, sleep_ms=20))
        time.sleep(0.2)
        proxy.cut(12.0)
        t0 = time.monotonic()
        results = c.gather(futures, timeout=12.0 + RESOLVE_WITHIN_S)
        took = time.monotonic() - t0
    check(results, 60)
    assert took < 12.0 + 10.0, f"resolved {took:.1f} s after the cut began"


def test_repeated_cuts_lose_nothing_and_pay_little_twice(service, tmp_path):
    n = 300
    with Proxy(service) as proxy, Client(proxy.endpoint, service_timeout_s=SERVICE_TIMEOUT_S) as c:
        futures = c.submit_batch("count_eval", payloads(tmp_path, n, sleep_ms=10))
        for _ in range(5):
            time.sleep(0.5)
            proxy.cut(1.0)
            time.sleep(1.0)
        results = c.gather(futures, timeout=RESOLVE_WITHIN_S + 10)
    check(results, n)
    counts = evaluations(tmp_path / "evals")
    assert sorted(counts) == list(range(n))
    assert max(counts.values()) == 1  # the producer pays once: the link's faults are the client's, not the workers'


def test_a_cut_during_submission(service, tmp_path):
    n = 5000
    with Proxy(service) as proxy, Client(proxy.endpoint, service_timeout_s=SERVICE_TIMEOUT_S, connect_timeout_s=15) as c:
        c.map("count_eval", payloads(tmp_path / "warm", 1), timeout=30)  # connected
        out: list = []
        t = threading.Thread(target=lambda: out.append(c.submit_batch("count_eval", payloads(tmp_path, n, sleep_ms=0))))
        t.start()
        time.sleep(0.02)
        proxy.cut(2.0)  # the Submit, or its Accepted, is on the wire
        t.join(30)
        assert out, "submit_batch did not return"
        results = c.gather(out[0], timeout=2.0 + RESOLVE_WITHIN_S + 30)
    check(results, n)


def test_a_submission_swallowed_by_a_silent_link_is_sent_again(service, tmp_path):
    """The Submit (or its Accepted) vanishes on a link that goes silent, then resets: the client sends it again
    until it is taken, and the service answers a repeat without taking it twice."""
    with Proxy(service) as proxy, Client(proxy.endpoint, service_timeout_s=SERVICE_TIMEOUT_S, connect_timeout_s=15) as c:
        c.map("count_eval", payloads(tmp_path / "warm", 1), timeout=30)  # connected
        proxy.blackhole(2.0)
        futures = c.submit_batch("count_eval", payloads(tmp_path, 50, sleep_ms=5))
        results = c.gather(futures, timeout=RESOLVE_WITHIN_S)
        assert c.resubmitted >= 1
    check(results, 50)
    assert max(evaluations(tmp_path / "evals").values()) == 1


def test_damaged_bytes_on_the_link_lose_nothing(service, tmp_path):
    with Proxy(service) as proxy, Client(proxy.endpoint, service_timeout_s=SERVICE_TIMEOUT_S) as c:
        futures = c.submit_batch("count_eval", payloads(tmp_path, 100, sleep_ms=20))
        time.sleep(0.3)
        proxy.drop(7)  # the stream is damaged: libzmq drops the connection and redials
        time.sleep(0.5)
        proxy.truncate(100)
        results = c.gather(futures, timeout=RESOLVE_WITHIN_S)
    check(results, 100)


def test_a_pool_behind_a_cut_link_loses_nothing(tmp_path):
    """A producer and a ``qworker-pool`` daemon through the proxy: the pool's connection is cut for 3 s."""
    port = free_port()
    n = 200
    with Producer(bind=f"tcp://127.0.0.1:{port}", local_workers=0, heartbeat_s=0.5) as p, Proxy(port) as proxy:
        pool = start_pool(proxy.endpoint, "--workers", "2")
        try:
            p.wait_for_workers(2, timeout=60)
            futures = p.submit_batch("count_eval", payloads(tmp_path, n, sleep_ms=20))
            time.sleep(0.5)
            proxy.cut(3.0)
            results = p.gather(futures, timeout=60)
        finally:
            stop_proc(pool)
    check(results, n)
    counts = evaluations(tmp_path / "evals")
    assert sorted(counts) == list(range(n))


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stopping_service_fails_its_clients_futures_at_once(tmp_path, sig, code):
    """Ctrl-C or SIGTERM on ``qworker serve``: clients are told, and what they wait on resolves as
    ``service_lost`` at once (not after their service_timeout_s); the exit code is 128 + the signal."""
    port = free_port()
    proc = serve(port, "--workers", "1")
    try:
        with Client(f"tcp://127.0.0.1:{port}", service_timeout_s=60) as c:
            futures = c.submit_batch("count_eval", payloads(tmp_path, 50, sleep_ms=200))  # 10 s of work
            futures[0].result(timeout=30)
            t0 = time.monotonic()
            proc.send_signal(sig)
            results = c.gather(futures, timeout=15)
            took = time.monotonic() - t0
            assert proc.wait(60) == code
    finally:
        stop(proc)
    lost = [r for r in results if not r.ok]
    assert lost and all(r.error_kind == "service_lost" and "stopped" in r.error for r in lost), lost[:2]
    assert all(r.score == float(i) for i, r in enumerate(results) if r.ok)
    assert took < 10, f"the client's futures resolved {took:.1f} s after the signal"


def test_chaos_link_cuts(tmp_path):
    """The chaos row, small: repeated random cuts; nothing lost, nothing hung, paid once."""
    o = link_cuts(tmp_path, 400, cuts=3)
    assert o.detail["hung"] == 0 and o.lost == 0 and o.paid_twice == 0, o.note


def test_results_evicted_from_a_full_ledger_are_asked_for_again(tmp_path):
    """A ledger too small to keep anything (1 byte): results sent while the link is cut are evicted; the
    client's next ping names its requests, the service says it no longer holds them, and the client resubmits
    them (the successful ones come back from the producer's cache, not paid again)."""
    from qworker.service.server import RewardService

    with Producer(local_workers=2, reward_modules=[TEST_REWARDS]) as p:
        svc = RewardService(p, listen="tcp://127.0.0.1:0", ledger_max_bytes=1).start()
        try:
            with Proxy(int(svc.endpoint.rsplit(":", 1)[1])) as proxy, Client(proxy.endpoint, service_timeout_s=SERVICE_TIMEOUT_S) as c:
                futures = c.submit_batch("count_eval", payloads(tmp_path, 40, sleep_ms=20))
                time.sleep(0.2)
                proxy.cut(2.0)
                results = c.gather(futures, timeout=2.0 + RESOLVE_WITHIN_S)
                resubmitted = c.resubmitted
            ledger = svc.ledger.snapshot()
        finally:
            svc.stop()
    check(results, 40)
    assert ledger["evicted"] >= 1 and resubmitted >= 1, (ledger, resubmitted)
    assert max(evaluations(tmp_path / "evals").values()) == 1
