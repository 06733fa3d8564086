"""The payload convention every built-in reward reads.

One rollout record can be scored by any built-in reward::

    {"response": str,                 # the model's text (required)
     "ground_truth": <any JSON value>, # required by rewards that compare
     "prompt": str, "data_source": str, "extra_info": dict,   # optional
     "response_length": int,          # tokens, when the trainer knows them
     "max_response_length": int}      # the rollout's generation limit, tokens

The accessors raise ``ValueError`` naming the missing or mistyped key, which
the worker reports as ``reward_error: ValueError: ...``.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["response", "ground_truth", "length", "max_length"]


def response(payload: Any, reward: str) -> str:
    """The ``response`` string."""
    if not isinstance(payload, dict):
        raise ValueError(f"{reward} needs a payload object with a 'response', got {type(payload).__name__}")
    text = payload.get("response")
    if not isinstance(text, str):
        raise ValueError(f"{reward} needs a string 'response' in the payload, got {type(text).__name__}")
    return text


def ground_truth(payload: Any, reward: str) -> Any:
    """The ``ground_truth`` value (any JSON value; None is refused)."""
    value = payload.get("ground_truth") if isinstance(payload, dict) else None
    if value is None:
        raise ValueError(f"{reward} needs a 'ground_truth' in the payload")
    return value


def length(payload: dict, text: str) -> tuple[int, str]:
    """The response's length and its unit: ``response_length`` tokens if given, else characters."""
    tokens = payload.get("response_length")
    if tokens is not None:
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise ValueError(f"'response_length' must be a non-negative integer, got {tokens!r}")
        return tokens, "tokens"
    return len(text), "chars"


def max_length(payload: dict, given: Optional[int], name: str) -> int:
    """``given`` if set, else the payload's ``max_response_length``; must be positive."""
    value = given if given is not None else payload.get("max_response_length")
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} needs a positive max length: pass params {{'{name}': N}} or a 'max_response_length' in the payload")
    return value
