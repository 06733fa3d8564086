"""Prompts from JSONL, and the sampler that hands them out.

Each line is an object with ``ground_truth`` and either ``prompt`` (a string, chat template already
applied) or ``messages`` (a conversation: a list of ``{"role", "content"}``), which ``prepare_rows``
renders with the tokenizer's chat template (``add_generation_prompt=True``) into ``prompt``.  Other keys
(``data_source``, ``extra_info``) are kept and passed to the reward.  ``prepare_rows`` also drops the
rows whose rendered prompt is longer than ``max_prompt_length`` tokens, and counts them.

``PromptSampler`` hands out batches of rows, reshuffling (seeded) at each pass over the data; its
position is a small dict (``state()``/``load_state()``) saved in checkpoints so a resumed run sees the
same prompts it would have seen.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Optional

__all__ = ["read_jsonl", "prepare_rows", "load_prompts", "load_numbered_prompts", "PromptSampler"]


def _valid_messages(m: Any) -> bool:
    return isinstance(m, list) and bool(m) and all(
        isinstance(x, dict) and isinstance(x.get("role"), str) and isinstance(x.get("content"), str) for x in m)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Rows of ``path``; each must be an object with a ``ground_truth`` and a string ``prompt`` or a
    non-empty ``messages`` list of ``{"role": str, "content": str}``.  Raises ``ValueError`` naming the
    line of the first bad row."""
    return [row for _, row in _read_numbered(path)]


def _read_numbered(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """``read_jsonl``'s rows, each with its line number in ``path`` (1-based)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            ok = isinstance(row, dict) and "ground_truth" in row and (
                isinstance(row.get("prompt"), str) or ("prompt" not in row and _valid_messages(row.get("messages"))))
            if not ok:
                raise ValueError(f"{path}:{lineno}: each line needs a 'ground_truth' and a string 'prompt' or a "
                                 "'messages' list of {'role': str, 'content': str}")
            rows.append((lineno, row))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def prepare_rows(rows: list[dict[str, Any]], tokenizer: Any, max_prompt_length: Optional[int]) -> tuple[list[dict[str, Any]], int]:
    """``(kept rows, number dropped)``: ``messages`` rows rendered into ``prompt`` with ``tokenizer``'s chat
    template, then rows longer than ``max_prompt_length`` tokens (None: no limit) dropped.  Needs a
    tokenizer only when a row has ``messages`` or a limit is set (else pass None)."""
    out, dropped, _ = _prepare(rows, tokenizer, max_prompt_length)
    return out, dropped


def _prepare(rows: list[dict[str, Any]], tokenizer: Any, max_prompt_length: Optional[int]) -> tuple[list[dict[str, Any]], int, list[int]]:
    """``prepare_rows``, plus the index in ``rows`` of each row kept."""
    out, dropped, kept = [], 0, []
    for i, row in enumerate(rows):
        if "prompt" not in row:
            if getattr(tokenizer, "chat_template", None) is None:
                raise ValueError("a row has 'messages' but the tokenizer has no chat template; apply one and use 'prompt'")
            row = {**row, "prompt": tokenizer.apply_chat_template(row["messages"], tokenize=False, add_generation_prompt=True)}
        if max_prompt_length is not None and len(tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]) > max_prompt_length:
            dropped += 1
            continue
        out.append(row)
        kept.append(i)
    return out, dropped, kept


def load_prompts(path: str | Path, tokenizer_path: str, max_prompt_length: Optional[int],
                 what: str = "data") -> tuple[list[dict[str, Any]], int]:
    """``(rows, dropped)``: ``read_jsonl`` then ``prepare_rows`` (the tokenizer loaded from ``tokenizer_path``
    only when needed); prints how many rows were dropped for length.  Raises ``ValueError`` when none is left."""
    rows, dropped, _ = load_numbered_prompts(path, tokenizer_path, max_prompt_length, what)
    return rows, dropped


def load_numbered_prompts(path: str | Path, tokenizer_path: str, max_prompt_length: Optional[int],
                          what: str = "data") -> tuple[list[dict[str, Any]], int, list[int]]:
    """``load_prompts``, plus each kept row's line number in ``path`` (1-based), for messages that name a row."""
    numbered = _read_numbered(path)
    rows = [row for _, row in numbered]
    tokenizer = None
    if max_prompt_length is not None or any("prompt" not in r for r in rows):
        from trainer.rollout_hf import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_path)
    kept, dropped, index = _prepare(rows, tokenizer, max_prompt_length)
    if max_prompt_length is not None:
        print(f"{what}: {path}: {len(kept)} rows kept, {dropped} dropped as longer than "
              f"max_prompt_length {max_prompt_length} tokens", flush=True)
    if not kept:
        raise ValueError(f"{path}: every row is longer than data.max_prompt_length {max_prompt_length} tokens")
    return kept, dropped, [numbered[i][0] for i in index]


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
