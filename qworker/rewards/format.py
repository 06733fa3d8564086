"""``format`` and ``tag_count``: is the response laid out as asked?

``format`` scores ``score`` (1.0) when the whole response matches ``pattern``
(default: ``<think>...</think>`` then ``<answer>...</answer>``, whitespace
around them allowed; ``re.DOTALL``), else 0.0.

``tag_count`` gives partial credit while a model learns the layout: each tag
of ``tags`` that appears exactly once scores ``1/len(tags)``; with
``ordered=True`` (default) the credit is given only up to the first tag that
appears out of order.  Both put ``matched``/``found`` in ``extra``.

A user ``pattern`` that backtracks catastrophically holds the GIL; the pool's
hard limit kills it (``timeout: ...``), and the pool goes on serving.
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

from ..registry.registry import reward
from . import _payload

__all__ = ["format_match", "tag_count", "THINK_ANSWER", "TAGS"]

THINK_ANSWER = r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$"
TAGS = ("<think>", "</think>", "<answer>", "</answer>")


@functools.lru_cache(maxsize=64)
def _compile(pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error as exc:
        raise ValueError(f"format: invalid pattern {pattern!r}: {exc}") from None


@reward("format")
def format_match(payload: dict, pattern: str = THINK_ANSWER, score: float = 1.0) -> dict:
    text = _payload.response(payload, "format")
    matched = _compile(pattern).fullmatch(text) is not None
    return {"score": score if matched else 0.0, "matched": matched}


@reward("tag_count")
def tag_count(payload: dict, tags: Sequence[str] = TAGS, ordered: bool = True) -> dict:
    text = _payload.response(payload, "tag_count")
    if not tags:
        raise ValueError("tag_count: 'tags' must not be empty")
    found = 0
    last_at = -1
    for tag in tags:
        at = text.find(tag)
        if at == -1 or text.find(tag, at + 1) != -1:
            if ordered:
                break
            continue
        if ordered and at < last_at:
            break
        last_at = at
        found += 1
    return {"score": found / len(tags), "found": found}
