"""An ``async def`` reward that is not registered: adapters name it ``module:function``."""

from __future__ import annotations

import asyncio


async def length_parity(payload: dict) -> float:
    await asyncio.sleep(0)
    return float(len(payload["response"]) % 2)


async def trl_style(prompts: list, completions: list, **kwargs: object) -> list[float]:
    """A TRL reward function, not a qworker one."""
    return [1.0 for _ in completions]
