"""The judge seam: a 2 s outage, hostile headers and giant answers, through real worker processes.

Recovery is measured from the judge's side (when its answers went out) with a
generous bound; the simulator (tests/contract/judge/test_outage.py) holds the tight one.
"""

from __future__ import annotations

import logging

import pytest

from qworker import Producer
from qworker.judge.client.http import MAX_BODY_BYTES
from qworker.testing import MockJudge
from tests.chaos_scenarios.seams_judge import HOSTILE_HEADERS, hostile_judge, judge_outage


def judge_config(url: str, **params) -> dict:
    return {"rewards": {"llm_judge": {"model": "m", "endpoints": [{"url": url}], "timeout_s": 10, **params}}}


def rows(n: int, tag: str) -> list[dict]:
    return [{"prompt": f"q{tag}{i}", "response": f"a{i}", "ground_truth": "g"} for i in range(n)]


@pytest.mark.parametrize("how", ["503", "refuse"])
def test_a_two_second_judge_outage_fails_nothing_and_throughput_comes_back(tmp_path, how):
    o = judge_outage(tmp_path, 2000, how)
    assert o.lost == 0 and o.innocent == 0, [r.error for r in o.detail["failed"][:3]]
    assert (o.paid_twice or 0) <= o.paid_twice_bound, o.note
    assert o.recovery_s is not None and o.recovery_s <= 20.0, o.note  # the target is 10 s; a loaded machine gets slack


def test_hostile_headers_on_every_reply_are_answers_and_are_reported_once_per_header(caplog):
    m = MockJudge(capacity=16, latency_s=0.01).start()
    m.hostile(HOSTILE_HEADERS)
    try:
        caplog.set_level(logging.WARNING, logger="qworker")
        with Producer(local_workers=1, config=judge_config(m.url)) as p:
            results = p.map("llm_judge", rows(300, "hostile"), timeout=90)
    finally:
        m.stop()
    assert all(r.ok for r in results), next(r.error for r in results if not r.ok)
    warned = [r.getMessage() for r in caplog.records if "not a believable value" in r.getMessage()]
    assert sorted(w.split(" sent ")[1].split(":")[0] for w in warned) == sorted(HOSTILE_HEADERS), warned


def test_a_giant_answer_fails_its_task_naming_the_cap_and_no_other():
    m = MockJudge(capacity=16, latency_s=0.01).start()
    m.giant(1, MAX_BODY_BYTES + 4096)
    try:
        with Producer(local_workers=1, config=judge_config(m.url)) as p:
            results = p.map("llm_judge", rows(100, "giant"), timeout=90)
    finally:
        m.stop()
    failed = [r for r in results if not r.ok]
    assert len(failed) == 1 and str(MAX_BODY_BYTES) in failed[0].error and "not retried" in failed[0].error
    assert m.stats["served"] == 100  # the giant one was not sent again


def test_hostile_headers_giant_answers_and_an_outage_interleaved(tmp_path):
    o = hostile_judge(tmp_path, 1500)
    assert o.ok, (o.note, [r.error for r in o.detail["failed"][:3]])
