"""Learning-rate schedules: ``constant`` and ``cosine``, both with linear warmup.

``lr_multiplier(step, total_steps, kind, warmup_ratio, min_lr_ratio)`` is the factor applied to the
configured learning rate for training step ``step`` (0-based; one training step = one batch of
prompts, whatever the number of optimizer steps inside it):

- warmup: ``warmup_steps = round(warmup_ratio * total_steps)``; for ``step < warmup_steps`` the
  factor is ``(step + 1) / warmup_steps``, reaching 1.0 on the last warmup step.
- ``constant``: 1.0 after warmup.
- ``cosine``: after warmup, ``min_lr_ratio + (1 - min_lr_ratio) * (1 + cos(pi * p)) / 2`` with
  ``p = (step - warmup_steps) / max(1, total_steps - warmup_steps - 1)``, clamped to [0, 1]: 1.0 on the
  first step after warmup and exactly ``min_lr_ratio`` on the last step (when a single step follows
  the warmup, it takes 1.0).
"""

from __future__ import annotations

import math
from typing import Literal

__all__ = ["SCHEDULES", "Schedule", "lr_multiplier"]

Schedule = Literal["constant", "cosine"]
SCHEDULES = ("constant", "cosine")


def lr_multiplier(
    step: int,
    total_steps: int,
    kind: Schedule = "constant",
    warmup_ratio: float = 0.0,
    min_lr_ratio: float = 0.0,
) -> float:
    """The learning-rate factor for 0-based training ``step`` of ``total_steps`` (see the module docstring)."""
    if kind not in SCHEDULES:
        raise ValueError(f"unknown lr schedule {kind!r}; expected one of {SCHEDULES}")
    if not 0.0 <= warmup_ratio <= 1.0 or not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"warmup_ratio and min_lr_ratio must be in [0, 1], got {warmup_ratio}, {min_lr_ratio}")
    total_steps = max(1, int(total_steps))
    warmup_steps = int(round(warmup_ratio * total_steps))
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if kind == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps - 1)
    progress = min(1.0, max(0.0, (step - warmup_steps) / span))
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
