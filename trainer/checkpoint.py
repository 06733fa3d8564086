"""Checkpoints: ``<log.dir>/checkpoints/step-NNNNNN/`` holding the policy (``hf/``, ``optimizer.pt``) and
``trainer_state.json`` (the next step to run, the prompt sampler's position, the config).

A checkpoint is written into a temporary directory and renamed into place, so a crash never leaves
a half-written one that ``latest()`` would pick.  Only the newest ``keep`` are kept.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Optional

__all__ = ["save_checkpoint", "latest", "read_state"]

STATE = "trainer_state.json"


def _step_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith("step-") and (p / STATE).exists())


def save_checkpoint(root: str | os.PathLike, step: int, save_policy: Callable[[str], None], state: dict[str, Any], keep: int = 2) -> Path:
    """Write the checkpoint after ``step`` steps (``state["step"]`` is the next step to run); returns its path.

    ``save_policy(directory)`` writes the policy's files (the policy actor's ``save``).
    """
    root = Path(root)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_policy(str(tmp))
    with open(tmp / STATE, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in _step_dirs(root)[:-max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest(root: str | os.PathLike) -> Optional[Path]:
    """The newest complete checkpoint under ``root``, or None."""
    dirs = _step_dirs(Path(root))
    return dirs[-1] if dirs else None


def read_state(checkpoint: str | os.PathLike) -> dict[str, Any]:
    with open(Path(checkpoint) / STATE, encoding="utf-8") as f:
        return json.load(f)
