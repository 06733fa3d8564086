"""Learning-rate schedules against hand-computed values, and the config's checks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trainer.config import ConfigurationError, config_from_dict, load_config
from trainer.schedule import lr_multiplier

REPO = Path(__file__).resolve().parents[3]

BASE = {"model": {"path": "m"}, "data": {"path": "d.jsonl"}}


def test_constant_with_warmup():
    # 10 steps, warmup 0.2 -> 2 warmup steps: 1/2, 2/2, then 1.0
    assert [lr_multiplier(s, 10, "constant", 0.2) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]
    assert lr_multiplier(0, 10, "constant") == 1.0


def test_cosine_with_warmup_and_floor():
    got = [lr_multiplier(s, 10, "cosine", 0.2, 0.1) for s in range(10)]
    assert got[:3] == [0.5, 1.0, 1.0]          # warmup, then the peak on the first step after it
    assert got[9] == pytest.approx(0.1)        # the last step ends exactly at min_lr_ratio
    # step 5: p = (5 - 2) / (10 - 2 - 1) = 3/7; 0.1 + 0.9 * (1 + cos(3 pi / 7)) / 2 = 0.650134
    assert got[5] == pytest.approx(0.650134, abs=1e-6)
    assert got[5] == pytest.approx(0.1 + 0.45 * (1 + math.cos(3 * math.pi / 7)))
    assert all(a >= b for a, b in zip(got[2:-1], got[3:], strict=True))   # never rises after warmup
    assert lr_multiplier(99, 10, "cosine", 0.0, 0.0) == pytest.approx(0.0)   # past the end: stays at the floor


def test_schedule_checks():
    with pytest.raises(ValueError):
        lr_multiplier(0, 10, "linear")
    with pytest.raises(ValueError):
        lr_multiplier(0, 10, "cosine", 1.5)


def test_config_defaults_and_yaml_numbers():
    cfg = config_from_dict({**BASE, "train": {"lr": "1e-5", "kl_coef": 0}})
    assert cfg.train.lr == 1e-5 and cfg.train.kl_coef == 0.0
    assert cfg.reward.name == "think_math" and cfg.train.overlap is True


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"train": {"lr_rate": 1.0}}, "unknown key"),
        ({"train": {"advantage": "ppo"}}, "train.advantage"),
        ({"train": {"loss_aggregation": "batch"}}, "train.loss_aggregation"),
        ({"rollout": {"num_generations": 1}}, "num_generations >= 2"),
        ({"train": {"clip_range_left": 1.0}}, "clip_range_left"),
        ({"train": {"steps": "ten"}}, "train.steps: expected int"),
        ({"model": {"path": ""}}, "model.path"),
    ],
)
def test_config_errors_name_the_key(patch, message):
    data = {**BASE, **patch}
    if "model" in patch:
        data["model"] = patch["model"]
    with pytest.raises(ConfigurationError, match=message):
        config_from_dict(data)


def test_bundled_configs_load_and_overrides_apply():
    cfg = load_config(str(REPO / "configs" / "grpo.yaml"), ["train.steps=3", "rollout.vllm.weight_sync=shm_file"])
    assert cfg.train.steps == 3 and cfg.rollout.vllm.weight_sync == "shm_file"
    assert "think_math" in cfg.qworker["rewards"]
    toy = load_config(str(REPO / "configs" / "grpo-toy.yaml"))
    assert toy.reward.name == "toy_digit" and toy.reward.modules == ["trainer.toy"]
