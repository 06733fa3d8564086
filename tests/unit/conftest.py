"""The unit tier is pure: a test here that starts a process or opens a network socket fails.

Tests that need real processes or sockets belong in ``tests/contract/`` (or ``tests/chaos/`` for
fault injection and long runs).  The guard is ``tests/purity.py``'s; it is checked by
``test_purity_guard.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.purity import forbid_impure_calls

ADVICE = "a unit test may not start a process or open a network socket; move it to tests/contract/ or tests/chaos/"


@pytest.fixture(autouse=True)
def purity_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fail the test at the first process start or network socket, naming the call; a call made on
    another thread (where the failure would only end that thread) fails the test at teardown.
    Yields the list of violations seen (the guard's own test empties it)."""
    violations: list[str] = []

    def refuse(what: str) -> None:
        violations.append(what)
        pytest.fail(f"{what}: {ADVICE}", pytrace=False)

    forbid_impure_calls(monkeypatch, refuse)
    yield violations
    if violations:
        pytest.fail(f"{', '.join(violations)}: {ADVICE}", pytrace=False)
