"""``math``: final-answer correctness with HuggingFace ``math-verify``.

The prediction is the response's final answer (see ``_extract``: the last of
``\\boxed{}``/``\\fbox{}``, ``<answer>...</answer>`` and ``#### N``).  With no
marker, ``strict=False`` (the default) lets math-verify find the answer in the
last ``tail_chars`` of the response ("... the answer is 42"), and
``strict=True`` scores 0.

Scores: ``1.0`` when ``math_verify.verify(gold, pred)`` holds (gold first:
it is not symmetric), else ``0.0``; ``format_bonus`` is added when a marker was
found.  ``ground_truth`` is a string (LaTeX or plain), a number, or a list of
them (any one may match).  A ground truth math-verify cannot parse is an error
(``ValueError``), unless ``bad_gold_score`` says what to return instead: a bad
dataset row is never a silent 0.

math-verify times itself out with SIGALRM after ``timeout_s`` (per parse and per
comparison); that works only on a process's main thread, where qworker runs CPU
rewards.  A timeout is an error (``TimeoutError``), not a 0.  Off the main
thread (calling the function inline from a thread) there is no such timeout.
What still hangs is stopped by the pool's hard limit (the producer's
``task_timeout_s``, 60 s by default): keep ``3 * timeout_s`` below it.

``extra``: ``pred`` (the extracted answer, at most 200 characters), ``source``
(``boxed``, ``answer_tag``, ``hash``, ``fallback`` or None) and ``format_ok``.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Optional

from ..registry.registry import reward
from . import _payload
from ._extract import final_answer

__all__ = ["score_math"]

MAX_PRED_CHARS = 200  # of the prediction echoed in extra


def _math_verify():  # imported on first use: workers that never score math do not pay for sympy
    import math_verify
    from math_verify.errors import TimeoutException

    return math_verify, TimeoutException


def _timeout(timeout_s: float) -> Optional[int]:
    if threading.current_thread() is not threading.main_thread():
        return None  # signal.alarm cannot be set off the main thread
    return max(1, int(round(timeout_s)))


def _parse(text: str, timeout_s: float, what: str, fallback: str = "first_match") -> list:
    math_verify, timeout_exc = _math_verify()
    t = _timeout(timeout_s)
    try:
        return math_verify.parse(text, fallback_mode=fallback, parsing_timeout=t, raise_on_error=True)
    except timeout_exc:
        raise TimeoutError(f"math-verify took over {t} s to parse the {what} {text[:80]!r}") from None
    except Exception:
        return []  # malformed LaTeX: nothing parsable


def _gold_texts(gold: Any) -> list[str]:
    values = gold if isinstance(gold, list) else [gold]
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ValueError(f"math: ground_truth must be a string, a number or a list of them, got {type(v).__name__}")
        out.append(str(v).strip())
    if not out:
        raise ValueError("math: ground_truth is an empty list")
    return out


@functools.lru_cache(maxsize=4096)  # a GRPO group's samples share one ground truth: parse it once
def _parse_gold(text: str, timeout_s: float) -> tuple:
    return tuple(_parse_gold_uncached(text, timeout_s))  # a tuple: cached values must not be mutable


def _parse_gold_uncached(text: str, timeout_s: float) -> list:
    # no_fallback: a gold that sympy cannot read is unparsable, not compared as a raw string
    if "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text:
        return _parse(text, timeout_s, "ground truth", "no_fallback")
    return _parse(f"${text}$", timeout_s, "ground truth", "no_fallback") or _parse(text, timeout_s, "ground truth", "no_fallback")


def _parse_pred(text: str, source: str, timeout_s: float) -> list:
    if source == "boxed":
        return _parse(f"\\boxed{{{text}}}", timeout_s, "prediction")
    if source == "hash":
        return _parse(f"${text}$", timeout_s, "prediction") or _parse(text, timeout_s, "prediction")
    return _parse(text, timeout_s, "prediction")  # an <answer> body or the response's tail: math-verify finds the answer


@reward("math")
def score_math(
    payload: dict,
    strict: bool = False,
    format_bonus: float = 0.0,
    bad_gold_score: Optional[float] = None,
    timeout_s: float = 5.0,
    tail_chars: int = 1000,
    float_rounding: int = 6,
) -> dict:
    response = _payload.response(payload, "math")
    golds = _gold_texts(_payload.ground_truth(payload, "math"))
    answer = final_answer(response)
    if answer is None and strict:
        return {"score": 0.0, "pred": None, "source": None, "format_ok": False}
    if answer is None:
        pred_text, source, bonus = response[-tail_chars:], "fallback", 0.0
    else:
        pred_text, source, bonus = answer.text, answer.source, format_bonus

    parsed_golds = [p for g in golds for p in _parse_gold(g, float(timeout_s))]
    if not parsed_golds:
        if bad_gold_score is None:
            raise ValueError(f"math: math-verify cannot parse the ground truth {golds[0][:80]!r}; fix the data or set bad_gold_score")
        return {"score": float(bad_gold_score), "pred": None, "source": source, "format_ok": answer is not None, "gold_error": True}

    pred = _parse_pred(pred_text, source, timeout_s) if pred_text else []
    correct = False
    if pred:
        math_verify, timeout_exc = _math_verify()
        t = _timeout(timeout_s)
        try:
            correct = math_verify.verify(parsed_golds, pred, float_rounding=float_rounding, timeout_seconds=t, raise_on_error=True)
        except timeout_exc:
            raise TimeoutError(f"math-verify took over {t} s to compare {pred_text[:80]!r} with the ground truth") from None
        except Exception:
            correct = False  # sympy could not compare them: not equal
    shown = pred_text if source != "fallback" else (str(pred[-1]) if pred else None)
    return {
        "score": (1.0 if correct else 0.0) + bonus,
        "pred": shown[:MAX_PRED_CHARS] if shown is not None else None,
        "source": source,
        "format_ok": answer is not None,
    }
