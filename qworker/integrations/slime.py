"""slime: custom reward functions that score with qworker.

slime is not on PyPI; these follow its documented signatures (``--custom-rm-path``
loads ``module.function`` and awaits ``rm(args, sample)``, or with
``--group-rm`` awaits it once per group as ``rm(args, samples)``) and its
``Sample`` fields (``prompt``, ``response``, ``label``, ``metadata``,
``response_length``), checked against slime's source of August 2026::

    --custom-rm-path qworker.integrations.slime.rm
    --custom-rm-path qworker.integrations.slime.group_rm --group-rm

The reward is ``sample.metadata["qworker_reward"]``, else ``$QWORKER_REWARD``,
else ``math``.  Set ``QWORKER_CONNECT`` to share one service across rollout workers.

What a sample's reward is: without ``--reward-key``, a float (a failed task
scores the service's ``fallback_score``, and a warning carries the error).
With ``--reward-key K`` (and ``--eval-reward-key``), a dict
``{K: score, "qworker_failed": 1.0 or 0.0, "qworker_error": kind or ""}``, so the
failure stays on the sample.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence, Union

from ..engine.result import Result, ResultFuture
from ._client import reward_client
from ._outcome import FailureStreak, choose, failure_keys, warn_failed
from ._payload import from_slime

__all__ = ["rm", "group_rm"]

Reward = Union[float, dict[str, Any]]
_streak = FailureStreak()


async def rm(args: Any, sample: Any, **kwargs: Any) -> Reward:
    """One sample's reward (``--custom-rm-path qworker.integrations.slime.rm``)."""
    return (await group_rm(args, [sample], **kwargs))[0]


async def group_rm(args: Any, samples: Sequence[Any], **kwargs: Any) -> list[Reward]:
    """A group's rewards, in order (``--custom-rm-path qworker.integrations.slime.group_rm --group-rm``)."""
    futures, names = await asyncio.to_thread(_submit, args, samples)  # off the loop: a service acknowledges each batch
    results = list(await asyncio.gather(*futures))
    mapping = "ground_truth read from sample.label" + ("" if any(getattr(s, "label", None) is not None for s in samples) else
                                                        " (None in every sample)")
    for name in dict.fromkeys(names):
        warn_failed("slime rm", name, [r for r, n in zip(results, names, strict=True) if n == name], "fallback_score", mapping)
    _streak.record("slime rm", names, results, mapping)
    return [_as_reward(args, r) for r in results]


def _metadata(sample: Any) -> Any:
    return getattr(sample, "metadata", None)


def _submit(args: Any, samples: Sequence[Any]) -> tuple[list[ResultFuture], list[str]]:
    """One task per sample (and its reward's name); samples that share a reward and params go in one batch."""
    client = reward_client()
    groups: dict[tuple[str, str], list[int]] = {}
    choices = [choose(per_sample=_metadata(s)) for s in samples]
    for i, (reward, params) in enumerate(choices):
        groups.setdefault((reward, repr(params)), []).append(i)
    futures: list[Any] = [None] * len(samples)
    for indices in groups.values():
        reward, params = choices[indices[0]]
        batch = client.submit_batch(reward, [from_slime(args, samples[i]) for i in indices], params=params)
        for i, f in zip(indices, batch, strict=True):
            futures[i] = f
    return futures, [reward for reward, _ in choices]


def _as_reward(args: Any, result: Result) -> Reward:
    keys = [k for k in (getattr(args, "reward_key", None), getattr(args, "eval_reward_key", None)) if k]
    if not keys:
        return float(result.score)
    return {**{k: float(result.score) for k in keys}, **failure_keys(result)}
