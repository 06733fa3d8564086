"""A judge's settings are spelled once (``JudgeSettings``): the gate reads them, and only what the call needs travels."""

from __future__ import annotations

import inspect

from qworker.judge.control.registry import JudgeGates
from qworker.judge.settings import GATE, JudgeSettings
from qworker.rewards.llm_judge import llm_judge

EP = [{"url": "http://a", "weight": 2}]
SETTINGS = {"timeout_s": 7, "connections_per_host": 4, "ceiling": 64, "max_attempts": 2, "initial_concurrency": 8,
            "dead_after_s": 3, "error_budget": 0.5, "routing": "round_robin", "prefix_balance": 0.5, "coordinate": False}


def test_the_gates_own_settings_stay_in_the_producer_and_what_the_call_needs_travels_with_the_task():
    params = {"model": "m", "endpoints": EP, "rubric": "r", **SETTINGS}
    sub = JudgeGates().submission(params)
    assert sub.task_params == {"model": "m", "endpoints": EP, "rubric": "r", "timeout_s": 7, "connections_per_host": 4}
    assert sub.hashed_params == {"model": "m", "rubric": "r"}  # where and how a call is made is not what it scores
    assert sub.timeout_s == 7 + 5.0  # the task's hard limit sits past the request's own deadline
    gate = sub.policy
    assert (gate.max_attempts, gate.dead_after_s, gate.router.routing, gate.peers) == (2, 3.0, "round_robin", None)
    assert gate.endpoints[0].limit.limit == 8 and gate.endpoints[0].weight == 2


def test_the_reward_takes_no_setting_that_only_the_gate_reads_and_shares_the_defaults_of_those_it_reads():
    takes = inspect.signature(llm_judge).parameters
    assert not set(JudgeSettings.names(GATE)) & set(takes) and "ceiling" not in takes
    defaults = JudgeSettings()
    assert (takes["timeout_s"].default, takes["connections_per_host"].default) == (defaults.timeout_s, defaults.connections_per_host)

