"""verl: a custom reward function and a reward manager that score through qworker.

Tested against verl 0.9.1 (the reward loop of ``verl.experimental.reward_loop``).

**As a custom reward function** (verl's own ``naive`` manager decodes, this scores)::

    reward.custom_reward_function.path=pkg://qworker.integrations.verl
    reward.custom_reward_function.name=compute_score

**As a reward manager** (decodes the prompt too, and passes token counts)::

    reward.reward_manager.source=importlib
    reward.reward_manager.name=QworkerRewardManager
    reward.reward_manager.module.path=pkg://qworker.integrations.verl

Both score every trajectory as one qworker task through ``reward_client()``
(``QWORKER_CONNECT`` for one service shared by all of verl's reward workers).
The reward is ``extra_info["qworker_reward"]``, else ``qworker_reward`` in
``reward.custom_reward_function.reward_kwargs`` (or the manager's
``reward.reward_kwargs``), else ``$QWORKER_REWARD``, else ``math``.

Every sample returns the same keys (verl stacks them into arrays, taking the
keys of the first sample): ``score`` (float; a failed task scores the service's
``fallback_score``), ``qworker_failed`` (1.0 or 0.0), ``qworker_error`` (the
error kind or ``""``) and ``qworker_extra``: the reward's ``extra`` as JSON
text (``""`` when it has none, as for a failed task).  verl's validation
metrics skip text, and its generation dumps keep it.  The ``extra`` keys named
in ``qworker_extra_keys`` (a list, in ``reward_kwargs`` beside
``qworker_reward``) also become keys of their own in every sample, so verl
averages them: a number or string as it is, a list or dict as JSON text, and
NaN where a sample's ``extra`` lacks the key (a failed task, or a reward that
did not return it).  A failure is also logged as a warning with its error.

Fail fast: ``QworkerRewardManager`` checks the run's reward name in its
constructor, and either way ``$QWORKER_MAX_CONSECUTIVE_FAILURES`` (default 64;
0: off) tasks in a row failing in one process raise ``RewardsFailed``.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional, Sequence

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from ..engine.result import Result
from ._client import reward_client
from ._outcome import FailureStreak, check_reward, choose, failure_keys, warn_failed
from ._payload import from_verl

__all__ = ["compute_score", "QworkerRewardManager", "score_payload", "extra_keys", "EXTRA_KEY"]

EXTRA_KEY = "qworker_extra"
_RESERVED = frozenset({"score", "qworker_failed", "qworker_error", EXTRA_KEY})
_streak = FailureStreak()


def extra_keys(value: Any) -> tuple[str, ...]:
    """``qworker_extra_keys`` as a tuple of names (None: none); one ``ValueError`` line for anything else."""
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else list(value) if hasattr(value, "__iter__") else None
    if names is None or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"qworker_extra_keys must be a list of the reward's extra keys, got {value!r}")
    taken = sorted(_RESERVED.intersection(names))
    if taken:
        raise ValueError(f"qworker_extra_keys: {', '.join(map(repr, taken))} name keys the adapter sets itself")
    return tuple(dict.fromkeys(names))


def _as_info(value: Any) -> Any:
    """An extra's value as one entry of a verl array: a number or string as it is, anything else JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return math.nan if value is None else value
    return json.dumps(value, sort_keys=True, default=str)


def info_from_extra(result: Result, keys: Sequence[str] = ()) -> dict[str, Any]:
    """A result's ``extra`` as the same keys for every sample: ``qworker_extra`` (JSON text, ``""`` if none)
    and each of ``keys`` (NaN where the extra lacks it)."""
    extra = result.extra or {}
    info: dict[str, Any] = {EXTRA_KEY: json.dumps(extra, sort_keys=True, default=str) if extra else ""}
    for key in keys:
        info[key] = _as_info(extra.get(key))
    return info


async def score_payload(payload: dict, reward: str, params: Optional[dict], keys: Sequence[str] = (), *,
                        ground_truth_from: str = "ground_truth") -> dict[str, Any]:
    """Score one payload and return ``{"score", "qworker_failed", "qworker_error", "qworker_extra", *keys}``.

    Raises ``RewardsFailed`` when this is the latest of too many failures in a row (``FailureStreak``)."""
    future = reward_client().submit_batch(reward, [payload], params=params)[0]
    result = await future
    mapping = f"payload keys sent: {sorted(payload)} (ground_truth read from {ground_truth_from})"
    warn_failed("verl", reward, [result], f"score={result.score}", mapping if not result.ok else "")
    _streak.record("verl", [reward], [result], mapping)
    return {"score": float(result.score), **failure_keys(result), **info_from_extra(result, keys)}


