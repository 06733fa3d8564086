"""``qworker score | cache | status`` and ``qworker-pool`` as a user runs them (real processes)."""

import json
import os
import signal
import subprocess
import time

import pytest

from qworker import Producer
from tests.conftest import REPO, TEST_REWARDS, console_script, count_lines

EXAMPLE = REPO / "examples" / "gsm8k_rollouts.jsonl"


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path, monkeypatch):
    # the persistent cache is on by default: keep it out of the user's ~/.cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def run(*args, timeout=120):
    return subprocess.run([console_script("qworker"), *args], capture_output=True, text=True, timeout=timeout)


def rows_of(path):
    return [json.loads(line) for line in open(path)]


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
    again = ("score", str(EXAMPLE), "--reward", "gsm8k", "--out", str(out), "--workers", "1", "--cache", str(cache))
    second = run(*again, "--overwrite")  # recomputes every row (the cache is not read, and is written again)
    assert second.returncode == 0, second.stderr
    assert f"evaluated {distinct}  duplicates {len(inputs) - distinct}  cache hits 0" in second.stderr
    out.unlink()
    from_cache = run(*again)
    assert f"evaluated 0  duplicates {len(inputs) - distinct}  cache hits {len(inputs)}" in from_cache.stderr
    third = run(*again)  # everything is in --out already: nothing to do, no workers started
    assert third.returncode == 0 and f"all {len(inputs)} rows" in third.stderr and "already scored" in third.stderr
    assert [r["line"] for r in rows_of(out)] == list(range(1, len(inputs) + 1))


def test_the_cache_persists_by_default_in_the_user_cache_dir(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "#### 1", "ground_truth": "1"}\n')
    out = tmp_path / "o.jsonl"
    assert run("score", str(src), "--reward", "gsm8k", "--out", str(out), "--workers", "1").returncode == 0
    default = tmp_path / "xdg" / "qworker" / "results.sqlite"
    assert default.exists()
    out.unlink()
    res = run("score", str(src), "--reward", "gsm8k", "--out", str(out), "--workers", "1")
    assert "evaluated 0" in res.stderr and "cache hits 1" in res.stderr
    res = run("score", str(src), "--reward", "gsm8k", "--out", str(out), "--workers", "1", "--overwrite", "--no-cache")
    assert "evaluated 1" in res.stderr and "cache hits 0" in res.stderr
    stats = run("cache", "stats", "--json")
    assert stats.returncode == 0 and json.loads(stats.stdout)["rewards"]["gsm8k"]["rows"] == 1


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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "/no/such/dir/o.jsonl"], "directory /no/such/dir does not exist"),
        (["--params", '{"format_score": 0.1'], "--params is not valid JSON"),
        (["--params", "[1]"], "--params must be a JSON object"),
        (["--params", '{"format_scor": 0.1}'], "unknown param 'format_scor' for reward 'gsm8k'; it takes: format_score, score"),
        (["--reward", "gsm9k"], "'gsm9k' is not a known reward; known rewards: code_tests"),
        (["--reward", "qworker.rewards.gsm8k:nothing_here"], "does not import here"),
        (["--input", "/no/such/in.jsonl"], "/no/such/in.jsonl: No such file or directory"),
    ],
)
def test_arguments_are_checked_before_scoring(tmp_path, args, message):
    opts = {"--reward": "gsm8k", "--out": str(tmp_path / "o.jsonl"), "--input": str(EXAMPLE)}
    rest = []
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in opts:
            opts[flag] = value
        else:
            rest += [flag, value]
    started = time.monotonic()
    res = run("score", opts.pop("--input"), *[x for kv in opts.items() for x in kv], *rest)
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "o.jsonl").exists()
    assert time.monotonic() - started < 30  # no pool was started and left to time out


