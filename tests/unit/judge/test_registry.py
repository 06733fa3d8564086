"""One gate per judge; a later config at odds with its settings is refused."""

from __future__ import annotations

import pytest

from qworker import ConfigError
from qworker.judge.control.registry import JudgeGates

EP = [{"url": "http://a"}]


def test_same_judge_same_gate():
    gates = JudgeGates()
    a = gates.for_params({"model": "m", "endpoints": EP, "max_attempts": 4})
    b = gates.for_params({"model": "m", "endpoints": EP, "prompt_template": "other {response}"})  # 4 is the default
    assert a is b


@pytest.mark.parametrize(("key", "first", "later"), [("dead_after_s", 10, 60), ("error_budget", 0.15, 0.5)])
def test_a_later_config_with_other_gate_settings_is_a_config_error_naming_both(key, first, later):
    # on the base commit the later caller silently got the first caller's value
    gates = JudgeGates()
    gates.for_params({"model": "m", "endpoints": EP, key: first})
    with pytest.raises(ConfigError, match=rf"{key} {float(later)!r} \(the gate has {float(first)!r}\)") as info:
        gates.for_params({"model": "m", "endpoints": EP, key: float(later)})
    assert "http://a" in str(info.value)


def test_another_judge_has_its_own_gate_and_settings():
    gates = JudgeGates()
    a = gates.for_params({"model": "m", "endpoints": EP, "max_attempts": 2})
    b = gates.for_params({"model": "m", "endpoints": [{"url": "http://b"}], "max_attempts": 6})
    assert a is not b and (a.max_attempts, b.max_attempts) == (2, 6)


def test_a_bad_config_is_a_config_error():
    with pytest.raises(ConfigError, match="llm_judge: endpoints\\[0\\].rpm = -1"):
        JudgeGates().for_params({"model": "m", "endpoints": [{"url": "http://a", "rpm": -1}]})


def test_a_later_config_with_another_retry_budget_is_a_config_error():
    gates = JudgeGates()
    gates.for_params({"model": "m", "endpoints": EP, "max_attempts": 2})
    with pytest.raises(ConfigError, match=r"max_attempts 6 \(the gate has 2\)"):
        gates.for_params({"model": "m", "endpoints": EP, "max_attempts": 6})


def test_a_later_bad_config_for_the_same_judge_is_a_config_error_too():
    gates = JudgeGates()
    gates.for_params({"model": "m", "endpoints": EP})
    with pytest.raises(ConfigError, match="max_attempts = 'three'"):
        gates.for_params({"model": "m", "endpoints": EP, "max_attempts": "three"})
