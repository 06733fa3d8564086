"""verl and TRL names for our config keys: what each sets, fallbacks, conflicts; and ppo_epochs."""

from __future__ import annotations

import pytest

from trainer.config import ConfigurationError, config_from_dict

BASE = {"model": {"path": "m"}, "data": {"path": "d.jsonl"}}


def cfg(**sections):
    return config_from_dict({**BASE, **sections})


def test_trl_epsilon_and_epsilon_high():
    t = cfg(train={"epsilon": 0.2, "epsilon_high": 0.28}).train
    assert (t.clip_range_left, t.clip_range_right) == (0.2, 0.28)
    t = cfg(train={"epsilon": 0.3}).train          # epsilon_high defaults to epsilon, as in TRL
    assert (t.clip_range_left, t.clip_range_right) == (0.3, 0.3)


def test_verl_clip_ratios():
    t = cfg(train={"clip_ratio": 0.25}).train
    assert (t.clip_range_left, t.clip_range_right) == (0.25, 0.25)
    t = cfg(train={"clip_ratio": 0.2, "clip_ratio_high": 0.28}).train   # the specific name wins over the fallback
    assert (t.clip_range_left, t.clip_range_right) == (0.2, 0.28)
    t = cfg(train={"clip_ratio_low": 0.1, "clip_ratio_high": 0.3}).train
    assert (t.clip_range_left, t.clip_range_right) == (0.1, 0.3)


def test_kl_epochs_lr_and_rollout_names():
    c = cfg(train={"beta": 0.04, "num_iterations": 2, "learning_rate": 1e-5, "grad_clip": 0.5, "lr_warmup_steps_ratio": 0.1},
            rollout={"n": 4, "max_completion_length": 64})
    assert (c.train.kl_coef, c.train.ppo_epochs, c.train.lr, c.train.max_grad_norm, c.train.warmup_ratio) == (0.04, 2, 1e-5, 0.5, 0.1)
    assert (c.rollout.num_generations, c.rollout.max_new_tokens) == (4, 64)
    assert cfg(train={"kl_loss_coef": 0.001}).train.kl_coef == 0.001
    assert cfg(rollout={"response_length": 32}).rollout.max_new_tokens == 32
    # the same value under two names is fine
    assert cfg(train={"beta": 0.01, "kl_loss_coef": 0.01, "kl_coef": 0.01}).train.kl_coef == 0.01


@pytest.mark.parametrize("name, value, ours", [
    ("loss_agg_mode", "token-mean", "token"), ("loss_agg_mode", "seq-mean-token-mean", "sequence"),
    ("loss_agg_mode", "seq-mean-token-sum-norm", "dr_grpo"), ("loss_type", "grpo", "sequence"),
    ("loss_type", "bnpo", "token"), ("loss_type", "dapo", "token"), ("loss_type", "dr_grpo", "dr_grpo"),
])
def test_loss_aggregation_names(name, value, ours):
    assert cfg(train={name: value}).train.loss_aggregation == ours


def test_advantage_and_schedule_names():
    assert cfg(train={"scale_rewards": False}).train.advantage == "grpo_no_std"
    assert cfg(train={"scale_rewards": "group"}).train.advantage == "grpo"
    assert cfg(train={"norm_adv_by_std_in_grpo": False}).train.advantage == "grpo_no_std"
    assert cfg(train={"lr_scheduler_type": "cosine"}).train.lr_schedule == "cosine"


@pytest.mark.parametrize("train, message", [
    ({"beta": 0.04, "kl_coef": 0.01}, r"train.kl_coef: set to different values by train.kl_coef=0.01, train.beta=0.04"),
    ({"beta": 0.04, "kl_loss_coef": 0.001}, "train.kl_coef: set to different values"),
    ({"epsilon": 0.2, "clip_ratio_low": 0.1}, "train.clip_range_left: set to different values"),
    ({"epsilon": 0.3, "clip_ratio": 0.2}, "train.clip_range_right: set to different values"),   # two fallbacks disagree
    ({"loss_type": "grpo", "loss_agg_mode": "token-mean"}, "train.loss_aggregation: set to different values"),
    ({"loss_type": "grpo", "loss_aggregation": "token"}, "train.loss_aggregation"),
    ({"num_iterations": 2, "ppo_epochs": 3}, "train.ppo_epochs"),
    ({"loss_agg_mode": "seq-mean-token-sum"}, r"train.loss_agg_mode \(verl\): 'seq-mean-token-sum' is not one of"),
    ({"scale_rewards": "batch"}, "train.scale_rewards"),
    ({"scale_rewards": 1}, "train.scale_rewards"),   # True, not 1
    ({"ppo_mini_batch_size": 4}, "unknown key"),     # counts prompts in verl, sequences here: not an alias
])
def test_conflicts_and_bad_values_are_errors(train, message):
    with pytest.raises(ConfigurationError, match=message):
        cfg(train=train)


def test_ppo_epochs_train_the_batch_again(tiny_model, toy_data, tmp_path):
    pytest.importorskip("torch")
    from tests.contract.trainer.conftest import toy_config
    from trainer.loop import GRPOTrainer

    def run(epochs: int, name: str, mini: int | None = None) -> list[dict]:
        c = toy_config(tiny_model, toy_data, tmp_path / name, steps=2, prompts_per_step=4, micro_batch_size=8,
                       mini_batch_size=mini, ppo_epochs=epochs)
        with GRPOTrainer(config_from_dict(c)) as t:
            return t.run()

    assert [h["optimizer_steps"] for h in run(3, "mini", 16)] == [6, 6]   # 32 sequences / 16 per mini-batch, 3 times
    one, three = run(1, "one"), run(3, "three")   # one mini-batch of 32
    assert [h["optimizer_steps"] for h in one] == [1, 1] and [h["optimizer_steps"] for h in three] == [3, 3]
    assert one[0]["clip_frac"] == 0.0                          # the first pass is on-policy: ratio 1 until the first step
    assert three[0]["clip_frac"] > 0.0                         # later epochs move the ratio past the clip at lr 1e-2
    assert one[0]["reward_mean"] == three[0]["reward_mean"]    # the same first batch
