"""Seams between producer and workers, with real processes: big results, and CURVE allow-lists that change."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from qworker import Producer
from qworker.transport.security import create_keys
from tests.conftest import TEST_REWARDS, console_script

MiB = 1024 * 1024


def quarantined(status: dict) -> list[str]:
    return [w["worker"] for pl in status["pools"] for w in pl["workers"] if w["quarantined"]]


def test_many_big_results_all_arrive_and_no_worker_is_quarantined():
    # 40 results of 300 KB: 12 MB in all, three times the 4 MiB frame limit, from one worker.
    with Producer(local_workers=1, reward_modules=[TEST_REWARDS], max_message_bytes=4 * MiB, heartbeat_s=0.3) as p:
        results = p.map("big_extra", [{"i": i, "bytes": 300_000} for i in range(40)], timeout=120)
        status = p.status()
    assert [r.score for r in results] == [float(i) for i in range(40)]
    assert all(r.ok and r.extra["blob"] == bytes([i]) * 300_000 for i, r in enumerate(results))
    assert not quarantined(status) and status["producer"]["redelivered"] == 0


def test_one_result_over_the_frame_limit_fails_alone_as_bad_result():
    payloads = [{"i": i, "bytes": 1000} for i in range(20)]
    payloads[7]["bytes"] = 6 * MiB
    payloads[12]["bytes"] = 3 * MiB  # under the limit: it travels alone, and arrives
    with Producer(local_workers=1, reward_modules=[TEST_REWARDS], max_message_bytes=4 * MiB, heartbeat_s=0.3) as p:
        results = p.map("big_extra", payloads, timeout=120)
        after = p.map("big_extra", [{"i": i, "bytes": 10} for i in range(100, 110)], timeout=60)
        status = p.status()
    bad = results[7]
    assert bad.error_kind == "bad_result" and f"{4 * MiB}-byte message limit" in bad.error and bad.attempts == 1, bad.error
    size = int(bad.error.split("the result is ")[1].split(" bytes")[0])
    assert 6 * MiB < size < 6 * MiB + 1000
    assert all(r.ok and r.score == float(i) for i, r in enumerate(results) if i != 7)
    assert len(results[12].extra["blob"]) == 3 * MiB
    assert all(r.ok for r in after)
    assert not quarantined(status) and status["producer"]["redelivered"] == 0


@pytest.fixture
def keys(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    out = {name: create_keys(str(tmp_path / name), name) for name in ("producer", "a", "b", "late")}  # (public, secret)
    for name in ("a", "b"):
        shutil.copy(out[name][0], allowed)
    out["allowed"] = str(allowed)
    return out


def curve_pool(endpoint: str, pool_id: str, keys: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [console_script("qworker-pool"), "--connect", endpoint, "--workers", "1", "--id", pool_id, "--reward-modules", TEST_REWARDS,
         "--heartbeat", "0.3", "--curve-secret-key", keys[pool_id][1], "--curve-server-key", keys["producer"][0]],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def wait_until(cond, timeout: float, what: str) -> float:
    """Seconds until ``cond()`` held (a test-side wait with a generous bound)."""
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, f"not within {timeout} s: {what}"
        time.sleep(0.05)
    return time.monotonic() - t0


def pools_in(p: Producer) -> set[str]:
    return {pl["pool"] for pl in p.status()["pools"] if any(w["alive"] for w in pl["workers"])}


def test_a_revoked_key_stops_being_served_and_its_tasks_go_to_an_allowed_pool(keys, tmp_path):
    log = str(tmp_path / "evals")
    producer_pub, producer_sec = keys["producer"]
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0, curve_secret_key=producer_sec, curve_allowed_keys=keys["allowed"],
                  heartbeat_s=0.3) as p:
        pools = [curve_pool(p.endpoint, name, keys) for name in ("a", "b")]
        try:
            p.wait_for_workers(2, timeout=30)
            futures = p.submit_batch("count_eval", [{"log": log, "i": i, "sleep_ms": 100} for i in range(60)])
            wait_until(lambda: any(f.done() and f.result().worker.startswith("a/") for f in futures)
                       and p.status()["producer"]["in_flight"] >= 2, 60, "pool a has served, and both pools are busy")
            os.remove(os.path.join(keys["allowed"], "a.key"))
            took = wait_until(lambda: pools_in(p) == {"b"}, 30, "pool a is no longer served")
            results = p.gather(futures, timeout=120)
            status = p.status()
            after = p.map("count_eval", [{"log": log, "i": i} for i in range(100, 120)], timeout=60)
        finally:
            for proc in pools:
                stop(proc)
    assert all(r.ok for r in results) and [r.score for r in results] == [float(i) for i in range(60)]
    assert status["producer"]["redelivered"] > 0  # what pool a held went to pool b
    assert any(r.worker.startswith("a/") for r in results) and any(r.worker.startswith("b/") for r in results)
    assert all(r.ok and r.worker.startswith("b/") for r in after)
    print(f"pool a dropped {took:.1f} s after its key was removed")


def test_a_key_added_after_start_is_admitted_without_a_restart(keys):
    producer_pub, producer_sec = keys["producer"]
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0, curve_secret_key=producer_sec, curve_allowed_keys=keys["allowed"],
                  heartbeat_s=0.3) as p:
        late = curve_pool(p.endpoint, "late", keys)
        try:
            time.sleep(1.5)  # it tries, and is refused
            assert not pools_in(p)
            shutil.copy(keys["late"][0], keys["allowed"])
            t0 = time.monotonic()
            p.wait_for_workers(1, timeout=30)
            took = time.monotonic() - t0
            results = p.map("count_eval", [{"log": os.devnull, "i": i} for i in range(20)], timeout=60)
        finally:
            stop(late)
    assert all(r.ok and r.worker.startswith("late/") for r in results)
    print(f"pool late admitted {took:.1f} s after its key was added")


def test_the_big_results_chaos_scenario_loses_nothing_and_fails_only_the_over_limit_ones(tmp_path):
    from tests.chaos_scenarios.seams_transport import big_results

    out = big_results(tmp_path, 50)
    assert out.ok, out
    assert len(out.detail["over_limit"]) == 2 and not out.detail["quarantined"]
