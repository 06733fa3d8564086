"""The judge limiter's golden traces (``goldens.py``, ``golden/*.json``) are what today's code does.

A change to the limiter, the gate or the simulator that moves the limit over time fails this test;
re-record on purpose (``python -m tests.contract.judge.goldens record``) after reading
``python -m tests.contract.judge.goldens compare``'s table, and commit the new traces with the change.
"""

from __future__ import annotations

import pytest

from tests.contract.judge import goldens

QUICK = [name for name, sc in goldens.SCENARIOS.items() if sc.quick]


def test_every_scenario_has_a_stored_trace_of_a_small_total_size():
    missing = [name for name in goldens.SCENARIOS if goldens.load(name) is None]
    assert not missing, f"no golden trace for {missing}: python -m tests.contract.judge.goldens record {' '.join(missing)}"
    assert sum(p.stat().st_size for p in goldens.GOLDEN.glob("*.json")) < 1_000_000
    assert {p.stem for p in goldens.GOLDEN.glob("*.json")} == set(goldens.SCENARIOS)


@pytest.mark.parametrize("name", QUICK)
def test_the_limit_over_time_is_the_recorded_one(name):
    stored, now = goldens.load(name), goldens.trace(goldens.SCENARIOS[name])
    assert stored is not None
    assert now["summary"] == stored["summary"], goldens.compare([name])
    first = next((i for i, (a, b) in enumerate(zip(now["samples"], stored["samples"], strict=False)) if a != b), None)
    assert first is None and len(now["samples"]) == len(stored["samples"]), (
        f"{name}: the limit over time differs from the golden trace first at sample {first} "
        f"(now {now['samples'][first] if first is not None else '-'}, stored {stored['samples'][first] if first is not None else '-'}); "
        "if the change is meant, re-record: python -m tests.contract.judge.goldens record")
