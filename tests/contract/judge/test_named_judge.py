"""A judge of the config's ``judges:`` section, named by a reward, through a real producer, workers and mock judge;
and a bad ``judges:`` entry stopping a real ``qworker score`` at start."""

from __future__ import annotations

import subprocess

import yaml

from qworker import Producer
from qworker.testing import MockJudge
from tests.conftest import console_script


def rows(n: int) -> list[dict]:
    return [{"prompt": f"q{i}", "response": f"a{i}", "ground_truth": "g"} for i in range(n)]


def test_a_reward_naming_a_judge_is_scored_by_it_and_the_inline_spelling_hits_the_same_cached_judgements():
    m = MockJudge(capacity=8, latency_s=0.01).start()
    judge = {"model": "m", "endpoints": [{"url": m.url, "max_concurrency": 4}], "timeout_s": 10, "coordinate": False}
    config = {"judges": {"mock": judge},
              "rewards": {"named": {"reward": "llm_judge", "params": {"judge": "mock", "rubric": "r"}},
                          "inline": {"reward": "llm_judge", "params": {**judge, "rubric": "r"}}}}
    try:
        with Producer(local_workers=1, config=config) as p:
            named = p.map("named", rows(30), timeout=120)
            inline = p.map("inline", rows(30), timeout=120)
            status = p.status()["judges"]
        assert all(r.ok for r in named), next(r.error for r in named if not r.ok)
        assert m.stats["served"] == 30 and m.stats["max_in_flight"] <= 4  # the named judge's endpoint and its cap
        assert all(r.cached for r in inline) and [r.key for r in inline] == [r.key for r in named]
        assert len(status) == 1 and status[0]["model"] == "m"
    finally:
        m.stop()


def test_a_bad_judges_entry_stops_qworker_score_at_start_in_one_line(tmp_path):
    config = tmp_path / "judge.yaml"
    config.write_text(yaml.safe_dump({"judges": {"mock": {"model": "m", "endpoints": [{"url": "http://127.0.0.1:9"}], "timeot_s": 5}},
                                      "rewards": {"llm_judge": {"judge": "mock"}}}))
    src = tmp_path / "in.jsonl"
    src.write_text('{"prompt": "q", "response": "a", "ground_truth": "g"}\n')
    done = subprocess.run([console_script("qworker"), "score", str(src), "--reward", "llm_judge", "--config", str(config),
                           "--out", str(tmp_path / "o.jsonl"), "--workers", "1"], capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{config}: judges.mock: unknown key 'timeot_s'" in lines[0] and "timeout_s" in lines[0]
    assert not (tmp_path / "o.jsonl").exists()
