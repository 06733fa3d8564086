"""``code_tests`` runs real child processes here: the sandbox is what is tested."""

from __future__ import annotations

import json
import os
import tempfile
import time

import psutil
import pytest

from qworker.rewards.code_tests import code_tests, extract_code, load_tests

FAST = {"timeout_s": 2, "cpu_s": 2}


def score(code: str, tests, **params):
    return code_tests({"response": code, "ground_truth": tests}, **{**FAST, **params})


def sandbox_processes(root: str) -> list[psutil.Process]:
    """Processes whose working directory is (or was) a sandbox's temporary directory under ``root``.

    Only under ``root`` (the test's own temporary directory): another test run on the
    same machine (a second ``make test`` beside this one) has sandboxes of its own.
    """
    out = []
    for p in psutil.process_iter():
        try:
            cwd = p.cwd()
            if cwd.startswith(root) and "qworker-code-" in cwd:
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


def test_stdin_stdout_cases_from_a_fenced_block():
    response = "Here:\n```python\nn = int(input())\nprint(n * 2)\n```\n"
    out = score(response, {"inputs": ["2\n", "5\n", "0\n"], "outputs": ["4\n", "10", "1"]})
    assert out == {"score": pytest.approx(2 / 3), "passed": 2, "total": 3, "code_found": True,
                   "first_failure": "case 2: wrong output '0\\n'"}


def test_asserts_and_all_or_nothing():
    tests = ["assert f(1) == 2", "assert f(2) == 4", "assert f(0) == 1"]
    out = score("def f(x):\n    return x + 1\n", tests)
    assert (out["passed"], out["total"]) == (2, 3)
    assert out["first_failure"].startswith("assert 1: AssertionError")
    assert score("def f(x):\n    return x + 1\n", tests, all_or_nothing=True)["score"] == 0.0


def test_ground_truth_as_a_json_string():
    tests = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
    assert score("a, b = map(int, input().split())\nprint(a + b)", tests)["score"] == 1.0


@pytest.mark.parametrize("exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)", "raise SystemExit"])
def test_exiting_early_passes_nothing(exit_call):
    out = score(f"{exit_call}\ndef f(): return 1\n", ["assert f() == 1"])
    assert out["passed"] == 0


def test_printing_fake_results_passes_nothing():
    code = "with open('.results', 'w') as fh:\n    fh.write('0 0\\n')\nprint('0 0')\nimport os; os._exit(0)\n"
    assert score(code, ["assert True"])["passed"] == 0


def test_environment_is_empty_and_cwd_is_fresh(monkeypatch):
    monkeypatch.setenv("JUDGE_API_KEY", "sk-secret-value")
    code = "import os\nprint(os.environ.get('JUDGE_API_KEY'))\nprint(sorted(os.listdir('.')))"
    out = score(code, {"inputs": [""], "outputs": ["None\n['.stderr', '.stdin', '.stdout', 'solution.py']"]})
    assert out["score"] == 1.0, out["first_failure"]


def test_infinite_loop_hits_the_wall_clock():
    t0 = time.monotonic()
    out = score("while True:\n    pass\n", ["assert True"], timeout_s=1)
    assert out["score"] == 0.0 and "timeout" in out["first_failure"]
    assert time.monotonic() - t0 < 10


def test_ten_gigabytes_is_refused():
    out = score("x = bytearray(10 * 1024**3)\n", ["assert True"])
    assert out["score"] == 0.0 and "MemoryError" in out["first_failure"]


def test_endless_output_is_capped():
    out = score("while True:\n    print('x' * 1000)\n", {"inputs": [""], "outputs": [""]})
    assert out["score"] == 0.0 and ("File too large" in out["first_failure"] or "output size" in out["first_failure"])


def test_forked_and_detached_children_are_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the sandbox's directory, so only ours are counted
    code = (
        "import os, time\n"
        "for _ in range(4):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"  # leaves the process group: only the subreaper sweep finds it
        "        if os.fork() == 0:\n"
        "            time.sleep(1000)\n"
        "        time.sleep(1000)\n"
        "time.sleep(1000)\n"
    )
    zombies_before = {c.pid for c in psutil.Process().children() if c.status() == psutil.STATUS_ZOMBIE}
    out = score(code, ["assert True"], timeout_s=1)
    assert out["score"] == 0.0
    assert sandbox_processes(str(tmp_path)) == []
    zombies = {c.pid for c in psutil.Process().children() if c.status() == psutil.STATUS_ZOMBIE}
    assert zombies <= zombies_before  # the escaped grandchildren were reaped too


def test_out_of_total_time_counts_the_rest_as_failed():
    out = score("import time\ntime.sleep(5)\n", {"inputs": ["", "", ""], "outputs": ["", "", ""]}, timeout_s=0.5, max_total_s=1.2)
    assert out["passed"] == 0 and out["total"] == 3


def test_extract_code_takes_the_last_block():
    assert extract_code("```py\na=1\n```\ntext\n```python\nb=2\n```") == ("b=2\n", True)
    assert extract_code("print(1)") == ("print(1)", False)


@pytest.mark.parametrize(
    "gt", [{"inputs": ["1"], "outputs": []}, {"asserts": []}, {"asserts": [1]}, "not json", 5, {"other": 1}]
)
def test_bad_tests_are_named(gt):
    with pytest.raises(ValueError, match="code_tests"):
        load_tests(gt)


def test_never_runs_in_the_worker_process(tmp_path):
    marker = tmp_path / "pid"
    score(f"import os\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n", ["assert True"])
    assert int(marker.read_text()) != os.getpid()
