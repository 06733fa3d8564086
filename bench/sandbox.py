"""Code-sandbox benchmark: milliseconds per test case, warm fork server vs a fresh interpreter per case.

Three programs, each run as one test case per call:

* ``empty``: ``pass`` (the sandbox's own overhead);
* ``mbpp``: an MBPP-sized function (about 15 lines) and three asserts on it;
* ``apps``: an APPS-style stdin/stdout program that reads 1,000 numbers, sorts them and prints a summary.

Four systems, all run here in one process, one case at a time:

* ``today``: the previous ``code_tests`` path, a fresh ``python -I -B`` per case with rlimits set
  between fork and exec, a new session, output to files, asserts run in the same interpreter
  (re-implemented below);
* ``subprocess.run``: a plain ``subprocess.run([python, solution.py])`` per case, no limits;
* ``warm, no isolation``: the new fork server with rlimits only (``QWORKER_CODE_SANDBOX=unconfined``);
* ``warm, isolated``: the new fork server with the boundary (capabilities dropped, Landlock, seccomp).

Each cell is the median over ``--cases`` calls (5 times as many for the warm sandbox), after a
warm-up; cases/s is 1000 / median ms; CPU ms is the mean CPU time per case of every process
involved (this one, its children, the fork server and its children).

    python bench/sandbox.py               # 40 cases per cell (200 for the warm sandbox)
    python bench/sandbox.py --cases 100
    python bench/sandbox.py --table       # run the adversarial suite, print the README's table of its attempts
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import table  # noqa: E402

from qworker.rewards import _sandbox  # noqa: E402
from qworker.rewards._sandbox import Limits  # noqa: E402

MBPP = '''
def longest_run(xs):
    """Length of the longest run of equal neighbours."""
    if not xs:
        return 0
    best = cur = 1
    for a, b in zip(xs, xs[1:]):
        if a == b:
            cur += 1
            best = max(best, cur)
        else:
            cur = 1
    return best
'''
MBPP_ASSERTS = ["assert longest_run([1, 1, 2, 2, 2, 3]) == 3", "assert longest_run([]) == 0", "assert longest_run([5]) == 1"]
APPS = '''
import sys
def main():
    data = sys.stdin.read().split()
    n = int(data[0])
    xs = sorted(map(int, data[1:n + 1]))
    print(n, xs[0], xs[-1], sum(xs) % 1000003)
main()
'''
APPS_STDIN = "1000\n" + " ".join(str((i * 7919) % 10007) for i in range(1000)) + "\n"
PROGRAMS = {"empty": ("pass\n", "", None), "mbpp": (MBPP, "", MBPP_ASSERTS), "apps": (APPS, APPS_STDIN, None)}


def _today_limits(limits: Limits) -> Callable[[], None]:
    def apply() -> None:
        mem = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_bytes, limits.output_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def today(workdir: str, code: str, stdin: str, asserts: list[str] | None) -> None:
    """The previous per-case path: a fresh isolated interpreter, asserts appended in the same process."""
    script = code + "".join(f"\n{a}\n" for a in asserts or [])
    with open(os.path.join(workdir, "solution.py"), "w") as f:
        f.write(script)
    paths = {n: os.path.join(workdir, f".{n}") for n in ("stdin", "stdout", "stderr")}
    with open(paths["stdin"], "w") as f:
        f.write(stdin)
    with open(paths["stdin"], "rb") as fin, open(paths["stdout"], "wb") as fout, open(paths["stderr"], "wb") as ferr:
        proc = subprocess.Popen([sys.executable, "-I", "-B", "solution.py"], cwd=workdir, env={}, stdin=fin, stdout=fout,
                                stderr=ferr, start_new_session=True, preexec_fn=_today_limits(Limits()), close_fds=True)
        proc.wait(timeout=30)
    assert proc.returncode == 0, open(paths["stderr"]).read()


def plain(workdir: str, code: str, stdin: str, asserts: list[str] | None) -> None:
    with open(os.path.join(workdir, "solution.py"), "w") as f:
        f.write(code + "".join(f"\n{a}\n" for a in asserts or []))
    subprocess.run([sys.executable, "solution.py"], cwd=workdir, input=stdin, capture_output=True, text=True, check=True,
                   timeout=30)


def warm(isolate: bool) -> Callable[[str, str, str, list[str] | None], None]:
    def run(workdir: str, code: str, stdin: str, asserts: list[str] | None) -> None:
        with open(os.path.join(workdir, "solution.py"), "w") as f:
            f.write(code)
        probes = [a.split("assert ", 1)[1].split(" == ")[0] for a in asserts] if asserts else None
        r = _sandbox.run_python(workdir, stdin=stdin, limits=Limits(), probes=probes, isolate=isolate)
        assert r.returncode == 0, r.stderr
    return run


def cpu_s() -> float:
    """CPU seconds used so far by this process, its reaped children, and the fork server with its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    server = _sandbox._server
    if server is not None and server.proc.poll() is None:
        with open(f"/proc/{server.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
    return total


def measure(fn: Callable[..., None], program: tuple[str, str, list[str] | None], cases: int) -> tuple[float, float]:
    """Median wall ms per case, and mean CPU ms per case (all processes involved)."""
    code, stdin, asserts = program
    times = []
    with tempfile.TemporaryDirectory(prefix="qworker-bench-") as workdir:
        fn(workdir, code, stdin, asserts)  # warm-up (and the fork server's start)
        c0 = cpu_s()
        for _ in range(cases):
            t0 = time.perf_counter()
            fn(workdir, code, stdin, asserts)
            times.append((time.perf_counter() - t0) * 1000)
        cpu = (cpu_s() - c0) * 1000 / cases
    return statistics.median(times), cpu


def attempts_table() -> str:
    """Run tests/contract/rewards/test_code_sandbox_adversarial.py and tabulate its attempts with their outcomes (Markdown)."""
    import pytest

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, repo)
    from tests.contract.rewards.test_code_sandbox_adversarial import ATTEMPTS

    outcomes: dict[tuple[str, str], str] = {}

    class Collect:
        def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
            if "[" in report.nodeid and (report.when == "call" or report.outcome != "passed"):
                user, _, name = report.nodeid.split("[", 1)[1].rstrip("]").partition("-")
                outcomes[(name, user)] = report.outcome

    path = os.path.join(repo, "tests", "rewards", "test_code_sandbox_adversarial.py")
    pytest.main([path, "-q", "-p", "no:cacheprovider", "-k", "scores_zero"], plugins=[Collect()])
    users = [u for u in ("worker", "unprivileged") if any(k[1] == u for k in outcomes)]
    word = {"passed": "0 / nothing", "failed": "**FAILED**", "skipped": "skipped"}
    lines = ["| attempt | kind | what it tries | " + " | ".join(f"score / leaked ({u.replace('worker', 'as root')})" for u in users) + " |",
             "|---|---|---|" + "---|" * len(users)]
    for a in ATTEMPTS:
        cells = [word.get(outcomes.get((a.name, u), ""), "not run") for u in users]
        lines.append(f"| `{a.name}` | {a.kind} | {a.what} | " + " | ".join(cells) + " |")
    held = {u: sum(outcomes.get((a.name, u)) == "passed" for a in ATTEMPTS) for u in users}
    lines.append("")
    lines.append(f"{len(ATTEMPTS)} attempts ({sum(a.kind == 'score' for a in ATTEMPTS)} on the score, "
                 f"{sum(a.kind == 'leak' for a in ATTEMPTS)} to read, reach or disturb); scored 0 and leaked nothing: "
                 + ", ".join(f"{held[u]}/{len(ATTEMPTS)} ({u.replace('worker', 'as root')})" for u in users) + ".")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--table", action="store_true", help="print the adversarial suite's table instead of timing")
    args = ap.parse_args()
    if args.table:
        print(attempts_table())
        return
    problem = _sandbox.check()
    print(f"code sandbox benchmark: {args.cases} cases per cell ({5 * args.cases} for the warm sandbox), {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}, uid {os.geteuid()}")
    if problem:
        print(f"(no boundary here: {problem})")
    systems: dict[str, Callable[..., None]] = {"today (python -I per case)": today, "subprocess.run per case": plain,
                                               "warm, no isolation": warm(False)}
    if not problem:
        systems["warm, isolated"] = warm(True)
    cases = {s: args.cases * (5 if s.startswith("warm") else 1) for s in systems}  # the warm ones are cheap: more samples
    got = {(s, p): measure(fn, prog, cases[s]) for s, fn in systems.items() for p, prog in PROGRAMS.items()}
    ms = {k: v[0] for k, v in got.items()}
    cpu = {k: v[1] for k, v in got.items()}
    rows = [[s, *(f"{ms[s, p]:.2f}" for p in PROGRAMS), *(f"{1000 / ms[s, p]:.0f}" for p in PROGRAMS),
             *(f"{cpu[s, p]:.2f}" for p in PROGRAMS)] for s in systems]
    print(table(["system", *(f"{p} ms" for p in PROGRAMS), *(f"{p} cases/s" for p in PROGRAMS), *(f"{p} CPU ms" for p in PROGRAMS)], rows))
    print("(ms: median wall time per case; cases/s: 1000 / that; CPU ms: mean CPU time per case of every process involved,"
          " which the machine's load inflates less than wall time)")
    base = "today (python -I per case)"
    best = "warm, isolated" if "warm, isolated" in systems else "warm, no isolation"
    print(f"\n{best} vs today, wall: " + ", ".join(f"{p} {ms[base, p] / ms[best, p]:.1f}x faster" for p in PROGRAMS))
    print(f"{best} vs today, CPU: " + ", ".join(f"{p} {cpu[base, p] / cpu[best, p]:.1f}x less" for p in PROGRAMS))
    if "warm, isolated" in systems:
        print("cost of the boundary (isolated - no isolation), CPU: "
              + ", ".join(f"{p} {cpu['warm, isolated', p] - cpu['warm, no isolation', p]:+.2f} ms" for p in PROGRAMS))

if __name__ == "__main__":
    from _common import recorded

    with recorded("sandbox"):  # the printed tables also go to docs/bench/sandbox.md
        main()
