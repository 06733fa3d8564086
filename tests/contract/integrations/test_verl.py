"""verl: the real loader (``pkg://`` through verl's import utilities), the real
``RewardLoopWorker`` and reward-manager classes, called with a real ``DataProto``.

What runs is verl's own code from the reward worker down: ``RewardLoopWorker``
loads the tokenizer from a local directory, ``load_reward_manager`` resolves
the manager (``register``/``naive`` with our ``compute_score``, or
``importlib``/``QworkerRewardManager``), ``compute_score_batch`` scores one
``data[i:i+1]`` per trajectory, and ``assemble_rm_scores`` places the scores.
Not run: the Ray actors of ``RewardLoopManager`` (it spreads the same calls
over ``reward.num_workers`` actors) and a training step.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("verl")
np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls  # noqa: E402

from qworker import RewardError  # noqa: E402
from qworker.integrations import verl as qverl  # noqa: E402
from qworker.integrations._outcome import RewardsFailed  # noqa: E402
from tests.contract.integrations.tiny import tokenizer  # noqa: E402

P, R = 6, 6  # prompt and response widths (padded), tokens
ROWS = [  # prompt, response, ground truth, extra_info
    ("what is 2+2 ?", "the answer is \\boxed{4}", "4", {"index": 0}),
    ("what is 3+3 ?", "the answer is \\boxed{5}", "6", {"index": 1}),
    ("what is 3+3 ?", "\\boxed{6}", "6", {"index": 2, "qworker_reward": "adapter_fail"}),
    ("what is 2+2 ?", "the answer is \\boxed{4} <eos>", "4", {"index": 3}),
]
EXPECTED = [1.0, 0.0, 0.0, 1.0]  # math; row 2 fails (fallback_score 0.0, and says so)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("tok")
    tokenizer().save_pretrained(str(d))
    return str(d)


def make_data(tok) -> DataProto:
    """A batch as verl's rollout hands it to the reward loop: left-padded prompts,
    right-padded responses, one attention mask over both."""
    prompts = torch.full((len(ROWS), P), tok.pad_token_id)
    responses = torch.full((len(ROWS), R), tok.pad_token_id)
    mask = torch.zeros((len(ROWS), P + R), dtype=torch.long)
    for i, (prompt, response, _, _) in enumerate(ROWS):
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        r = tok(response, add_special_tokens=False)["input_ids"]
        prompts[i, P - len(p):] = torch.tensor(p)
        responses[i, : len(r)] = torch.tensor(r)
        mask[i, P - len(p): P + len(r)] = 1
    non_tensors = {
        "data_source": np.array(["openai/gsm8k"] * len(ROWS), dtype=object),
        "reward_model": np.array([{"ground_truth": gt, "style": "rule"} for _, _, gt, _ in ROWS], dtype=object),
        "extra_info": np.array([dict(e) for *_, e in ROWS], dtype=object),
    }
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1), "attention_mask": mask},
        non_tensors=non_tensors,
    )


def config(tok_dir: str, reward: dict):
    return OmegaConf.create({
        "actor_rollout_ref": {"model": {"path": tok_dir, "tokenizer_path": None}},
        "reward": {
            "num_workers": 1,
            "custom_reward_function": {"path": None, "name": "compute_score", "reward_kwargs": {}},
            "reward_manager": {"source": "register", "name": "naive", "module": {"path": None, "name": "custom_reward_manager"}},
            "reward_model": {"enable": False, "model_path": None},
            **reward,
        },
    })


def run_worker(cfg, data: DataProto):
    """verl's reward worker, as one of its Ray actors would run it; then the
    manager's rm_scores assembly and the extra-info stacking of ``compute_rm_score``."""
    worker = RewardLoopWorker(cfg)
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(data))  # the loop verl binds the managers to
    scores = [o["reward_score"] for o in outputs]
    rm_scores = resolve_reward_manager_cls(cfg).assemble_rm_scores(data, scores)
    infos = [o["reward_extra_info"] for o in outputs]
    keys = list(infos[0])
    stacked = {k: np.array([info[k] for info in infos]) for k in keys}  # KeyError if a sample lacks a key
    return worker, rm_scores, stacked


def assert_at_last_valid_token(data: DataProto, rm_scores, expected: list[float]) -> None:
    valid = data.batch["attention_mask"][:, P:].sum(-1)
    for i, score in enumerate(expected):
        assert rm_scores[i, valid[i] - 1].item() == pytest.approx(score), i
        others = torch.cat([rm_scores[i, : valid[i] - 1], rm_scores[i, valid[i]:]])
        assert not others.any(), f"row {i}: nonzero reward away from the last valid token"


