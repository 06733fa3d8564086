from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

# Ray reads these when it is first imported, by whichever test comes first: every Ray
# server a test starts must stay on 127.0.0.1 (see ../shared/FIELD-NOTES.md).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

HERE = Path(__file__).resolve().parent
TEST_REWARDS = str(HERE / "rewards_for_tests.py")
REPO = HERE.parent
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _private_runtime_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test gets its own ipc/registry directory (children inherit it).
    d = tmp_path_factory.mktemp("rt")
    monkeypatch.setenv("QWORKER_RUNTIME_DIR", str(d))
    logging.getLogger("qworker").setLevel(logging.INFO)


def console_script(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{path} missing: install the package (pip install -e .)"
    return str(path)


def count_lines(path: os.PathLike) -> int:
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0
