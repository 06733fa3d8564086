"""OpenRLHF: the reward_func file, loaded and called by OpenRLHF's own executor.

``SingleTurnAgentExecutor`` (openrlhf 0.11.2, ``openrlhf/utils/agent.py``) is
the code that loads a ``--reward.remote_url`` ending in ``.py`` and calls its
``reward_func`` after generation.  ``pip install openrlhf`` needs a CUDA build
(flash-attn, deepspeed), so where it is installed with ``--no-deps`` that real
class runs here, with a real tokenizer and a stand-in for the vLLM engine (it
returns fixed response tokens); otherwise that test is skipped and the second
one still loads and calls the file exactly as that executor does.  The last
step, OpenRLHF turning the dict into an ``Experience``, needs vLLM to import,
so it is restated from ``samples_generator.py``: ``torch.tensor([reward])`` and
``value.flatten()[0].item()`` for each ``extra_logs`` tensor.
"""

from __future__ import annotations

import asyncio
import importlib.util
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import qworker.integrations.openrlhf_reward_func as rf_module  # noqa: E402
from tests.contract.integrations.tiny import tokenizer  # noqa: E402

PATH = rf_module.__file__


class StandInEngine:
    """Answers ``generate`` like vLLM's async engine, with the tokens it was given."""

    def __init__(self, response_ids: list[int]) -> None:
        self.response_ids = response_ids

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        out = SimpleNamespace(token_ids=list(self.response_ids), finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


def to_experience_info(output: dict) -> dict:
    """What ``_process_response_into_experience`` does with the reward fields."""
    info = {"reward": torch.tensor([output["reward"]]), "score": torch.tensor([output["scores"]])}
    for key, value in output["extra_logs"].items():
        if isinstance(value, torch.Tensor):
            value = value.flatten()[0].item()
        info[key] = torch.tensor([value])
    return info


def load_as_openrlhf_does():
    spec = importlib.util.spec_from_file_location("reward_func", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reward_func


@pytest.mark.parametrize(("response", "label", "reward", "failed"), [
    ("the answer is \\boxed{4} <eos>", "4", 1.0, 0.0),
    ("the answer is \\boxed{5} <eos>", "4", 0.0, 0.0),
])
def test_openrlhfs_executor_calls_the_file(producer, monkeypatch: pytest.MonkeyPatch, response, label, reward, failed) -> None:
    agent = pytest.importorskip("openrlhf.utils.agent")
    monkeypatch.delenv("QWORKER_REWARD", raising=False)  # math
    tok = tokenizer()
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=PATH)
    assert executor.reward_func is not None  # loaded from the file
    engine = StandInEngine(tok(response, add_special_tokens=False)["input_ids"])
    params = SimpleNamespace(max_tokens=16, logprobs=None)
    output = asyncio.run(executor.execute("what is 2+2 ?", label, params, 64, tok, engine))
    assert output["reward"] is not None, "OpenRLHF swallowed an exception from reward_func (logged at INFO)"
    info = to_experience_info(output)
    assert info["reward"].shape == (1,) and info["reward"].item() == reward
    assert info["score"].item() == reward
    assert info["qworker_failed"].item() == failed


def test_the_file_as_openrlhf_loads_and_calls_it(producer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QWORKER_REWARD", "adapter_echo")
    reward_func = load_as_openrlhf_does()
    seen = []
    real_submit = producer.submit_batch

    def spy(reward, payloads, params=None):
        seen.extend(payloads)
        return real_submit(reward, payloads, params=params)

    monkeypatch.setattr(producer, "submit_batch", spy)
    out = asyncio.run(asyncio.to_thread(reward_func, ["Q: 1+1? A: 2"], ["Q: 1+1? A:"], ["2"]))  # one sample, in a thread
    assert set(out) == {"rewards", "scores", "extra_logs"}
    assert out["rewards"].dtype == torch.float32 and out["rewards"].tolist() == [1.0]
    assert seen == [{"response": " 2", "ground_truth": "2", "prompt": "Q: 1+1? A:"}]
    assert to_experience_info({"reward": out["rewards"], "scores": out["scores"], "extra_logs": out["extra_logs"]})[
        "qworker_failed"].tolist() == [0.0]


def test_a_failed_task_is_flagged_not_a_silent_zero(producer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QWORKER_REWARD", "adapter_fail")
    out = load_as_openrlhf_does()(["p r", "p s"], ["p", "p"], ["x", "y"])
    assert out["rewards"].tolist() == [0.0, 0.0]  # the producer's fallback_score
    assert out["extra_logs"]["qworker_failed"].tolist() == [1.0, 1.0]


def test_a_query_without_its_prompt_fails_that_sample_unless_whole_query_is_set(producer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QWORKER_REWARD", "adapter_echo")
    seen = []
    real_submit = producer.submit_batch
    monkeypatch.setattr(producer, "submit_batch", lambda r, p, params=None: seen.extend(p) or real_submit(r, p, params=params))
    out = load_as_openrlhf_does()(["decoded differently", "the prompt: yes"], ["the prompt", "the prompt:"], ["x", "x"])
    assert out["extra_logs"]["qworker_failed"].tolist() == [1.0, 0.0]  # never scored with the prompt in the response
    assert [p["response"] for p in seen] == [" yes"]
    monkeypatch.setenv("QWORKER_WHOLE_QUERY", "1")  # opt-in, and logged
    load_as_openrlhf_does()(["decoded differently"], ["the prompt"], ["x"])
    assert seen[-1]["response"] == "decoded differently"


def test_a_process_whose_tasks_keep_failing_stops_the_run_and_a_success_restarts_the_count(producer, monkeypatch) -> None:
    from qworker.integrations._outcome import RewardsFailed

    monkeypatch.setenv("QWORKER_MAX_CONSECUTIVE_FAILURES", "3")
    reward_func = load_as_openrlhf_does()  # loaded once per engine actor, called once per sample
    monkeypatch.setenv("QWORKER_REWARD", "adapter_fail")
    for _ in range(2):
        assert reward_func(["p r"], ["p"], ["x"])["extra_logs"]["qworker_failed"].tolist() == [1.0]
    monkeypatch.setenv("QWORKER_REWARD", "adapter_len")
    assert reward_func(["p r"], ["p"], ["x"])["extra_logs"]["qworker_failed"].tolist() == [0.0]  # starts the count again
    monkeypatch.setenv("QWORKER_REWARD", "adapter_fail")
    reward_func(["p r"], ["p"], [None])
    reward_func(["p r"], ["p"], [None])
    with pytest.raises(RewardsFailed, match=r"the last 3 'adapter_fail' tasks in this process all failed.*first error: reward_error: "
                                            r"RuntimeError: this reward always fails; ground_truth read from OpenRLHF's labels "
                                            r"\(all None\); set QWORKER_MAX_CONSECUTIVE_FAILURES=0"):
        reward_func(["p r"], ["p"], [None])
    monkeypatch.setenv("QWORKER_MAX_CONSECUTIVE_FAILURES", "0")
    for _ in range(4):
        assert reward_func(["p r"], ["p"], ["x"])["extra_logs"]["qworker_failed"].tolist() == [1.0]
