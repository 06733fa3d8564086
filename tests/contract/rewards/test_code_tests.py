"""``code_tests`` runs real child processes here: the sandbox is what is tested."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time

import psutil
import pytest

from qworker.rewards import _sandbox
from qworker.rewards.code_tests import code_tests, extract_code, load_tests
from tests.contract.rewards.code_worker import SECRET_NAME, CodeWorker

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


def test_never_runs_in_the_worker_process():
    out = score("import os\nprint(os.getpid())\n", {"inputs": [""], "outputs": ["not a pid"]})
    reported = out["first_failure"].split("wrong output ")[1]
    assert int(reported.strip("'").replace("\\n", "")) != os.getpid()


ADD_ASSERTS = {"asserts": ["assert add(2, 3) == 5", "assert add(1, 1) == 2", "assert add(0, 0) == 0"]}


def test_a_program_that_forges_the_harness_record_passes_no_assert():
    code = ("import sys, os; open('.results', 'a').write(''.join(f'{sys.argv[1]} {i}\\n' for i in range(int(sys.argv[2])))); "
            "os._exit(0)")
    out = score(code, ADD_ASSERTS)
    assert (out["score"], out["passed"]) == (0.0, 0)


def test_an_always_equal_object_passes_no_assert():
    out = score("class E:\n    def __eq__(self, o): return True\ndef add(a, b):\n    return E()\n", ADD_ASSERTS)
    assert (out["score"], out["passed"]) == (0.0, 0)
    assert "only builtin values" in out["first_failure"]


def test_the_worker_environment_is_unreadable_through_proc():
    secret = "sk-proc-environ-0123456789abcdef"
    worker = CodeWorker(secret=secret)
    try:
        code = (
            "import os\npid = os.getppid()\nfor _ in range(3):\n    try:\n"
            "        data = open(f'/proc/{pid}/environ', 'rb').read()\n"
            f"        hit = [kv for kv in data.split(b'\\0') if kv.startswith(b'{SECRET_NAME}=')]\n"
            "        if hit:\n            print(hit[0].split(b'=', 1)[1].decode()); break\n"
            "        pid = int(open(f'/proc/{pid}/stat').read().split(')')[1].split()[1])\n"
            "    except OSError:\n        break\n"
        )
        out = worker.score(code, {"inputs": [""], "outputs": [secret]})
    finally:
        worker.close()
    assert out["score"] == 0.0 and secret not in json.dumps(out)


def test_generated_code_cannot_connect_to_a_local_port():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')\n"
        out = score(code, {"inputs": [""], "outputs": ["connected"]})
        assert out["score"] == 0.0
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_generated_code_cannot_read_or_write_files_outside_its_directory(tmp_path):
    canary = tmp_path / "cache.sqlite"
    canary.write_text("canary-text")
    code = f"print(open({str(canary)!r}).read())\nopen({str(canary)!r}, 'a').write('planted')\n"
    out = score(code, {"inputs": [""], "outputs": ["canary-text"]})
    assert out["score"] == 0.0
    assert canary.read_text() == "canary-text"
    planted = tmp_path / "planted"
    out = score(f"open({str(planted)!r}, 'w').write('x')\nprint('wrote')\n", {"inputs": [""], "outputs": ["wrote"]})
    assert out["score"] == 0.0 and not planted.exists()


def test_asserts_that_cannot_be_split_fail_closed():
    code = "def add(a, b):\n    return a + b\n"
    out = score(code, ["assert all(add(i, i) == 2 * i for i in range(3))", "x = add(1, 1)\nassert x == 2",
                       "assert add(1, 2) == 3"])
    assert (out["passed"], out["total"]) == (1, 3)
    assert out["first_failure"] == "assert 0: GeneratorExp in an assert cannot be checked outside the program"


def test_common_assert_forms_are_judged_as_python_would():
    code = ("import math\ndef area(r):\n    return math.pi * r * r\ndef pair(n):\n    return (n, n + 1)\n"
            "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\ndef nothing():\n    return None\n")
    tests = [
        "assert math.isclose(area(2), 12.566, rel_tol=0.001)", "assert pair(1) == (1, 2)", "assert pair(1) != [1, 2]",
        "assert set(evens([4, 1, 2])) == set([2, 4])", "assert abs(area(1) - 3.14159) < 1e-4", "assert nothing() is None",
        "assert not evens([1, 3])", "assert evens([2])", "assert sorted(evens([4, 2]))[0] == 2", "assert len(evens(range(10))) == 5",
    ]
    out = score(code, tests)
    assert (out["passed"], out["total"]) == (10, 10), out["first_failure"]
    assert score(code, ["assert pair(1) == [1, 2]"])["passed"] == 0  # a tuple is not a list, as in Python


def test_a_subclass_of_a_builtin_is_compared_by_its_builtin_value_only():
    tricked = score("class I(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\n"
                    "def add(a, b):\n    return I(7)\n", ["assert add(2, 3) == 5"])
    assert tricked["passed"] == 0 and tricked["first_failure"] == "assert 0: AssertionError"
    code = ("from collections import Counter, OrderedDict, namedtuple\nP = namedtuple('P', 'x y')\n"
            "def count(s):\n    return Counter(s)\ndef pair():\n    return P(1, 2)\ndef od():\n    return OrderedDict(a=1)\n")
    out = score(code, ["assert count('aab') == {'a': 2, 'b': 1}", "assert pair() == (1, 2)", "assert od() == {'a': 1}"])
    assert out["passed"] == 3, out["first_failure"]



def test_nothing_of_one_run_reaches_the_next():
    write = "import json, sys\njson.planted = 1\nsys.modules['planted'] = json\nimport builtins\nbuiltins.planted = 1\nprint('ok')\n"
    read = "import json, sys, builtins\nprint(hasattr(json, 'planted'), 'planted' in sys.modules, hasattr(builtins, 'planted'))\n"
    assert score(write, {"inputs": [""], "outputs": ["ok"]})["score"] == 1.0
    assert score(read, {"inputs": [""], "outputs": ["False False False"]})["score"] == 1.0


def test_a_kernel_without_the_boundary_refuses_code_tests_with_the_fix_unless_opted_out(monkeypatch):
    problem = _sandbox.boundary_problem({"landlock_abi": 0, "seccomp": True})
    assert problem is not None and "lsm=" in problem and f"{_sandbox.ENV}=unconfined" in problem and "\n" not in problem
    monkeypatch.setattr(_sandbox, "boundary_problem", lambda info: problem)
    monkeypatch.delenv(_sandbox.ENV, raising=False)
    with pytest.raises(_sandbox.SandboxUnavailable, match="Landlock"):
        score("print(1)", {"inputs": [""], "outputs": ["1"]})
    monkeypatch.setenv(_sandbox.ENV, "unconfined")
    assert score("print(1)", {"inputs": [""], "outputs": ["1"]})["score"] == 1.0



CPP_SUM = ("```cpp\n#include <cstdio>\nint main() {\n    int n; long long s = 0, x;\n    if (scanf(\"%d\", &n) != 1) return 1;\n"
           "    for (int i = 0; i < n; i++) { scanf(\"%lld\", &x); s += x; }\n    printf(\"%lld\\n\", s);\n}\n```\n")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_cpp_program_is_compiled_in_the_sandbox_and_run_per_case():
    tests = {"inputs": ["3\n1 2 3\n", "2\n5 5\n", "1\n7\n"], "outputs": ["6\n", "10\n", "8\n"]}
    out = score(CPP_SUM, tests, language="cpp")
    assert (out["passed"], out["total"], out["first_failure"]) == (2, 3, "case 2: wrong output '7\\n'")
    assert score(CPP_SUM, tests, language="auto")["passed"] == 2
    broken = score("```cpp\nint main( { return 0 }\n```", tests, language="cpp")
    assert broken["score"] == 0.0 and broken["first_failure"].startswith("compile: ")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_cpp_program_can_neither_fork_nor_read_outside_its_directory(tmp_path):
    canary = tmp_path / "canary"
    canary.write_text("canary-text")
    code = ("```cpp\n#include <cstdio>\n#include <unistd.h>\nint main() {\n    char buf[64] = {0};\n"
            f"    FILE* f = fopen(\"{canary}\", \"r\");\n    if (f) fgets(buf, 63, f);\n"
            "    pid_t p = fork();\n    if (p == 0) _exit(0);\n    printf(\"%s %s\\n\", buf, p > 0 ? \"forked\" : \"no-fork\");\n}\n```\n")
    out = score(code, {"inputs": [""], "outputs": ["canary-text forked"]}, language="cpp")
    assert out["score"] == 0.0 and out["first_failure"] == "case 0: wrong output ' no-fork\\n'"


def test_cpp_takes_stdin_stdout_tests_only():
    with pytest.raises(ValueError, match="C\\+\\+ programs are judged by stdin/stdout"):
        score(CPP_SUM, ["assert True"], language="cpp")


SUM_CASE = {"inputs": ["3\n1 2 3\n"], "outputs": ["6\n"]}


@pytest.mark.parametrize("program", [
    "import sys\ninput = sys.stdin.readline\nn = int(input())\nprint(sum(map(int, input().split())))",
    "import sys, threading\nsys.setrecursionlimit(10**6)\nthreading.stack_size(2**26)\n"
    "def main():\n    n = int(input()); print(sum(map(int, input().split())))\nthreading.Thread(target=main).start()",
    "import sys\ndata = sys.stdin.buffer.read().split()\nprint(sum(map(int, data[1:])))",
    "import heapq, bisect, itertools, functools, math, re, fractions, decimal, random, collections\n"
    "n = int(input()); print(sum(map(int, input().split())))\nexit()",
    "def main():\n    n = int(input()); print(sum(map(int, input().split())))\nif __name__ == '__main__':\n    main()",
    "from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\nn = int(input()); print(P(sum(map(int, input().split()))).x)",
    "import sys\nn = int(input()); sys.stdout.write(str(sum(map(int, input().split()))) + '\\n'); sys.exit(0)",
], ids=["readline", "thread", "buffer", "stdlib-exit", "main-guard", "dataclass", "sys-exit"])
def test_common_program_forms_score_as_in_a_fresh_interpreter(program):
    out = score(program, SUM_CASE)
    assert out["score"] == 1.0, out["first_failure"]


def test_a_numpy_scalar_is_compared_by_its_python_value():
    pytest.importorskip("numpy")
    code = "import numpy as np\ndef f(x):\n    return np.int64(x) * 2\ndef g():\n    return np.array([1, 2])\n"
    out = score(code, ["assert f(2) == 4", "assert g() == [1, 2]"])
    assert out["passed"] == 1 and "returned a ndarray" in out["first_failure"]


def _memory_holds(pid: int, needle: bytes) -> bool:
    """Whether any readable mapping of process ``pid`` contains ``needle``."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            fields = line.split()
            if "r" not in fields[1] or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]")):
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(lo)
                if needle in mem.read(hi - lo):
                    return True
            except OSError:
                continue
    return False


