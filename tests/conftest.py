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


TIERS = ("unit", "contract", "chaos")  # tests/<tier>/...; a test file outside them is a contract test


def tier_of(path: Path) -> str:
    """The tier of a test file: the folder under tests/ it lives in (``unit``, ``contract``, ``chaos``)."""
    parts = path.resolve().relative_to(HERE).parts
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else "contract"


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "unit: pure tests (no process, no network socket; tests/unit/conftest.py enforces it), seconds in all",
        "contract: real processes, sockets and HTTP, each named for the promise it keeps",
        "chaos: fault injection and long runs (killed or stopped processes, cut links, full or damaged disks, learning runs)",
        "learning: trains a tiny model until it learns a task (slow: minutes); select with -m learning, skip with -m 'not learning'",
    ):
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tier, from its folder, so ``-m unit`` and ``-m "not chaos"`` select tiers."""
    for item in items:
        item.add_marker(tier_of(Path(item.path)))


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
