"""``length_penalty``: length shaping, as reward managers apply it.

The score is a penalty, so it is ``<= 0``: add it to another reward with a
positive weight.  ``unit`` says what length is measured in:

* ``"auto"`` (default): ``response_length`` (tokens) when the payload has it,
  else the response's length in characters; ``max_len`` defaults to the
  payload's ``max_response_length`` and must be in the same unit.
* ``"tokens"``: the payload's ``response_length``, required.
* ``"chars"``: the response's characters, whatever the payload carries; then
  ``max_len`` and ``buffer_len`` are characters and ``max_len`` is required
  (the payload's ``max_response_length`` counts tokens).  This is the unit for
  callers that send only text, such as OpenRLHF's and slime's HTTP requests.

``mode="overlong"`` (default): DAPO's overlong buffer penalty.  Responses up to
``max_len - buffer_len`` are not penalised; inside the buffer the penalty grows
linearly, reaching ``-penalty_factor`` at ``max_len``, and stays there beyond::

    score = -penalty_factor * clip((length - (max_len - buffer_len)) / buffer_len, 0, 1)

``mode="peaked"``: no penalty at ``peak_ratio`` of ``max_len``, rising linearly
to ``max_penalty`` at ``outer_ratio`` away from it (either side), and flat
beyond; ``penalty_scale`` scales the whole curve (e.g. to anneal it)::

    r = length / max_len
    score = -penalty_scale * max_penalty * min(1, |r - peak_ratio| / outer_ratio)

``extra``: ``length``, ``unit`` (``tokens`` or ``chars``) and ``max_len``.
"""

from __future__ import annotations

from typing import Optional

from ..registry.registry import reward
from . import _payload

__all__ = ["length_penalty", "overlong", "peaked"]

MODES = ("overlong", "peaked")
UNITS = ("auto", "tokens", "chars")


def overlong(length: int, max_len: int, buffer_len: int, penalty_factor: float) -> float:
    """DAPO's overlong penalty, in ``[-penalty_factor, 0]``."""
    if not 0 < buffer_len <= max_len:
        raise ValueError(f"length_penalty: buffer_len must be in (0, max_len={max_len}], got {buffer_len}")
    exceed = length - (max_len - buffer_len)
    return -penalty_factor * min(max(exceed / buffer_len, 0.0), 1.0) or 0.0  # "or": no -0.0


def peaked(length: int, max_len: int, peak_ratio: float, outer_ratio: float, max_penalty: float, penalty_scale: float) -> float:
    """The peaked penalty, in ``[-penalty_scale * max_penalty, 0]``."""
    if outer_ratio <= 0:
        raise ValueError(f"length_penalty: outer_ratio must be positive, got {outer_ratio}")
    distance = abs(length / max_len - peak_ratio)
    return -penalty_scale * max_penalty * min(1.0, distance / outer_ratio) or 0.0


@reward("length_penalty")
def length_penalty(
    payload: dict,
    mode: str = "overlong",
    max_len: Optional[int] = None,
    buffer_len: Optional[int] = None,
    penalty_factor: float = 1.0,
    peak_ratio: float = 0.5,
    outer_ratio: float = 0.5,
    max_penalty: float = 1.0,
    penalty_scale: float = 1.0,
    unit: str = "auto",
) -> dict:
    if unit not in UNITS:
        raise ValueError(f"length_penalty: unit must be one of {UNITS}, not {unit!r}")
    text = _payload.response(payload, "length_penalty")
    if unit == "chars":
        if max_len is None:
            raise ValueError("length_penalty: unit 'chars' needs params max_len in characters "
                             "(the payload's max_response_length counts tokens)")
        length, measured = len(text), "chars"
    else:
        length, measured = _payload.length(payload, text)
        if unit == "tokens" and measured != "tokens":
            raise ValueError("length_penalty: unit 'tokens' needs 'response_length' (tokens) in the payload")
    limit = _payload.max_length(payload, max_len, "max_len")
    if mode == "overlong":
        if buffer_len is None:
            raise ValueError("length_penalty: mode 'overlong' needs buffer_len (e.g. max_len // 4)")
        score = overlong(length, limit, buffer_len, penalty_factor)
    elif mode == "peaked":
        score = peaked(length, limit, peak_ratio, outer_ratio, max_penalty, penalty_scale)
    else:
        raise ValueError(f"length_penalty: mode must be one of {MODES}, not {mode!r}")
    return {"score": score, "length": length, "unit": measured, "max_len": limit}