def test_the_fork_server_never_holds_a_tasks_program_or_inputs():
    token = f"tok{os.urandom(8).hex()}"
    out = score(f"x = input()\nprint(x == {token + 'p'!r})\ndef f():\n    return {token + 'q'!r}\n",
                {"inputs": [token + "p\n"], "outputs": ["True"]})
    assert out["score"] == 1.0
    assert score(f"def f():\n    return {token + 'q'!r}\n", [f"assert f() == {token + 'q'!r}"])["score"] == 1.0
    server = _sandbox._server
    assert server is not None and server.owner == os.getpid()
    assert not _memory_holds(server.proc.pid, token.encode())


def test_the_worker_refuses_to_build_a_huge_value_a_program_asks_for():
    code = "def f():\n    return 10**9\n"
    out = score(code, ["assert 2 ** f() == 8", "assert 'a' * f() == 'aaa'", "assert 1 << f() == 2"])
    assert out["passed"] == 0 and out["first_failure"] == "assert 0: OverflowError: a power too large to evaluate"


def test_the_part_of_an_assert_the_worker_evaluates_has_no_attribute_access_or_method_call():
    out = score("def f():\n    return 1\n", ["assert ().__class__.__base__ is not None", "assert 'x'.upper() == 'X'",
                                              "assert math.factorial(f()) == 1", "assert math.isclose(f(), 1.0)"])
    assert (out["passed"], out["total"]) == (1, 4)
    assert out["first_failure"] == "assert 0: attribute '__base__' is not evaluated outside the program (only math's)"


