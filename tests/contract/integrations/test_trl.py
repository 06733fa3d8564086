"""TRL: real ``GRPOTrainer`` runs on CPU with qworker rewards.

A tiny Qwen2 model built from a config and a tokenizer built locally
(``tiny.py``): nothing is downloaded.  Each run trains 2 steps with
``log_completions=True``, so TRL writes the completions table it logs (one
parquet file per step, with each reward function's score per completion);
the tests compare that table, and the logged reward means, with the scores
qworker gives the same completions directly.  Not exercised: vLLM generation,
several processes (accelerate), PEFT.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")
pd = pytest.importorskip("pandas")

from datasets import Dataset  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from qworker import ConfigError, RewardError  # noqa: E402
from qworker.integrations import _client  # noqa: E402
from qworker.integrations.trl import AsyncQworkerReward, QworkerGRPOTrainer, QworkerReward, RewardsFailed, log_names  # noqa: E402
from qworker.registry.registry import registered  # noqa: E402
from tests.contract.integrations.async_rewards import length_parity, trl_style  # noqa: E402
from tests.contract.integrations.tiny import WORDS, tokenizer  # noqa: E402

STEPS = 2


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def tiny_model(tok) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        bos_token_id=None, tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


def config(out: Path, **kw) -> GRPOConfig:
    base = dict(
        output_dir=str(out), use_cpu=True, bf16=False, report_to="none", use_vllm=False, max_steps=STEPS, logging_steps=1,
        per_device_train_batch_size=4, num_generations=2, max_completion_length=8, log_completions=True,
        save_strategy="no", dataloader_num_workers=0, seed=0, learning_rate=1e-3,
    )
    base.update(kw)
    return GRPOConfig(**base)


def dataset(conversational: bool = False, answer_column: str = "ground_truth") -> Dataset:
    rows = [("what is 2+2 ?", "4"), ("what is 3+3 ?", "6")] * 4
    if conversational:
        return Dataset.from_list([{"prompt": [{"role": "user", "content": q}], answer_column: a} for q, a in rows])
    return Dataset.from_list([{"prompt": q, answer_column: a} for q, a in rows])


def logged_table(out: Path) -> pd.DataFrame:
    files = sorted((out / "completions").glob("completions_*.parquet"))
    assert len(files) == STEPS, files
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


def completion_text(c) -> str:
    return c if isinstance(c, str) else c[-1]["content"]


def assert_table_matches_qworker(producer, trainer, out: Path, name: str, reward: str) -> pd.DataFrame:
    """Every score TRL logged equals qworker's for that completion (NaN where qworker failed),
    and the logged per-step means equal those of the table."""
    table = logged_table(out)
    direct = producer.map(reward, [{"response": completion_text(c)} for c in table["completion"]])
    for logged, d, kind in zip(table[name], direct, table[log_names(name)[1]], strict=True):
        if d.ok:
            assert logged == pytest.approx(d.score) and pd.isna(kind)
        else:
            assert math.isnan(logged) and kind == str(d.error_kind)
    means = [h[f"rewards/{name}/mean"] for h in trainer.state.log_history if f"rewards/{name}/mean" in h]
    assert len(means) == STEPS
    for step, mean in zip(sorted(table["step"].unique()), means, strict=True):
        column = table.loc[table["step"] == step, name]
        if column.notna().any():
            assert mean == pytest.approx(column.mean(skipna=True))
    failed = [h[log_names(name)[0]] for h in trainer.state.log_history if log_names(name)[0] in h]
    assert failed == [pytest.approx(table.loc[table["step"] == s, name].isna().mean()) for s in sorted(table["step"].unique())]
    return table


def test_grpo_trainer_logs_qworkers_scores(producer, tmp_path: Path) -> None:
    tok = tokenizer()
    reward = QworkerReward("adapter_len")
    trainer = GRPOTrainer(model=tiny_model(tok), reward_funcs=[reward], args=config(tmp_path),
                          train_dataset=dataset(), processing_class=tok)
    trainer.train()
    assert trainer.reward_func_names == ["qworker_adapter_len"]
    table = assert_table_matches_qworker(producer, trainer, tmp_path, "qworker_adapter_len", "adapter_len")
    assert len(table) == STEPS * 4


def test_overlapped_trainer_submits_before_the_forward_passes(producer, tmp_path: Path) -> None:
    tok = tokenizer()
    events: list[str] = []

    class Recording(QworkerGRPOTrainer):
        def _get_per_token_logps_and_entropies(self, *a, **kw):
            events.append("logps")
            return super()._get_per_token_logps_and_entropies(*a, **kw)

    class RecordingReward(QworkerReward):
        def prefetch(self, *a, **kw):
            events.append("submit")
            return super().prefetch(*a, **kw)

        def __call__(self, *a, **kw):
            events.append("gather")
            return super().__call__(*a, **kw)

    reward = RecordingReward("adapter_len", name="len")
    model_dir = tmp_path / "model"  # with beta > 0, TRL loads the reference model from the model's path
    tiny_model(tok).save_pretrained(str(model_dir))
    trainer = Recording(model=str(model_dir), reward_funcs=[reward], args=config(tmp_path, beta=0.04),
                        train_dataset=dataset(), processing_class=tok)
    trainer.train()
    # per step: submit, the reference model's forward, gather (then the loss's own forward)
    steps = [events[i:i + 3] for i, e in enumerate(events) if e == "submit"]
    assert steps == [["submit", "logps", "gather"]] * STEPS, events
    assert reward.prefetch_hits == STEPS
    assert reward.max_response_length == 8  # filled from max_completion_length
    assert_table_matches_qworker(producer, trainer, tmp_path, "len", "adapter_len")


def test_conversational_data_async_reward(producer, tmp_path: Path) -> None:
    tok = tokenizer()
    seen: list[dict] = []
    real_submit = producer.submit_batch

    def spy(reward, payloads, params=None):
        seen.extend(payloads)
        return real_submit(reward, payloads, params=params)

    reward = AsyncQworkerReward("adapter_len", name="len_async")
    trainer = GRPOTrainer(model=tiny_model(tok), reward_funcs=[reward], args=config(tmp_path),
                          train_dataset=dataset(conversational=True), processing_class=tok)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(producer, "submit_batch", spy)
        trainer.train()
    table = assert_table_matches_qworker(producer, trainer, tmp_path, "len_async", "adapter_len")
    assert [p["response"] for p in seen] == [c[-1]["content"] for c in table["completion"]]
    assert {p["prompt"] for p in seen} <= {"what is 2+2 ?", "what is 3+3 ?"}
    assert all(p["ground_truth"] == {"what is 2+2 ?": "4", "what is 3+3 ?": "6"}[p["prompt"]] for p in seen)
    assert all(0 <= p["response_length"] <= 8 for p in seen)


def test_failures_are_none_unless_a_fallback_is_asked(producer) -> None:
    kw = dict(prompts=["q", "q"], completions=["a", "b"], completion_ids=[[1], [2]], ground_truth=["x", "y"])
    assert QworkerReward("adapter_fail", fail_fast=False)(**kw) == [None, None]
    assert QworkerReward("adapter_fail", fallback=-1.0, fail_fast=False)(**kw) == [-1.0, -1.0]
    metrics = {}
    assert QworkerReward("adapter_len")(log_metric=metrics.__setitem__, **kw) == [1 / 6, 1 / 6]
    assert metrics == {"qworker/adapter_len/failed": 0.0}


def test_reward_objects_pickle(producer) -> None:
    reward = QworkerReward("adapter_len", ground_truth_column="ground_truth")
    reward.prefetch(prompts=["q"], completions=["abc"], ground_truth=["x"])
    copy = pickle.loads(pickle.dumps(reward))
    assert copy.__name__ == "qworker_adapter_len" and copy._prefetched is None
    assert copy(prompts=["q"], completions=["abc"], ground_truth=["x"]) == [0.5]


def test_a_misspelled_reward_name_raises_in_the_constructor_with_the_closest_names(producer, monkeypatch) -> None:
    with pytest.raises(RewardError, match=r"QworkerReward\('adapter_lne'\): .*did you mean 'adapter_len'"):
        QworkerReward("adapter_lne")  # checked against the producer the adapters use
    with pytest.raises(ConfigError, match="unknown param 'nope' for reward 'adapter_len'"):
        QworkerReward("adapter_len", params={"nope": 1})
    monkeypatch.delenv("QWORKER_CONNECT", raising=False)
    monkeypatch.delenv("QWORKER_CONFIG", raising=False)
    _client.use_client(None)  # no client yet: checked as the embedded producer will resolve it, without starting one
    try:
        with pytest.raises(RewardError, match=r"QworkerReward\('maht'\): 'maht' is not a known reward; .*did you mean 'math'"):
            QworkerReward("maht")
        assert QworkerReward("math").reward == "math"
        assert _client.current_client() is None
    finally:
        _client.use_client(producer)


@pytest.mark.parametrize("form", [QworkerReward, AsyncQworkerReward])
def test_a_wrong_ground_truth_column_stops_training_at_the_first_step_naming_the_columns(producer, tmp_path: Path, form) -> None:
    tok = tokenizer()
    trainer = GRPOTrainer(model=tiny_model(tok), reward_funcs=[form("math")], args=config(tmp_path),
                          train_dataset=dataset(answer_column="target"), processing_class=tok)
    with pytest.raises(RewardsFailed) as info:
        trainer.train()
    message = str(info.value)
    assert trainer.state.global_step == 0  # the first step, not step after step with a zero loss
    assert "all 4 'math' tasks of this call failed" in message and "math needs a 'ground_truth'" in message
    assert "no ground_truth: none of the columns 'ground_truth', 'solution', 'answer', 'label'" in message
    assert "ground_truth_column=" in message and "'target'" in message and "fail_fast=False" in message
    assert "\n" not in message
    # named, it is read: no failure
    reward = QworkerReward("math", ground_truth_column="target")
    kw = dict(prompts=["q", "q"], completions=["\\boxed{4}", "\\boxed{5}"], target=["4", "6"])
    assert reward(**kw) == [1.0, 0.0]
    assert "ground_truth from column 'target' (named by ground_truth_column=)" in reward._columns_read


def test_a_call_past_fail_fraction_raises_and_fail_fast_false_trains_on(producer) -> None:
    # adapter_len fails a response whose length is 6 mod 7: here 2 of 4
    kw = dict(prompts=["q"] * 4, completions=["x" * 6, "x" * 13, "x", "xx"])
    with pytest.raises(RewardsFailed, match=r"2 of 4 'adapter_len' tasks of this call failed \(fail_fraction=0.5\)"):
        QworkerReward("adapter_len", fail_fraction=0.5)(**kw)
    assert QworkerReward("adapter_len")(**kw) == [None, None, 1 / 6, 2 / 6]  # default: only a call that failed whole
    with pytest.raises(RewardsFailed, match="all 2 'adapter_fail' tasks"):
        QworkerReward("adapter_fail")(prompts=["q", "q"], completions=["a", "b"])
    assert QworkerReward("adapter_fail", fail_fast=False, fail_fraction=0.1)(prompts=["q"], completions=["a"]) == [None]
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="fail_fraction must be a fraction of a call's tasks in"):
            QworkerReward("adapter_len", fail_fraction=bad)


def test_async_def_rewards_score_through_the_adapter_given_by_name_or_as_functions(producer, tmp_path: Path) -> None:
    kw = dict(prompts=["q"] * 3, completions=["x", "xx", "xxx"])
    registered_async = registered()["adapter_async"].fn
    assert QworkerReward(registered_async).reward == "adapter_async"
    assert QworkerReward(registered_async)(**kw) == QworkerReward("adapter_len")(**kw) == [1 / 6, 2 / 6, 3 / 6]
    plain_async = QworkerReward(length_parity)
    assert plain_async.reward == "tests.contract.integrations.async_rewards:length_parity"
    assert plain_async(**kw) == [1.0, 0.0, 1.0]

    async def nested(payload):
        return 1.0

    with pytest.raises(TypeError, match="is not registered with @reward and no worker can import it by name"):
        QworkerReward(nested)
    with pytest.raises(TypeError, match="'trl_style' takes 'prompts' first, as a framework's own reward function does"):
        QworkerReward(trl_style)
    tok = tokenizer()
    trainer = GRPOTrainer(model=tiny_model(tok), reward_funcs=[QworkerReward(registered_async, name="len_async_fn")],
                          args=config(tmp_path), train_dataset=dataset(), processing_class=tok)
    trainer.train()
    assert_table_matches_qworker(producer, trainer, tmp_path, "len_async_fn", "adapter_len")
