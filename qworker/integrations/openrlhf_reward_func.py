"""OpenRLHF: a ``reward_func`` file for ``--reward.remote_url`` that scores with qworker.

Point OpenRLHF at this file (it loads a URL ending in ``.py`` as a module and
calls its ``reward_func``; tested against openrlhf 0.11.2)::

    --reward.remote_url $(python -c "import qworker.integrations.openrlhf_reward_func as m; print(m.__file__)")

OpenRLHF calls ``reward_func([query], [prompt], [label])`` once per sample, in
a thread of each vLLM engine actor; ``query`` is the decoded prompt and
response tokens, so the response is what follows the prompt, matched ignoring
whitespace and special tokens (``split_query``).  A query that does not start
with its prompt fails that sample (``bad_payload``, flagged and warned like any
failed task) unless ``QWORKER_WHOLE_QUERY=1`` scores it whole, logged.  Set
``QWORKER_CONNECT`` so every engine actor shares one service; the reward is
``$QWORKER_REWARD`` (default ``math``).

Returns ``{"rewards": tensor, "scores": tensor, "extra_logs": {"qworker_failed": tensor}}``,
float32 tensors of shape ``(len(queries),)``.  A failed task scores the
service's ``fallback_score``, ``qworker_failed`` is 1.0 for it (OpenRLHF logs
its mean), and a warning carries the error.  ``$QWORKER_MAX_CONSECUTIVE_FAILURES``
(default 64; 0: off) tasks in a row failing in one process raise ``RewardsFailed``.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

import torch

from qworker._errors import ErrorKind
from qworker.engine.result import Result
from qworker.integrations._client import reward_client
from qworker.integrations._outcome import FAILED_KEY, FailureStreak, choose, failure_keys, warn_failed
from qworker.integrations._payload import PromptMismatch, from_openrlhf

__all__ = ["reward_func"]

log = logging.getLogger("qworker.integrations")
ENV_WHOLE_QUERY = "QWORKER_WHOLE_QUERY"
_streak = FailureStreak()


def reward_func(queries: Sequence[str], prompts: Sequence[Any], labels: Sequence[Any], **kwargs: Any) -> dict[str, Any]:
    """OpenRLHF's reward function: one reward per query, as float32 tensors."""
    if not len(queries) == len(prompts) == len(labels):
        raise ValueError(f"reward_func got {len(queries)} queries, {len(prompts)} prompts and {len(labels)} labels")
    reward, params = choose()
    client = reward_client()
    whole = os.environ.get(ENV_WHOLE_QUERY, "") not in ("", "0")
    payloads: list[Any] = []
    for q, p, la in zip(queries, prompts, labels, strict=True):
        try:
            payloads.append(from_openrlhf(q, p, la, whole_query=whole))
        except PromptMismatch as exc:
            payloads.append(ErrorKind.BAD_PAYLOAD.error(str(exc)))
    good = [p for p in payloads if isinstance(p, dict)]
    scored = iter(client.gather(client.submit_batch(reward, good, params=params)) if good else [])
    fallback = float(getattr(client, "fallback_score", 0.0))
    results = [next(scored) if isinstance(p, dict) else Result(score=fallback, error=p) for p in payloads]
    mapping = "ground_truth read from OpenRLHF's labels" + ("" if any(la is not None for la in labels) else " (all None)")
    warn_failed("openrlhf reward_func", reward, results, "fallback_score", mapping)
    _streak.record("openrlhf reward_func", [reward], results, mapping)
    scores = torch.tensor([r.score for r in results], dtype=torch.float32)
    failed = torch.tensor([failure_keys(r)[FAILED_KEY] for r in results], dtype=torch.float32)
    return {"rewards": scores, "scores": scores.clone(), "extra_logs": {FAILED_KEY: failed}}
