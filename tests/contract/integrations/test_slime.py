"""slime: ``rm`` and ``group_rm`` called as slime calls a ``--custom-rm-path``.

slime is not on PyPI, so this is a test against its documented interface, not
its code: ``Sample`` below is a stand-in with the fields (and defaults) of
slime's ``slime.utils.types.Sample`` that the adapter reads, and ``load`` is
what slime's ``load_function`` does (import the module, get the attribute).
slime's own rollout loop, its ``--reward-key`` indexing and its remote
``--rm-url`` path are not exercised.
"""

from __future__ import annotations

import asyncio
import importlib
from argparse import Namespace
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class Sample:
    """The fields of slime's ``Sample`` that a reward reads, with slime's defaults."""

    prompt: Any = ""
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: Any = None
    metadata: dict = field(default_factory=dict)


def load(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def args(**kw) -> Namespace:
    base = dict(reward_key=None, eval_reward_key=None, group_rm=False, rollout_max_response_len=1024, custom_rm_path=None)
    base.update(kw)
    return Namespace(**base)


def test_rm_scores_one_sample(producer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QWORKER_REWARD", raising=False)
    rm = load("qworker.integrations.slime.rm")
    good = Sample(prompt="What is 2+2?", response="So \\boxed{4}.", label="4", response_length=5)
    bad = Sample(prompt="What is 2+2?", response="So \\boxed{5}.", label="4", response_length=5)
    assert asyncio.run(rm(args(), good)) == 1.0
    assert asyncio.run(rm(args(), bad)) == 0.0


def test_group_rm_keeps_order_and_per_sample_rewards(producer) -> None:
    group_rm = load("qworker.integrations.slime.group_rm")
    samples = [
        Sample(response="x" * n, label="0", metadata={"qworker_reward": "adapter_len", "data_source": "toy"}) for n in range(1, 6)
    ] + [Sample(response="abc", label="0", metadata={"qworker_reward": "adapter_fail"})]
    rewards = asyncio.run(group_rm(args(group_rm=True), samples))
    assert rewards == [n / 6 for n in range(1, 6)] + [0.0]


def test_reward_key_gives_a_dict_that_carries_the_failure(producer) -> None:
    rm = load("qworker.integrations.slime.rm")
    a = args(reward_key="score", eval_reward_key="score")
    ok = asyncio.run(rm(a, Sample(response="abc", metadata={"qworker_reward": "adapter_len"})))
    failed = asyncio.run(rm(a, Sample(response="abc", metadata={"qworker_reward": "adapter_fail"})))
    assert ok == {"score": 0.5, "qworker_failed": 0.0, "qworker_error": ""}
    assert failed == {"score": 0.0, "qworker_failed": 1.0, "qworker_error": "reward_error"}
    assert failed[a.reward_key] == 0.0  # what slime's get_reward_value reads


def test_payload_fields(producer) -> None:
    rm = load("qworker.integrations.slime.rm")
    seen = []
    real_submit = producer.submit_batch
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(producer, "submit_batch", lambda r, p, params=None: seen.extend(p) or real_submit(r, p, params=params))
        chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
        meta = {"qworker_reward": "adapter_echo", "data_source": "gsm8k"}
        asyncio.run(rm(args(), Sample(prompt=chat, response="4", response_length=1, label="4", metadata=meta)))
    assert seen == [{
        "response": "4", "ground_truth": "4", "prompt": "What is 2+2?", "data_source": "gsm8k", "extra_info": meta,
        "response_length": 1, "max_response_length": 1024,
    }]


def test_a_process_whose_tasks_keep_failing_stops_the_run(producer, monkeypatch: pytest.MonkeyPatch) -> None:
    from qworker.integrations._outcome import RewardsFailed

    monkeypatch.setenv("QWORKER_MAX_CONSECUTIVE_FAILURES", "4")
    group_rm = load("qworker.integrations.slime.group_rm")
    asyncio.run(group_rm(args(group_rm=True), [Sample(response="abc", metadata={"qworker_reward": "adapter_len"})]))  # a success
    failing = [Sample(response="abc", metadata={"qworker_reward": "adapter_fail"}) for _ in range(3)]
    assert asyncio.run(group_rm(args(group_rm=True), failing)) == [0.0] * 3
    with pytest.raises(RewardsFailed, match=r"the last 6 'adapter_fail' tasks in this process all failed.*ground_truth read "
                                            r"from sample.label \(None in every sample\)"):
        asyncio.run(group_rm(args(group_rm=True), failing))
