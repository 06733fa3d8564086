"""The Ray placement (policy and rollout as Ray actors on a loopback-only local Ray), and the default
strict think/answer math reward of configs/grpo.yaml scored through a Producer."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from tests.contract.trainer.conftest import toy_config


def test_ray_placement_trains_two_steps(tiny_model, toy_data, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    # before Ray is imported: it reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once, at import
    for var, value in (("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0"), ("RAY_USAGE_STATS_ENABLED", "0"), ("HF_HUB_OFFLINE", "1")):
        monkeypatch.setenv(var, value)
    ray = pytest.importorskip("ray")
    from trainer.config import config_from_dict
    from trainer.loop import GRPOTrainer
    temp = tempfile.mkdtemp(prefix="qwr-")   # short: Ray's socket paths must fit in 107 bytes
    cfg = toy_config(tiny_model, toy_data, tmp_path / "run", steps=2, prompts_per_step=4)
    cfg["placement"] = {"backend": "ray", "ray": {"temp_dir": temp}}
    try:
        with GRPOTrainer(config_from_dict(cfg)) as trainer:
            history = trainer.run()
            assert ray.is_initialized()
            assert [n["NodeManagerAddress"] for n in ray.nodes()] == ["127.0.0.1"]
        assert [h["step"] for h in history] == [0, 1]
        assert all(h["weight_sync_s"] > 0 for h in history)
        assert (tmp_path / "run" / "checkpoints" / "step-000002" / "hf").is_dir()
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def test_default_reward_is_strict_think_answer_math():
    pytest.importorskip("yaml")
    from qworker import Producer
    from trainer.config import load_config

    cfg = load_config("configs/grpo.yaml")
    payloads = [
        {"prompt": "2+2?", "response": "<think>2 and 2</think><answer>4</answer>", "ground_truth": "4"},   # 1.0 + 0.1 format
        {"prompt": "2+2?", "response": "<answer>4</answer>", "ground_truth": "4"},                         # right, no think
        {"prompt": "2+2?", "response": "<think>hmm</think><answer>5</answer>", "ground_truth": "4"},       # wrong, formatted
        {"prompt": "2+2?", "response": "the answer is 4", "ground_truth": "4"},                            # no marker: strict 0
    ]
    qcfg = {**cfg.qworker, "producer": {**cfg.qworker["producer"], "local_workers": 1}}
    os.environ.setdefault("QWORKER_RUNTIME_DIR", tempfile.mkdtemp(prefix="qwr-rt-"))
    with Producer(config=qcfg) as p:
        results = p.map(cfg.reward.name, payloads, timeout=120)
    assert [r.error for r in results] == [None] * 4
    assert [round(r.score, 6) for r in results] == [1.1, 1.0, 0.1, 0.0]
