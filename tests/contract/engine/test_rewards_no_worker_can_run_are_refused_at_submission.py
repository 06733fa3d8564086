"""Rewards no worker could run are refused at submission, naming the fix."""

from __future__ import annotations

import subprocess
import sys

import pytest

from qworker import Producer, RewardError

INTERACTIVE = '''
from qworker import Producer, RewardError, reward
@reward("t_origin_repl")
def f(payload):
    return 1.0
with Producer(local_workers=1) as p:
    try:
        p.submit("t_origin_repl", {"x": 1})
        print("NOT REFUSED")
    except RewardError as exc:
        print("REFUSED", exc)
'''

UNGUARDED = '''
import sys
from qworker import Producer, reward

@reward("t_origin_unguarded")
def r(payload):
    return 1.0

p = Producer(local_workers=2, reward_modules=[__file__])
with open(sys.argv[1], "a") as f:
    f.write("started\\n")
print("scores", [x.score for x in p.map("t_origin_unguarded", [{"i": i} for i in range(4)], timeout=60)])
p.close()
'''


def test_an_unknown_reward_raises_at_submission_with_a_suggestion():
    with Producer(local_workers=1) as p:
        with pytest.raises(RewardError, match=r"'mth' is not a known reward; known rewards: .* \(did you mean 'math'\?\)"):
            p.submit("mth", {"response": "1", "ground_truth": "1"})
        with pytest.raises(RewardError, match="'nosuch' is not a known reward"):
            p.submit_batch("nosuch", [{}])


@pytest.mark.parametrize("how", ["-c", "stdin"])
def test_a_reward_defined_where_workers_cannot_import_it_is_refused_naming_the_fix(how):
    args = [sys.executable, "-c", INTERACTIVE] if how == "-c" else [sys.executable, "-"]
    done = subprocess.run(args, input=None if how == "-c" else INTERACTIVE, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "REFUSED" in done.stdout and "reward_modules" in done.stdout, done.stdout


def test_a_script_without_the_main_guard_starts_no_pool_in_its_workers(tmp_path):
    script, marks = tmp_path / "unguarded.py", tmp_path / "started"
    script.write_text(UNGUARDED)
    done = subprocess.run([sys.executable, str(script), str(marks)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "scores [1.0, 1.0, 1.0, 1.0]" in done.stdout
    assert marks.read_text().count("started") == 1  # the workers' imports stopped at Producer(), naming the guard
    assert "if __name__ == \"__main__\"" in done.stderr
