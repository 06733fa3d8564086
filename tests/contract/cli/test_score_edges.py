"""``qworker score``'s edge cases: stdin/stdout, empty input, bad lines, every task failing, what the summary's
mean is over, the progress line, and --overwrite/--refresh/--no-cache doing what they say (real processes)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import console_script


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def score(*args: str, stdin: str | None = None):
    return subprocess.run([console_script("qworker"), "score", *args, "--workers", "1"], capture_output=True, text=True,
                          timeout=120, input=stdin)


ROWS = ['{"response": "#### 1", "ground_truth": "1"}', '{"response": "#### 2", "ground_truth": "3"}']


def test_dash_reads_stdin_and_writes_stdout():
    res = score("-", "--reward", "gsm8k", "--out", "-", stdin="\n".join(ROWS) + "\n")
    assert res.returncode == 0, res.stderr
    rows = sorted((json.loads(line) for line in res.stdout.splitlines()), key=lambda r: r["line"])
    assert [(r["line"], r["score"]) for r in rows] == [(1, 1.0), (2, 0.0)]
    assert "-> -" in res.stderr


def test_an_empty_input_writes_an_empty_output(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n")
    res = score(str(src), "--reward", "gsm8k", "--out", str(out))
    assert res.returncode == 0 and out.exists() and out.read_text() == ""
    assert "has 0 rows" in res.stderr


def test_bad_lines_fail_naming_the_line_or_are_skipped_up_to_a_count(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(f"{ROWS[0]}\nnot json\n{ROWS[1]}\n{{broken\n")
    res = score(str(src), "--reward", "gsm8k", "--out", str(out))
    assert res.returncode == 2 and f"{src}:2: not valid JSON" in res.stderr and "--skip-bad-lines" in res.stderr
    res = score(str(src), "--reward", "gsm8k", "--out", str(out), "--skip-bad-lines", "1")
    assert res.returncode == 2 and f"{src}:4:" in res.stderr and "more than --skip-bad-lines 1" in res.stderr
    res = score(str(src), "--reward", "gsm8k", "--out", str(out), "--skip-bad-lines", "2")
    assert res.returncode == 0, res.stderr
    assert f"skipped {src}:2" in res.stderr and f"skipped {src}:4" in res.stderr
    assert [json.loads(line)["line"] for line in out.read_text().splitlines()] == [1, 3]


def test_every_task_failing_exits_1_and_the_mean_says_what_it_is_over(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"response": 5}\n{"response": 6}\n')
    res = score(str(src), "--reward", "gsm8k", "--out", str(out))
    assert res.returncode == 1 and "failed 2" in res.stderr and "no successful rows: no mean score" in res.stderr
    src.write_text(f"{ROWS[0]}\n{{\"response\": 5}}\n{ROWS[1]}\n")
    res = score(str(src), "--reward", "gsm8k", "--out", str(out), "--overwrite")
    assert res.returncode == 0 and "failed 1  mean score 0.5000 over the 2 successful rows" in res.stderr


def test_the_progress_line_has_failures_and_an_eta(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join([ROWS[0], '{"response": 5}'] * 20) + "\n")
    res = score(str(src), "--reward", "gsm8k", "--out", str(out), "--no-cache")
    progress = [line for line in res.stderr.splitlines() if line.startswith("40/40")]
    assert progress and "failed 20" in progress[-1] and "ETA 0:00" in progress[-1]


def test_overwrite_and_refresh_recompute_and_no_cache_skips_the_cache(tmp_path):
    src, out, cache = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "c.sqlite"
    src.write_text("\n".join(ROWS) + "\n")
    base = (str(src), "--reward", "gsm8k", "--out", str(out), "--cache", str(cache))
    assert "evaluated 2  duplicates 0  cache hits 0" in score(*base).stderr
    assert "evaluated 2  duplicates 0  cache hits 0" in score(*base, "--overwrite").stderr  # recomputed, not read
    out.unlink()
    assert "evaluated 0  duplicates 0  cache hits 2" in score(*base).stderr  # the cache still holds the results
    out.unlink()
    assert "evaluated 2  duplicates 0  cache hits 0" in score(*base, "--refresh").stderr
    out.unlink()
    nocache = (str(src), "--reward", "gsm8k", "--out", str(out), "--no-cache")
    assert "evaluated 2" in score(*nocache).stderr
    out.unlink()
    assert "evaluated 2" in score(*nocache).stderr
