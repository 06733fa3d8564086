"""A judge reward's keys are spelled once, in ``judge.settings``: the keys its params may hold, those a task's hash
leaves out, and the reward's own keywords and defaults all come from there."""

from __future__ import annotations

import dataclasses
import inspect

from qworker.judge.control.checks import JUDGE_KEYS
from qworker.judge.control.gate import ROUTING_KEYS, hash_params
from qworker.judge.settings import CALL, JudgeAsk, JudgeOptions
from qworker.rewards.llm_judge import llm_judge


def test_the_judge_reward_takes_the_keys_and_defaults_the_settings_spell_and_no_other():
    takes = {name: p.default for name, p in inspect.signature(llm_judge).parameters.items() if name not in ("payload", "call")}
    assert set(takes) == set(JudgeOptions.names(CALL)) | set(JudgeAsk.names())
    asked = {f.name: f.default for f in dataclasses.fields(JudgeAsk)}
    assert {k: takes[k] for k in asked} == asked
    assert set(JUDGE_KEYS) == set(JudgeOptions.names()) | set(JudgeAsk.names())


def test_a_tasks_hash_keeps_exactly_the_scored_keys():
    params = {k: f"v-{k}" for k in JUDGE_KEYS}
    assert set(hash_params(params)) == {"model", *JudgeAsk.names()} == set(JudgeOptions.names(scored=True)) | set(JudgeAsk.names())
    assert ROUTING_KEYS == set(JUDGE_KEYS) - set(hash_params(params))
