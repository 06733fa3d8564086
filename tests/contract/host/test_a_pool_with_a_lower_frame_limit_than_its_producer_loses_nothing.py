"""A pool started with a lower ``--max-message-bytes`` than its producer's (or a higher one): libzmq drops a message
over a socket's MAXMSGSIZE unread, with the link, so each side must fit what it sends to the other's stated limit.
Tasks that together pass a pool's limit go in several messages, a task over it goes to a pool it fits or, once the
start-up grace (a heartbeat timeout after the first worker's Ready) is over, fails naming its size and the limit, and a result over the producer's limit fails as ``bad_result``; no worker is
quarantined and nothing waits for ever."""

from __future__ import annotations

import signal
import subprocess

from qworker import Producer
from tests.conftest import TEST_REWARDS, console_script

LOW = 65_536  # the lowest frame limit a process accepts


def start_pool(endpoint: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([console_script("qworker-pool"), "--connect", endpoint, "--rewards", TEST_REWARDS, *args],
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop(pool: subprocess.Popen) -> str:
    pool.send_signal(signal.SIGTERM)
    return pool.communicate(timeout=30)[1]


def quarantined(status: dict) -> list[str]:
    return [w["worker"] for pl in status["pools"] for w in pl["workers"] if w["quarantined"]]


def test_a_pool_under_the_producers_frame_limit_gets_batches_in_parts_and_a_task_over_it_fails_after_the_start_up_grace():
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0) as p:
        pool = start_pool(p.endpoint, "--workers", "1", "--id", "narrow", "--max-message-bytes", str(LOW))
        try:
            p.wait_for_workers(1, timeout=30)
            # 30 tasks of 20 kB: 600 kB, many times the pool's limit, and several under it per message
            parts = p.map("count_eval", [{"i": i, "log": "/dev/null", "pad": "x" * 20_000} for i in range(30)], timeout=30)
            big, small = p.map("gsm8k", [{"response": "#### 1" + " " * 200_000, "ground_truth": "1"},
                                         {"response": "#### 2", "ground_truth": "2"}], timeout=20)
            status = p.status()
        finally:
            err = stop(pool)
    assert [r.score for r in parts] == [float(i) for i in range(30)] and all(r.ok for r in parts)
    assert big.error_kind == "bad_payload" and f"{LOW}-byte message limit" in big.error and big.attempts == 0, big.error
    size = int(big.error.split("the task is ")[1].split(" bytes")[0])
    assert 200_000 < size < 201_000, big.error
    assert small.ok and small.score == 1.0
    assert not quarantined(status) and status["producer"]["redelivered"] == 0, status
    assert f"frame limit {LOW} bytes" in err, err  # the pool says its limit when it starts


def test_a_task_over_one_pools_frame_limit_goes_to_a_pool_it_fits():
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0) as p:
        narrow = start_pool(p.endpoint, "--workers", "1", "--id", "narrow", "--max-message-bytes", str(LOW))
        wide = start_pool(p.endpoint, "--workers", "1", "--id", "wide")
        try:
            p.wait_for_workers(2, timeout=30)
            payloads = [{"i": i, "log": "/dev/null", "pad": "x" * (200_000 if i % 2 else 10)} for i in range(20)]
            results = p.map("count_eval", payloads, timeout=30)
            status = p.status()
        finally:
            stop(narrow), stop(wide)
    assert [r.score for r in results] == [float(i) for i in range(20)] and all(r.ok for r in results)
    assert {r.worker.split("/")[0] for i, r in enumerate(results) if i % 2} == {"wide"}
    assert not quarantined(status) and status["producer"]["redelivered"] == 0, status


def test_a_result_over_the_producers_frame_limit_fails_as_bad_result_from_a_pool_of_a_higher_limit():
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0, max_message_bytes=LOW) as p:
        pool = start_pool(p.endpoint, "--workers", "1")  # its limit: the default, 64 MiB
        try:
            p.wait_for_workers(1, timeout=30)
            results = p.map("big_extra", [{"i": i, "bytes": 200_000 if i == 3 else 20_000} for i in range(10)], timeout=20)
            status = p.status()
        finally:
            stop(pool)
    bad = results[3]
    assert bad.error_kind == "bad_result" and f"{LOW}-byte message limit" in bad.error and bad.attempts == 1, bad.error
    assert all(r.ok and r.extra["blob"] == bytes([i]) * 20_000 for i, r in enumerate(results) if i != 3)
    assert not quarantined(status) and status["producer"]["redelivered"] == 0, status
