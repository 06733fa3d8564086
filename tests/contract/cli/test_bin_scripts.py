"""The operator scripts in bin/: the Slurm batch script and the systemd unit."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from qworker import PoolOptions, Producer
from tests.conftest import REPO, TEST_REWARDS, console_script

SLURM = REPO / "bin" / "qworker-pool.slurm"
UNIT = REPO / "bin" / "qworker-pool.service"
ENV_EXAMPLE = REPO / "bin" / "qworker-pool.env.example"

FAKE_SRUN = """#!/bin/bash
# Records its arguments, then runs the task once, as Slurm would on a node named nodeA.
printf '%s\\n' "$@" > "$SRUN_ARGS_FILE"
while [[ $# -gt 0 && $1 == -* ]]; do shift; done
SLURMD_NODENAME=nodeA exec "$@"
"""


def test_the_slurm_script_parses_and_asks_for_one_task_per_node():
    subprocess.run(["bash", "-n", str(SLURM)], check=True)
    text = SLURM.read_text()
    assert "#SBATCH --ntasks-per-node=1" in text
    srun = re.search(r"^srun .*?(?<!\\)$", text, re.M | re.S)
    assert srun and '--nodes="$SLURM_NNODES"' in srun.group(0) and "--ntasks-per-node=1" in srun.group(0)
    header = text.split("set -euo pipefail")[0]
    used = set(re.findall(r"\$\{?(QWORKER_[A-Z_]+)", text))
    assert all(f"#   {name}" in header for name in used), "every variable the script reads is documented in its header"


def slurm_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "srun").write_text(FAKE_SRUN)
    (fake / "srun").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM") and not (k.startswith("QWORKER_") and k != "QWORKER_RUNTIME_DIR")}
    env.update(PATH=f"{fake}:{env['PATH']}", SRUN_ARGS_FILE=str(tmp_path / "srun-args"), SLURM_JOB_ID="4242", SLURM_NNODES="1",
               SLURM_CPUS_ON_NODE="2", **extra)
    return env


def test_the_slurm_script_starts_a_pool_that_serves_and_drains(tmp_path):
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0) as p:
        env = slurm_env(tmp_path, QWORKER_POOL=console_script("qworker-pool"), QWORKER_WORKERS="1")
        job = subprocess.Popen(["bash", str(SLURM), p.endpoint, "--rewards", TEST_REWARDS], env=env, stdin=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        try:
            p.wait_for_workers(1, timeout=30)
            results = p.map("noop", [{"i": i} for i in range(20)], timeout=30)
        finally:
            # Slurm signals the step's task (the pool), not the batch shell.
            pool = next(c for c in psutil.Process(job.pid).children(recursive=True) if p.endpoint in c.cmdline() and "--workers" in c.cmdline())
            pool.send_signal(signal.SIGTERM)
            _, err = job.communicate(timeout=30)
    assert job.returncode == 0, err
    assert all(r.ok for r in results) and {r.worker.split("/")[0] for r in results} == {"slurm-4242-nodeA"}
    srun_args = (tmp_path / "srun-args").read_text().splitlines()
    assert {"--nodes=1", "--ntasks=1", "--ntasks-per-node=1", "--cpus-per-task=2"} <= set(srun_args)
    assert "draining" in err  # the pool drained on SIGTERM


def test_the_slurm_script_refuses_to_run_without_an_endpoint(tmp_path):
    out = subprocess.run(["bash", str(SLURM)], env=slurm_env(tmp_path), capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "producer endpoint" in out.stderr
    assert not (tmp_path / "srun-args").exists()


def unit_sections() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",), comment_prefixes=("#", ";"))
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def test_the_systemd_unit_restarts_always_and_lets_the_pool_drain():
    unit = unit_sections()
    service = unit["Service"]
    assert service["Restart"] == "always"
    assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed"
    assert float(service["TimeoutStopSec"]) > PoolOptions().drain_timeout_s + 10
    assert service["EnvironmentFile"].startswith("/")
    assert service["ExecStart"].split()[0].endswith("/qworker-pool") and "--connect ${QWORKER_CONNECT}" in service["ExecStart"]
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    # Every variable ExecStart reads is set in the example EnvironmentFile.
    example = dict(line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines() if line and not line.startswith("#"))
    used = set(re.findall(r"\$\{?([A-Z_]+)\}?", service["ExecStart"]))
    assert used <= set(example), used - set(example)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_unit(tmp_path):
    # verify checks that ExecStart's program exists: point it at this install's qworker-pool.
    unit = tmp_path / "qworker-pool.service"
    unit.write_text(re.sub(r"^ExecStart=\S+", f"ExecStart={console_script('qworker-pool')}", UNIT.read_text(), flags=re.M))
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    complaints = [line for line in out.stderr.splitlines() if str(unit) in line or "qworker-pool.service" in line]
    assert out.returncode == 0 and not complaints, out.stderr
