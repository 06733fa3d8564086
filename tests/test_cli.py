"""``qworker score`` and ``qworker-pool`` as a user runs them."""

import json
import subprocess

from tests.conftest import REPO, console_script

EXAMPLE = REPO / "examples" / "gsm8k_rollouts.jsonl"


def run(*args, timeout=120):
    return subprocess.run([console_script("qworker"), *args], capture_output=True, text=True, timeout=timeout)


def test_score_the_bundled_example_end_to_end(tmp_path):
    out = tmp_path / "scores.jsonl"
    cache = tmp_path / "cache.sqlite"
    first = run("score", str(EXAMPLE), "--reward", "gsm8k", "--out", str(out), "--workers", "2", "--cache", str(cache))
    assert first.returncode == 0, first.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    inputs = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    assert [r["input"] for r in rows] == inputs
    assert all(r["error"] is None for r in rows)
    assert [r["score"] for r in rows] == [i["extra_info"]["expected"] for i in inputs]
    distinct = len({json.dumps(i, sort_keys=True) for i in inputs})
    assert f"scored {len(inputs)} tasks" in first.stderr
    assert f"evaluated {distinct}  duplicates {len(inputs) - distinct}  cache hits 0" in first.stderr
    second = run("score", str(EXAMPLE), "--reward", "gsm8k", "--out", str(out), "--workers", "1", "--cache", str(cache))
    assert second.returncode == 0, second.stderr
    assert f"evaluated 0  duplicates {len(inputs) - distinct}  cache hits {len(inputs)}" in second.stderr


def test_score_reports_failures_and_strict_fails(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "#### 1", "ground_truth": "1"}\n{"response": 5}\n')
    out = tmp_path / "out.jsonl"
    res = run("score", str(src), "--reward", "gsm8k", "--out", str(out), "--workers", "1", "--strict")
    assert res.returncode == 1
    assert "failed 1" in res.stderr and "reward_error 1" in res.stderr and "needs a string 'response'" in res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["score"] == 1.0 and rows[1]["error"].startswith("reward_error")


def test_score_names_a_broken_input_line(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "ok"}\n{not json\n')
    res = run("score", str(src), "--reward", "gsm8k", "--out", str(tmp_path / "o.jsonl"))
    assert res.returncode == 2 and f"{src}:2: not valid JSON" in res.stderr


def test_score_refuses_a_broken_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("producer:\n  workers: 2\n")
    res = run("score", str(EXAMPLE), "--reward", "gsm8k", "--out", str(tmp_path / "o.jsonl"), "--config", str(cfg))
    assert res.returncode == 2 and "unknown key 'workers'" in res.stderr


def test_pool_refuses_to_start_without_an_endpoint(tmp_path):
    res = subprocess.run([console_script("qworker-pool"), "--workers", "1"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "no producer endpoint" in res.stderr
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pool:\n  connect: tcp://127.0.0.1:1\n  wrokers: 2\n")
    res = subprocess.run([console_script("qworker-pool"), "--config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "unknown key 'wrokers'" in res.stderr
