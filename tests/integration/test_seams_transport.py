"""Seams between producer and workers, with real processes: big results, and CURVE allow-lists that change."""

from __future__ import annotations

from qworker import Producer
from tests.conftest import TEST_REWARDS

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
