"""Prompts from JSONL: one object per line with ``prompt`` (chat template already applied) and ``ground_truth``.

``PromptSampler`` hands out batches of rows, reshuffling (seeded) at each pass over the data; its
position is a small dict (``state()``/``load_state()``) saved in checkpoints so a resumed run sees the
same prompts it would have seen.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

__all__ = ["read_jsonl", "PromptSampler"]


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Rows of ``path``; each must be an object with a string ``prompt`` and a ``ground_truth``.

    Other keys (``data_source``, ``extra_info``) are kept and passed to the reward.  Raises
    ``ValueError`` naming the line of the first bad row.
    """
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or "ground_truth" not in row:
                raise ValueError(f"{path}:{lineno}: each line needs a string 'prompt' and a 'ground_truth'")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


class PromptSampler:
    """Batches of ``batch_size`` rows, without replacement within a pass, reshuffled per pass if ``shuffle``."""

    def __init__(self, rows: list[dict[str, Any]], batch_size: int, seed: int = 0, shuffle: bool = True) -> None:
        self.rows, self.batch_size, self.seed, self.shuffle = rows, batch_size, seed, shuffle
        self.epoch, self.pos = 0, 0
        self._order = self._make_order()

    def _make_order(self) -> list[int]:
        order = list(range(len(self.rows)))
        if self.shuffle:
            random.Random(self.seed * 100003 + self.epoch).shuffle(order)
        return order

    def next_batch(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < self.batch_size:
            if self.pos >= len(self._order):
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._make_order()
            out.append(self.rows[self._order[self.pos]])
            self.pos += 1
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state(self, state: dict[str, int]) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
        self._order = self._make_order()
