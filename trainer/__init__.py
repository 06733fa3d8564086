"""trainer: a small GRPO trainer whose rewards run on a qworker pool, overlapped with the GPU work.

    qworker-train --config configs/grpo.yaml

Installs with ``pip install 'qworker-rl[train]'`` (torch, transformers, ray, peft; vLLM separately on GPU
hosts).  It uses qworker's public API only.  Importing this package imports neither torch nor Ray;
``GRPOTrainer`` and ``load_config`` are loaded on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GRPOTrainer", "TrainConfig", "load_config"]


def __getattr__(name: str) -> Any:
    if name == "GRPOTrainer":
        from trainer.loop import GRPOTrainer

        return GRPOTrainer
    if name in ("TrainConfig", "load_config"):
        from trainer import config

        return getattr(config, name)
    raise AttributeError(name)
