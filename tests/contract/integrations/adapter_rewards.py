"""Rewards the adapter tests score with (imported by the pool's workers)."""

from __future__ import annotations

from qworker import reward


@reward("adapter_len")
def adapter_len(payload: dict) -> dict:
    """A deterministic score from the response's length; raises when length % 7 == 6,
    so some tasks of a random completion batch fail."""
    n = len(payload["response"])
    if n % 7 == 6:
        raise ValueError(f"length {n} is 6 mod 7")
    return {"score": (n % 7) / 6, "length": n}


@reward("adapter_echo")
def adapter_echo(payload: dict) -> dict:
    """Scores 1.0 and returns the payload it got, so tests can check the field mapping."""
    return {"score": 1.0, "payload": payload}


@reward("adapter_fail")
def adapter_fail(payload: dict) -> float:
    raise RuntimeError("this reward always fails")


@reward("adapter_async")
async def adapter_async(payload: dict) -> dict:
    """``adapter_len`` as an ``async def`` reward: the worker awaits it."""
    import asyncio

    await asyncio.sleep(0)
    return adapter_len(payload)
