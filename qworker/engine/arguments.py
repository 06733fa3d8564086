"""What a caller passes to ``submit_batch`` and ``gather`` (a ``Producer``'s and a ``Client``'s alike), checked where
it enters, before any task is made: a mistake is one clear exception naming it, never tasks built from the wrong thing.

* ``payloads`` is an iterable of payloads, one task each.  A ``str``, ``bytes``, a mapping or a data frame is refused
  (``TypeError``): iterating one would make a task per character, byte, key or column.
* ``timeout_s`` is None (the reward's own limit) or a real number (an ``int``, a ``float``, a numpy scalar) of
  seconds, finite and above 0 (``ConfigError``); it goes on as a ``float``.
* ``gather`` takes futures in order (a list, a tuple, any iterator); one future alone, a set or a mapping is refused
  (``TypeError``) with what to write instead.
"""

from __future__ import annotations

import concurrent.futures
import math
import numbers
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Optional

from .._exceptions import ConfigError

__all__ = ["check_payloads", "check_timeout_s", "check_futures"]


def check_payloads(payloads: Any) -> None:
    """``TypeError`` if ``payloads`` is one payload rather than an iterable of them (see the module's contract)."""
    if hasattr(payloads, "columns") and hasattr(payloads, "to_dict"):  # a data frame: iterating one gives its column names
        rows = "frame.to_dicts()" if hasattr(payloads, "to_dicts") else "frame.to_dict('records')"  # polars / pandas
        raise TypeError(f"payloads is a {type(payloads).__name__}, whose rows are not what iterating it gives (its "
                        f"column names): pass {rows}")
    if isinstance(payloads, (str, bytes, bytearray, memoryview, Mapping)):
        raise TypeError(f"payloads must be an iterable of payloads (e.g. a list of dicts), got a {type(payloads).__name__}; "
                        "for one payload use submit(reward, payload) or submit_batch(reward, [payload])")
    if not hasattr(payloads, "__iter__"):
        raise TypeError(f"payloads must be an iterable of payloads (e.g. a list of dicts), got a {type(payloads).__name__}")


def check_timeout_s(timeout_s: Optional[float]) -> Optional[float]:
    """``timeout_s`` as a ``float`` (None as it is); ``ConfigError`` unless it is a finite real number above 0."""
    if timeout_s is None:
        return None
    try:
        seconds = None if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) else float(timeout_s)
    except OverflowError:  # an int past a float's range
        seconds = math.inf
    if seconds is None or not 0 < seconds < math.inf:
        raise ConfigError(f"timeout_s must be a finite number of seconds above 0 (or None for the reward's own limit), "
                          f"got {timeout_s!r}")
    return seconds


def check_futures(futures: Any) -> None:
    """``TypeError`` if ``futures`` is a single future rather than a sequence of them."""
    if isinstance(futures, concurrent.futures.Future):
        raise TypeError("gather() takes a list of futures (as submit_batch returns); for one future write "
                        "future.result(timeout) or gather([future])")
    if isinstance(futures, Mapping):  # which of keys or values holds the futures is the caller's to say
        raise TypeError(f"gather() returns results in the order of its futures; pass a list, not a {type(futures).__name__}: "
                        "list(d) for futures that are its keys, list(d.values()) for its values")
    if isinstance(futures, AbstractSet):  # no order: its results could not be paired with the futures
        raise TypeError(f"gather() returns results in the order of its futures; a {type(futures).__name__} has none: "
                        "pass a list (as submit_batch returns)")
