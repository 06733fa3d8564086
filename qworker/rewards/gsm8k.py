"""``gsm8k``: verl-compatible strict GSM8K scoring.

The prediction is the number after the last ``#### `` in the response's final
300 characters, with ``,`` and ``$`` removed.  Scores, as verl's
``gsm8k.compute_score``: ``score`` (1.0) when the prediction equals
``ground_truth`` as a string, ``format_score`` (0.0) when an answer is present
but wrong, and 0.0 when there is no ``####`` answer.  A numeric ground truth is
compared as ``str(ground_truth)``.  ``extra["pred"]`` is the extracted answer or
None.
"""

from __future__ import annotations

import re

from ..registry.registry import reward

_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")
_CLEAN = str.maketrans("", "", ",$")
MAX_TAIL_CHARS = 300  # verl scores only the tail of long responses, for speed


def extract(response: str) -> str | None:
    """The last ``#### number`` answer in ``response``, cleaned, or None."""
    tail = response[-MAX_TAIL_CHARS:]
    found = _ANSWER.findall(tail)
    return found[-1].translate(_CLEAN) if found else None


@reward("gsm8k")
def gsm8k(payload: dict, format_score: float = 0.0, score: float = 1.0) -> dict:
    response = payload.get("response")
    if not isinstance(response, str):
        raise ValueError("gsm8k needs a string 'response' in the payload")
    if "ground_truth" not in payload:
        raise ValueError("gsm8k needs a 'ground_truth' in the payload")
    pred = extract(response)
    if pred is None:
        return {"score": 0.0, "pred": None}
    return {"score": score if pred == str(payload["ground_truth"]) else format_score, "pred": pred}
