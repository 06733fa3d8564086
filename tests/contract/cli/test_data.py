"""``qworker examples`` / ``qworker configs``: where the bundled files are, from any directory (real processes)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import console_script


def qworker(*args: str, cwd: Path):
    return subprocess.run([console_script("qworker"), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_examples_and_configs_print_their_directory_from_anywhere(tmp_path):
    examples = Path(qworker("examples", cwd=tmp_path).stdout.strip())
    configs = Path(qworker("configs", cwd=tmp_path).stdout.strip())
    assert (examples / "gsm8k_rollouts.jsonl").is_file() and (configs / "rewards.yaml").is_file()
    res = qworker("score", str(examples / "gsm8k_rollouts.jsonl"), "--reward", "gsm8k", "--out", "s.jsonl", "--workers", "1",
                  "--no-cache", cwd=tmp_path)
    assert res.returncode == 0 and (tmp_path / "s.jsonl").exists(), res.stderr


def test_copy_puts_the_files_in_a_directory_and_keeps_existing_ones(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "rewards.yaml").write_text("rewards: {}\n")
    res = qworker("configs", "--copy", "mine", cwd=tmp_path)
    assert res.returncode == 0 and (tmp_path / "mine" / "grpo.yaml").is_file()
    assert (tmp_path / "mine" / "rewards.yaml").read_text() == "rewards: {}\n" and "kept" in res.stderr
