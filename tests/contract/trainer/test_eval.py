"""Held-out evaluation in the trainer: before training, every N steps and after the last, with the
training reward; mean@k / pass@k in the step log and on stdout; and the step log's rollout fields
(entropy, lengths, truncation, zero-variance groups, a composite's components)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.contract.trainer.conftest import toy_config  # noqa: E402
from trainer.config import ConfigurationError, config_from_dict  # noqa: E402
from trainer.loop import GRPOTrainer  # noqa: E402
from trainer.toy import write_toy_dataset  # noqa: E402

COMBO = {"components": [{"name": "digit", "reward": "toy_digit", "weight": 1.0},
                        {"name": "rep", "reward": "toy_repeat", "weight": 0.5}]}


def test_evaluation_schedule_metrics_and_step_fields(tiny_model, toy_data, tmp_path, capsys):
    held = write_toy_dataset(tmp_path / "held.jsonl", n=12, seed=7)
    cfg = toy_config(tiny_model, toy_data, tmp_path / "run", steps=4, prompts_per_step=4)
    cfg["eval"] = {"data": str(held), "every_n_steps": 2, "k": 2, "n": 3, "max_prompts": 10}
    cfg["reward"]["name"] = "toy_combo"
    cfg["qworker"]["rewards"] = {"toy_combo": COMBO}
    cfg["log"]["print_every"] = 1
    with GRPOTrainer(config_from_dict(cfg)) as t:
        assert t.evaluator is not None
        again = t.evaluator.run(0)
        history = t.run()
        evals = t.eval_history
    # before step 0, before step 2 (every 2), after the last
    assert [e["eval/updates"] for e in evals] == [0.0, 2.0, 4.0]
    first = evals[0]
    for key in ("eval/mean@2", "eval/pass@2", "eval/pass@1", "eval/reward/digit", "eval/reward/rep"):
        assert key in first
    assert first["eval/prompts"] == 10.0 and first["eval/samples"] == 3.0
    # the same seed every time: the same weights give the same evaluation
    assert {k: v for k, v in again.items() if k != "eval/s"} == {k: v for k, v in first.items() if k != "eval/s"}
    assert 0.0 <= first["eval/pass@1"] <= first["eval/pass@2"] <= 1.0
    # each evaluation is part of the record of the step it precedes; the last has a record of its own
    assert [("eval/mean@2" in h) for h in history] == [True, False, True, False]
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2, 3, 4]
    assert lines[-1]["eval/updates"] == 4.0 and "step_s" not in lines[-1]
    out = capsys.readouterr().out
    assert "eval after 0 steps: mean@2" in out and "eval after 4 steps: mean@2" in out and "10 held-out prompts x 3 samples" in out
    # the step log's rollout fields
    h = history[1]
    assert h["entropy"] > 0.0
    assert h["response_len_min"] <= h["response_len_p50"] <= h["response_len_p90"] <= h["response_len_max"] <= 2
    assert 0.0 <= h["truncated_frac"] <= 1.0 and 0.0 <= h["zero_var_group_frac"] <= 1.0
    assert h["reward_mean"] == pytest.approx(h["reward/digit"] + 0.5 * h["reward/rep"], abs=1e-6)
    assert "ent " in out and "trunc " in out


def test_no_evaluation_without_data_and_config_checks(tiny_model, toy_data, tmp_path):
    with GRPOTrainer(config_from_dict(toy_config(tiny_model, toy_data, tmp_path / "run", steps=1, prompts_per_step=4))) as t:
        assert t.evaluator is None and t.evaluate(0) == {}
        history = t.run()
    assert not any(k.startswith("eval/") for k in history[0])
    base = toy_config(tiny_model, toy_data, tmp_path / "x")
    with pytest.raises(ConfigurationError, match="eval.n"):
        config_from_dict({**base, "eval": {"data": "h.jsonl", "k": 4, "n": 2}})
    with pytest.raises(ConfigurationError, match="eval.k"):
        config_from_dict({**base, "eval": {"k": 0}})


def test_evaluation_between_off_policy_steps(tiny_model, toy_data, tmp_path):
    # the prefetch thread is joined before each step returns, so an evaluation never races a generation
    held = write_toy_dataset(tmp_path / "held.jsonl", n=8, seed=7)
    cfg = toy_config(tiny_model, toy_data, tmp_path / "run", steps=3, prompts_per_step=4, off_policy=True)
    cfg["eval"] = {"data": str(held), "every_n_steps": 1, "k": 2, "temperature": 0.0}
    with GRPOTrainer(config_from_dict(cfg)) as t:
        history = t.run()
        evals = t.eval_history
    assert [e["eval/updates"] for e in evals] == [0.0, 1.0, 2.0, 3.0]
    assert all("eval/mean@2" in h for h in history) and history[1]["staleness"] == 1.0
    # greedy: both samples of a prompt are the same, so pass@2 == pass@1
    assert all(e["eval/pass@2"] == e["eval/pass@1"] for e in evals)
