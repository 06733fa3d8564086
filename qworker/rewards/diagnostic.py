"""Rewards for measuring a pool: they do a known amount of nothing.

``noop`` returns 1.0 at once; ``spin`` burns ``ms`` milliseconds of CPU (default
1); ``sleep`` sleeps ``ms`` milliseconds without using CPU.  The amount can come
from the payload (``{"ms": 5}``) or from params (``params={"ms": 5}``).
"""

from __future__ import annotations

import time

from ..registry.registry import reward


@reward("noop")
def noop(payload: object) -> float:
    return 1.0


def _ms(payload: object, ms: float | None) -> float:
    if ms is not None:
        return float(ms)
    if isinstance(payload, dict) and "ms" in payload:
        return float(payload["ms"])
    return 1.0


@reward("spin")
def spin(payload: object, ms: float | None = None) -> float:
    end = time.perf_counter() + _ms(payload, ms) / 1000.0
    while time.perf_counter() < end:
        pass
    return 1.0


@reward("sleep")
def sleep(payload: object, ms: float | None = None) -> float:
    time.sleep(_ms(payload, ms) / 1000.0)
    return 1.0