def test_config_mistakes_fail_at_start(tmp_path):
    for section, message in [
        ("  math: {format_bonu: 0.1}\n", "rewards.math: unknown param 'format_bonu' for reward 'math'"),
        ("  mth: {strict: true}\n", "rewards.mth: 'mth' is not a known reward"),
        ("  s:\n    componets: [{reward: math}]\n", "'componets' -> 'components'"),
    ]:
        cfg = tmp_path / "c.yaml"
        cfg.write_text("rewards:\n" + section)
        res = run("score", str(EXAMPLE), "--reward", "gsm8k", "--out", str(tmp_path / "o.jsonl"), "--config", str(cfg))
        assert res.returncode == 2 and message in res.stderr, res.stderr


def _slow_input(path, n, log, ms=20):
    path.write_text("".join(json.dumps({"log": str(log), "i": i, "sleep_ms": ms}) + "\n" for i in range(n)))


def test_ctrl_c_keeps_every_finished_row_and_the_rerun_resumes(tmp_path):
    src, out, log, cache = tmp_path / "in.jsonl", tmp_path / "o.jsonl", tmp_path / "evals.log", tmp_path / "c.sqlite"
    n = 300
    _slow_input(src, n, log)
    cmd = [console_script("qworker"), "score", str(src), "--reward", "count_eval", "--rewards", TEST_REWARDS,
           "--out", str(out), "--workers", "2", "--cache", str(cache)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while count_lines(out) < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted (SIGINT)" in err and "Run the same command again to resume" in err
    first = rows_of(out)  # every line is a whole row
    assert 40 <= len(first) < n and all(r["error"] is None and r["score"] == r["input"]["i"] for r in first)

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"resuming {out}: {len(first)} of {n} rows already scored" in again.stderr
    rows = rows_of(out)
    assert [r["line"] for r in rows] == list(range(1, n + 1)) and [r["score"] for r in rows] == list(range(n))
    # nothing paid twice: rows finished while stopping were cached, the rest were never started
    assert count_lines(log) == n


def test_resume_skips_scored_lines_and_refuses_another_reward(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "o.jsonl"
    src.write_text('{"response": "#### 1", "ground_truth": "1"}\n\n{"response": "#### 2", "ground_truth": "3"}\n{"response": 5}\n')
    assert run("score", str(src), "--reward", "gsm8k", "--out", str(out), "--workers", "1").returncode == 0
    rows = rows_of(out)
    assert [r["line"] for r in rows] == [1, 3, 4] and rows[2]["error"]
    # a torn last line, as a crash leaves it, and an input that changed since: both scored again
    rows[1]["input"] = {"response": "#### 9", "ground_truth": "3"}
    out.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"line": 4, "inp')
    res = run("score", str(src), "--reward", "gsm8k", "--out", str(out), "--workers", "1", "--no-cache")
    assert "1 of 3 rows already scored" in res.stderr and "scored 2 tasks" in res.stderr  # line 4 failed: again
    assert [r["line"] for r in rows_of(out)] == [1, 3, 4] and rows_of(out)[1]["input"]["response"] == "#### 2"
    res = run("score", str(src), "--reward", "format", "--out", str(out))
    assert res.returncode == 2 and "holds rows scored with --reward 'gsm8k'" in res.stderr


def test_cache_stats_and_clear_one_reward(tmp_path):
    cache = tmp_path / "c.sqlite"
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "<think>a</think><answer>#### 1</answer>", "ground_truth": "1"}\n')
    for reward in ("gsm8k", "format"):
        res = run("score", str(src), "--reward", reward, "--out", str(tmp_path / f"{reward}.jsonl"), "--workers", "1", "--cache", str(cache))
        assert res.returncode == 0, res.stderr
    stats = run("cache", "stats", "--cache", str(cache))
    assert stats.returncode == 0 and "2 rows" in stats.stdout and "gsm8k" in stats.stdout and "format" in stats.stdout
    cleared = run("cache", "clear", "--reward", "gsm8k", "--cache", str(cache))
    assert cleared.returncode == 0 and "deleted 1 rows of reward 'gsm8k'" in cleared.stdout
    assert set(json.loads(run("cache", "stats", "--json", "--cache", str(cache)).stdout)["rewards"]) == {"format"}
    assert "deleted 1 rows from" in run("cache", "clear", "--cache", str(cache)).stdout
    missing = run("cache", "stats", "--cache", str(tmp_path / "none.sqlite"))
    assert missing.returncode == 1 and "no cache at" in missing.stderr and not (tmp_path / "none.sqlite").exists()


def test_a_reward_version_is_part_of_the_hash(tmp_path):
    mod, src, cache = tmp_path / "my_rewards.py", tmp_path / "in.jsonl", tmp_path / "c.sqlite"
    src.write_text('{"i": 1}\n{"i": 2}\n')

    def score_with(value, version):
        mod.write_text(f"from qworker import reward\n\n@reward('mine', version={version!r})\n"
                       f"def mine(payload):\n    return {value}\n")
        (tmp_path / "o.jsonl").unlink(missing_ok=True)  # a fresh --out: --overwrite would also bypass the cache
        res = run("score", str(src), "--reward", "mine", "--rewards", str(mod), "--out", str(tmp_path / "o.jsonl"),
                  "--workers", "1", "--cache", str(cache))
        assert res.returncode == 0, res.stderr
        return [r["score"] for r in rows_of(tmp_path / "o.jsonl")], "cache hits 2" in res.stderr

    assert score_with(1.0, "1") == ([1.0, 1.0], False)
    assert score_with(0.25, "1") == ([1.0, 1.0], True)  # code changed, version not: stale, as the README warns
    assert score_with(0.25, "2") == ([0.25, 0.25], False)


def test_status_json_is_one_document_with_several_producers():
    with Producer(local_workers=0) as a, Producer(local_workers=0) as b:
        res = run("status", "--json", timeout=60)
        assert res.returncode == 0, res.stderr
        found = json.loads(res.stdout)
        assert sorted(s["producer"]["endpoint"] for s in found) == sorted([a.endpoint, b.endpoint])
        one = json.loads(run("status", "--json", "--connect", a.endpoint).stdout)
        assert one["producer"]["endpoint"] == a.endpoint


def test_status_removes_notes_of_dead_producers():
    rt = os.environ["QWORKER_RUNTIME_DIR"]
    stale = os.path.join(rt, "producer-999999999-0.json")
    with open(stale, "w") as f:
        json.dump({"endpoint": "ipc:///nowhere", "pid": 999_999_999}, f)
    res = run("status", "--json")
    assert res.returncode == 1 and "no running producer" in res.stderr and not os.path.exists(stale)
    assert json.loads(res.stdout) == []


def test_human_status_shows_the_ledger_and_an_endpoint_shared_with_other_producers():
    from qworker.cli.main import format_status

    producer = {"endpoint": "ipc://x", "pid": 1, "host": "h", "uptime_s": 3, "submitted": 5, "resolved": 5, "failed": 0, "cache_hits": 0,
                "queued": 0, "in_flight": 0, "redelivered": 0, "dropped_frames": 0}
    ledger = {"clients": 2, "unacked": 3, "unacked_bytes": 3 * 2**20, "sent": 40, "resent": 7, "acked": 37, "evicted": 1,
              "dropped_rows": 0, "repeats": 0}
    endpoint = {"url": "http://judge/v1/chat/completions", "state": "up", "in_flight": 16, "limit": 64.0, "ok": 100, "status_429": 1,
                "timeouts": 0, "connect_errors": 0, "other_errors": 0, "latency_p50_s": 0.3, "latency_p99_s": 1.0,
                "other_producers": 1, "share": 32.0}
    status = {"producer": producer, "pools": [], "judges": [{"model": "m", "queued": 4, "endpoints": [endpoint]}],
              "service": {"endpoint": "tcp://127.0.0.1:5555", "clients": 2, "requests": 9, "http": None, "ledger": ledger}}
    text = format_status(status)  # type: ignore[arg-type]
    assert "results awaiting acknowledgement 3 (3.0 MiB)  sent 40  resent 7  acknowledged 37  evicted unacknowledged 1" in text
    assert "shared with 1 other producer(s) on this host: this one may hold 32 of the limit 64.0" in text
