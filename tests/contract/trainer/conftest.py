from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2 and its char-level tokenizer, saved locally (nothing downloaded): 4 heads of 16,
    the model the learning tests' seeds and thresholds were measured on (``trainer.tiny``'s default now
    has 2 heads of 32, which vLLM's CPU attention runs; the parameters are the same)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    os.environ["HF_HUB_OFFLINE"] = "1"
    from trainer.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", heads=4)


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainer.toy import write_toy_dataset

    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "toy.jsonl", n=200, seed=0)


def toy_config(model: Path, data: Path, log_dir: Path, **train: object) -> dict:
    """The copy-a-digit toy run as a config mapping; ``train`` keys override the train section."""
    return {
        "model": {"path": str(model)},
        "data": {"path": str(data)},
        "rollout": {"num_generations": 8, "max_new_tokens": 2},
        "train": {"steps": 60, "prompts_per_step": 16, "micro_batch_size": 128, "lr": 1e-2, "seed": 0, **train},
        "reward": {"name": "toy_digit", "modules": ["trainer.toy"]},
        "qworker": {"producer": {"local_workers": 1, "cache_path": None}},
        "log": {"dir": str(log_dir), "print_every": 10},
        "checkpoint": {"resume": True},
    }
