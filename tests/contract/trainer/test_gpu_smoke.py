"""``trainer.gpu_smoke``: its refusals are one line, and its HF path trains and moves weights (checked on CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[3]


def _smoke(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "trainer.gpu_smoke", "--out", str(tmp_path), *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=timeout)


def test_vllm_rollout_on_cpu_is_refused_in_one_line(tmp_path: Path) -> None:
    r = _smoke(tmp_path, "--device", "cpu", "--rollout", "vllm", timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == "gpu_smoke: --device cpu needs --rollout hf"
    assert "Traceback" not in r.stderr


def test_hf_rollout_trains_and_the_sampler_sees_the_new_weights(tmp_path: Path) -> None:
    r = _smoke(tmp_path, "--device", "cpu", "--rollout", "hf", "--steps", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "gpu_smoke: 2 steps; weight sync route: in process (load_weights)" in r.stdout
    assert r.stdout.count("reward wait") >= 2  # one timeline line per step
    assert "-> changed" in r.stdout