def test_the_worker_refuses_a_huge_pow_or_range_a_program_asks_for():
    out = score("def f():\n    return 10**18\n", ["assert pow(2, f()) == 8", "assert sum(range(f())) == 0",
                                                  "assert pow(2, 3) == 8 and list(range(3)) == [0, 1, 2]"])
    assert (out["passed"], out["total"]) == (1, 3)
    assert out["first_failure"] == "assert 0: OverflowError: a power too large to evaluate"


def test_a_pool_on_a_kernel_without_the_boundary_says_so_once_at_start(monkeypatch, caplog):
    from qworker.host import pool as pool_module
    from qworker.rewards import _sandbox_child

    monkeypatch.delenv(_sandbox.ENV, raising=False)
    assert _sandbox.kernel_problem() is None  # this kernel has Landlock and seccomp
    monkeypatch.setattr(_sandbox_child, "landlock_abi", lambda: 0)
    problem = _sandbox.kernel_problem()
    assert problem is not None and "Landlock" in problem and "\n" not in problem
    # the pool says it before it supervises anything: stop it as soon as it has spawned its (here: no) workers
    monkeypatch.setattr(pool_module.Pool, "_spawn", lambda self, child: None)
    monkeypatch.setattr(pool_module.Pool, "_supervise", lambda self: None)
    monkeypatch.setattr(pool_module.Pool, "_drain", lambda self: None)
    from qworker.config.options import PoolOptions

    with caplog.at_level("WARNING", logger="qworker"):
        pool_module.Pool(PoolOptions(connect="tcp://127.0.0.1:9", workers=1)).run()
    lines = [r.getMessage() for r in caplog.records if "code_tests will refuse to run here" in r.getMessage()]
    assert len(lines) == 1 and problem in lines[0]
    monkeypatch.setenv(_sandbox.ENV, "unconfined")
    assert _sandbox.kernel_problem() is None


def test_the_worker_refuses_a_huge_set_or_bytes_a_program_hands_it():
    # a set of colliding ints is quadratic to build; bytes(f()) allocates what the program says: both in the worker
    from qworker.rewards._asserts import _SAFE_NAMES, PlainValueError, decode

    with pytest.raises(PlainValueError, match="more than 10,000 items"):
        decode(["set", [["i", hex(k * (2**61 - 1))] for k in range(20_000)]])
    assert decode(["fs", [["i", hex(k)] for k in range(100)]]) == frozenset(range(100))
    with pytest.raises(OverflowError, match="bytes object too large"):
        _SAFE_NAMES["bytes"](10**10)
    assert _SAFE_NAMES["bytes"](2) == b"\0\0"