async def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Optional[dict] = None, **kwargs: Any
) -> dict[str, Any]:
    """verl's custom reward function: ``(data_source, solution_str, ground_truth, extra_info)``
    -> ``{"score": float, "qworker_failed": float, "qworker_error": str, "qworker_extra": str, ...}``.

    ``kwargs`` may carry ``qworker_reward`` / ``qworker_params`` / ``qworker_extra_keys`` (from
    ``reward_kwargs``); others verl passes (``reward_router_address``, ...) are ignored.
    """
    reward, params = choose(kwargs.get("qworker_reward"), kwargs.get("qworker_params"), per_sample=extra_info)
    keys = extra_keys(kwargs.get("qworker_extra_keys"))
    return await score_payload(from_verl(data_source, solution_str, ground_truth, extra_info), reward, params, keys,
                               ground_truth_from="compute_score's ground_truth argument")


class QworkerRewardManager(RewardManagerBase):
    """A verl reward manager (``source=importlib``) that scores each trajectory with qworker.

    It decodes the last sequence of ``data`` as verl's ``naive`` manager does
    (valid response tokens, ``skip_special_tokens=True``) and also decodes the
    valid prompt tokens.  ``compute_score`` from the config is not used: scoring
    is qworker's.  ``reward.reward_kwargs.qworker_reward`` / ``qworker_params``
    set the reward for the run (below a per-sample ``extra_info`` choice), and
    ``qworker_extra_keys`` the extra keys that become keys of their own.  The
    run's reward (and params) are checked here: an unknown name raises now.
    """

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, **kwargs: Any) -> None:
        super().__init__(config, tokenizer, compute_score)
        reward_kwargs = _get(_get(config, "reward"), "reward_kwargs") or {}
        self.reward_name: Optional[str] = _get(reward_kwargs, "qworker_reward")
        self.reward_params: Any = _get(reward_kwargs, "qworker_params")
        self.extra_keys = extra_keys(_get(reward_kwargs, "qworker_extra_keys"))
        name, params = choose(self.reward_name, self.reward_params)
        check_reward(name, params, where=f"QworkerRewardManager (reward {name!r})")

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        """``{"reward_score": float, "reward_extra_info": {"score", "qworker_failed", "qworker_error", "qworker_extra", ...}}``."""
        item = data[-1:][0]  # for multi-sequence outputs, the last sequence is scored (as verl's managers do)
        prompt_ids, response_ids = item.batch["prompts"], item.batch["responses"]
        prompt_len, response_len = prompt_ids.shape[-1], response_ids.shape[-1]
        mask = item.batch["attention_mask"]
        valid_prompt = int(mask[:prompt_len].sum())
        valid_response = int(mask[-response_len:].sum())
        valid_prompt_ids = prompt_ids[prompt_len - valid_prompt:]  # prompts are left-padded
        valid_response_ids = response_ids[:valid_response]  # responses are right-padded

        decode = self.tokenizer.decode
        prompt_str, response_str = await self.loop.run_in_executor(
            None, lambda: (decode(valid_prompt_ids, skip_special_tokens=True), decode(valid_response_ids, skip_special_tokens=True))
        )
        nt = item.non_tensor_batch
        extra_info = dict(nt.get("extra_info", None) or {})
        reward, params = choose(self.reward_name, self.reward_params, per_sample=extra_info)
        payload = from_verl(
            nt.get("data_source"), response_str, _get(nt.get("reward_model"), "ground_truth"), extra_info,
            prompt=prompt_str, response_length=valid_response, max_response_length=response_len,
        )
        info = await score_payload(payload, reward, params, self.extra_keys, ground_truth_from="reward_model['ground_truth']")
        return {"reward_score": info["score"], "reward_extra_info": info}


def _get(obj: Any, key: str) -> Any:
    """``obj[key]`` for dicts and OmegaConf configs, None when absent."""
    if obj is None:
        return None
    try:
        return obj.get(key)
    except AttributeError:
        return getattr(obj, key, None)
