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

Every sample returns the same keys (verl stacks them into arrays):
``score`` (float; a failed task scores the service's ``fallback_score``),
``qworker_failed`` (1.0 or 0.0) and ``qworker_error`` (the error kind or ``""``).
A failure is also logged as a warning with its error.
"""

from __future__ import annotations

from typing import Any, Optional

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from ._client import reward_client
from ._outcome import choose, failure_keys, warn_failed
from ._payload import from_verl

__all__ = ["compute_score", "QworkerRewardManager", "score_payload"]


async def score_payload(payload: dict, reward: str, params: Optional[dict]) -> dict[str, Any]:
    """Score one payload and return ``{"score", "qworker_failed", "qworker_error"}``."""
    future = reward_client().submit_batch(reward, [payload], params=params)[0]
    result = await future
    warn_failed("verl", reward, [result], f"score={result.score}")
    return {"score": float(result.score), **failure_keys(result)}


async def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Optional[dict] = None, **kwargs: Any
) -> dict[str, Any]:
    """verl's custom reward function: ``(data_source, solution_str, ground_truth, extra_info)``
    -> ``{"score": float, "qworker_failed": float, "qworker_error": str}``.

    ``kwargs`` may carry ``qworker_reward`` / ``qworker_params`` (from
    ``reward_kwargs``); others verl passes (``reward_router_address``, ...) are ignored.
    """
    reward, params = choose(kwargs.get("qworker_reward"), kwargs.get("qworker_params"), per_sample=extra_info)
    return await score_payload(from_verl(data_source, solution_str, ground_truth, extra_info), reward, params)


class QworkerRewardManager(RewardManagerBase):
    """A verl reward manager (``source=importlib``) that scores each trajectory with qworker.

    It decodes the last sequence of ``data`` as verl's ``naive`` manager does
    (valid response tokens, ``skip_special_tokens=True``) and also decodes the
    valid prompt tokens.  ``compute_score`` from the config is not used: scoring
    is qworker's.  ``reward.reward_kwargs.qworker_reward`` / ``qworker_params``
    set the reward for the run (below a per-sample ``extra_info`` choice).
    """

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, **kwargs: Any) -> None:
        super().__init__(config, tokenizer, compute_score)
        reward_kwargs = _get(_get(config, "reward"), "reward_kwargs") or {}
        self.reward_name: Optional[str] = _get(reward_kwargs, "qworker_reward")
        self.reward_params: Any = _get(reward_kwargs, "qworker_params")

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        """``{"reward_score": float, "reward_extra_info": {"score", "qworker_failed", "qworker_error"}}``."""
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
        info = await score_payload(payload, reward, params)
        return {"reward_score": info["score"], "reward_extra_info": info}


def _get(obj: Any, key: str) -> Any:
    """``obj[key]`` for dicts and OmegaConf configs, None when absent."""
    if obj is None:
        return None
    try:
        return obj.get(key)
    except AttributeError:
        return getattr(obj, key, None)