def test_loader_finds_compute_score_by_pkg_path(tmp_path: Path, tok_dir: str) -> None:
    cfg = config(tok_dir, {"custom_reward_function": {"path": "pkg://qworker.integrations.verl", "name": "compute_score"}})
    fn = get_custom_reward_fn(cfg)
    assert fn is not None and asyncio.iscoroutinefunction(fn.func)  # verl wraps it in its async kwargs partial


def test_compute_score_through_verls_naive_manager(producer, tok_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QWORKER_REWARD", raising=False)  # default: math
    cfg = config(tok_dir, {"custom_reward_function": {"path": "pkg://qworker.integrations.verl", "name": "compute_score"}})
    data = make_data(tokenizer())
    worker, rm_scores, extra = run_worker(cfg, data)
    assert type(worker.reward_manager).__name__ == "NaiveRewardManager"
    assert_at_last_valid_token(data, rm_scores, EXPECTED)
    assert list(extra["qworker_failed"]) == [0.0, 0.0, 1.0, 0.0]
    assert list(extra["qworker_error"]) == ["", "", "reward_error", ""]
    assert list(extra["score"]) == EXPECTED
    # the same scores as qworker gives the decoded responses directly (the naive manager drops special tokens)
    direct = producer.map("math", [{"response": r.replace(" <eos>", ""), "ground_truth": gt} for _, r, gt, _ in ROWS])
    assert [d.score for i, d in enumerate(direct) if i != 2] == [e for i, e in enumerate(EXPECTED) if i != 2]


def test_reward_kwargs_choose_the_reward(producer, tok_dir: str) -> None:
    cfg = config(tok_dir, {"custom_reward_function": {
        "path": "pkg://qworker.integrations.verl", "name": "compute_score", "reward_kwargs": {"qworker_reward": "adapter_len"},
    }})
    data = make_data(tokenizer())
    _, rm_scores, extra = run_worker(cfg, data)
    direct = producer.map("adapter_len", [{"response": r.replace(" <eos>", "")} for _, r, _, _ in ROWS])
    expected = [d.score for d in direct]
    expected[2] = 0.0  # extra_info's qworker_reward (adapter_fail) wins over reward_kwargs
    assert_at_last_valid_token(data, rm_scores, expected)
    assert extra["qworker_failed"][2] == 1.0


def test_reward_manager_by_importlib(producer, tok_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QWORKER_REWARD", raising=False)
    cfg = config(tok_dir, {"reward_manager": {
        "source": "importlib", "name": "QworkerRewardManager", "module": {"path": "pkg://qworker.integrations.verl", "name": None},
    }})
    data = make_data(tokenizer())
    worker, rm_scores, extra = run_worker(cfg, data)
    assert isinstance(worker.reward_manager, qverl.QworkerRewardManager)
    assert_at_last_valid_token(data, rm_scores, EXPECTED)
    assert list(extra) == ["score", "qworker_failed", "qworker_error", "qworker_extra"]
    assert list(extra["qworker_error"]) == ["", "", "reward_error", ""]


def test_reward_manager_payload_fields(producer, tok_dir: str) -> None:
    cfg = config(tok_dir, {
        "reward_manager": {"source": "importlib", "name": "QworkerRewardManager", "module": {"path": "pkg://qworker.integrations.verl"}},
        "reward_kwargs": {"qworker_reward": "adapter_echo"},
    })
    data = make_data(tokenizer())
    worker = RewardLoopWorker(cfg)
    futures = []
    real_submit = producer.submit_batch

    def spy(reward, payloads, params=None):
        futs = real_submit(reward, payloads, params=params)
        futures.extend(futs)
        return futs

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(producer, "submit_batch", spy)
        worker.loop.run_until_complete(worker.compute_score_batch(data[:2]))
    payloads = [f.result().extra["payload"] for f in futures]
    assert payloads[0] == {
        "response": "the answer is \\boxed{4}", "ground_truth": "4", "prompt": "what is 2+2 ?", "data_source": "openai/gsm8k",
        "extra_info": {"index": 0}, "response_length": 4, "max_response_length": R,
    }
    assert payloads[1]["prompt"] == "what is 3+3 ?" and payloads[1]["ground_truth"] == "6"


@pytest.mark.parametrize("manager", ["naive", "qworker"])
def test_the_rewards_extra_reaches_reward_extra_info_with_the_same_keys_for_every_sample(producer, tok_dir: str, manager: str,
                                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QWORKER_REWARD", raising=False)  # math: extra {pred, source, format_ok}; row 2 fails (no extra)
    keys = ["pred", "format_ok", "gold_error"]  # gold_error: math returns it only for a bad ground truth
    if manager == "naive":
        cfg = config(tok_dir, {"custom_reward_function": {
            "path": "pkg://qworker.integrations.verl", "name": "compute_score", "reward_kwargs": {"qworker_extra_keys": keys}}})
    else:
        cfg = config(tok_dir, {
            "reward_manager": {"source": "importlib", "name": "QworkerRewardManager", "module": {"path": "pkg://qworker.integrations.verl"}},
            "reward_kwargs": {"qworker_extra_keys": keys},
        })
    data = make_data(tokenizer())
    _, rm_scores, extra = run_worker(cfg, data)  # stacks every key of the first sample: a KeyError if one lacked it
    assert_at_last_valid_token(data, rm_scores, EXPECTED)
    direct = producer.map("math", [{"response": r.replace(" <eos>", ""), "ground_truth": gt} for _, r, gt, _ in ROWS])
    for i, d in enumerate(direct):
        if i == 2:  # the failed task: no extra; NaN, which numpy writes as "nan" in a column of text
            assert extra["qworker_extra"][i] == "" and extra["pred"][i] == "nan" and math.isnan(extra["format_ok"][i])
            continue
        assert json.loads(extra["qworker_extra"][i]) == d.extra and d.extra["pred"] is not None
        assert extra["pred"][i] == d.extra["pred"] and extra["format_ok"][i] == d.extra["format_ok"]
    assert all(math.isnan(v) for v in extra["gold_error"])


def test_extra_values_that_are_not_scalars_become_json_text_and_bad_key_lists_are_refused() -> None:
    from qworker.engine.result import Result

    info = qverl.info_from_extra(Result(score=1.0, extra={"payload": {"b": [1, 2]}, "n": 3}), ["payload", "n", "absent"])
    assert info["qworker_extra"] == '{"n": 3, "payload": {"b": [1, 2]}}'
    assert info["payload"] == '{"b": [1, 2]}' and info["n"] == 3 and math.isnan(info["absent"])
    with pytest.raises(ValueError, match="'score' name keys the adapter sets itself"):
        qverl.extra_keys(["score"])
    with pytest.raises(ValueError, match="must be a list of the reward's extra keys"):
        qverl.extra_keys([1])


def test_the_manager_refuses_a_misspelled_reward_when_verl_builds_it(producer, tok_dir: str) -> None:
    cfg = config(tok_dir, {
        "reward_manager": {"source": "importlib", "name": "QworkerRewardManager", "module": {"path": "pkg://qworker.integrations.verl"}},
        "reward_kwargs": {"qworker_reward": "adapter_lne"},
    })
    with pytest.raises(RewardError, match=r"QworkerRewardManager \(reward 'adapter_lne'\): .*did you mean 'adapter_len'"):
        RewardLoopWorker(cfg)


def test_a_process_whose_tasks_keep_failing_stops_the_run(producer, tok_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QWORKER_MAX_CONSECUTIVE_FAILURES", "3")
    cfg = config(tok_dir, {"custom_reward_function": {
        "path": "pkg://qworker.integrations.verl", "name": "compute_score", "reward_kwargs": {"qworker_reward": "adapter_fail"}}})
    with pytest.raises(RewardsFailed, match=r"the last 3 'adapter_fail' tasks in this process all failed.*first error: "
                                            r"reward_error: RuntimeError: this reward always fails; payload keys sent: .*"
                                            r"QWORKER_MAX_CONSECUTIVE_FAILURES=0"):
        run_worker(cfg, make_data(tokenizer()))
    monkeypatch.setenv("QWORKER_MAX_CONSECUTIVE_FAILURES", "0")  # off: the failures score the fallback, flagged
    _, _, extra = run_worker(cfg, make_data(tokenizer()))
    assert list(extra["qworker_failed"]) == [1.0] * len(ROWS)


def test_an_async_def_reward_named_by_path_scores_through_compute_score(producer, tok_dir: str) -> None:
    cfg = config(tok_dir, {"custom_reward_function": {
        "path": "pkg://qworker.integrations.verl", "name": "compute_score",
        "reward_kwargs": {"qworker_reward": "tests.contract.integrations.async_rewards:length_parity"}}})
    data = make_data(tokenizer())
    _, rm_scores, extra = run_worker(cfg, data)
    expected = [float(len(r.replace(" <eos>", "")) % 2) for _, r, _, _ in ROWS]
    expected[2] = 0.0  # its extra_info names adapter_fail
    assert_at_last_valid_token(data, rm_scores, expected)
    assert list(extra["qworker_failed"]) == [0.0, 0.0, 1.0, 0.0]
