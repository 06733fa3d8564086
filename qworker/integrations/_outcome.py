"""Which reward an adapter scores with, and how a failed task is shown to the framework.

**The reward.**  The first of: a per-sample ``qworker_reward`` (verl's
``extra_info``, slime's ``metadata``), the adapter's own argument (verl's
``reward_kwargs``, TRL's ``QworkerReward(reward=...)``), the environment
variable ``QWORKER_REWARD``, and ``"math"``.  Params come the same way from
``qworker_params`` (a mapping) or are left to the config's ``rewards:`` section.

**A failed task is never a silent 0.**  Each adapter reports it in the
framework's own terms (TRL: ``None``; verl, OpenRLHF and slime: the
``Result.score``, which is the producer's or service's ``fallback_score``,
beside fixed keys that say it failed) and logs a warning with the error.
``FAILED_KEY`` is 1.0 for a failed task and 0.0 otherwise (its mean is the
failure rate in the framework's metrics); ``ERROR_KEY`` is the error kind
(``"timeout"``, ``"reward_error"``, ...) or ``""``.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping, Optional

from .._result import Result
from ._payload import plain

__all__ = ["ENV_REWARD", "DEFAULT_REWARD", "FAILED_KEY", "ERROR_KEY", "choose", "failure_keys", "warn_failed"]

ENV_REWARD = "QWORKER_REWARD"
DEFAULT_REWARD = "math"
FAILED_KEY = "qworker_failed"
ERROR_KEY = "qworker_error"

log = logging.getLogger("qworker.integrations")


def choose(
    reward: Optional[str] = None, params: Optional[Mapping[str, Any]] = None, *, per_sample: Optional[Mapping[str, Any]] = None
) -> tuple[str, Optional[dict]]:
    """The reward name and params for one task.

    ``per_sample`` (a sample's ``extra_info`` / ``metadata``) may hold
    ``qworker_reward`` and ``qworker_params``; each wins over the adapter's own
    ``reward`` / ``params``.  Without a name from either: ``$QWORKER_REWARD``,
    then ``"math"``.  Params default to None (the config's defaults apply).
    """
    if isinstance(per_sample, Mapping):
        reward = per_sample.get("qworker_reward") or reward
        params = per_sample.get("qworker_params", params)
    name = reward or os.environ.get(ENV_REWARD) or DEFAULT_REWARD
    if params is not None:
        params = plain(params)
        if not isinstance(params, dict):
            raise TypeError(f"qworker_params must be a mapping, got {type(params).__name__}")
    return str(name), params


def failure_keys(result: Result) -> dict[str, Any]:
    """``{FAILED_KEY: 1.0 or 0.0, ERROR_KEY: kind or ""}``: the same keys for every sample."""
    if result.ok:
        return {FAILED_KEY: 0.0, ERROR_KEY: ""}
    kind = result.error_kind
    return {FAILED_KEY: 1.0, ERROR_KEY: str(kind) if kind is not None else (result.error or "").split(":", 1)[0]}


def warn_failed(where: str, reward: str, results: list[Result], shown_as: str) -> None:
    """One warning for the failed tasks among ``results`` (none if all are ok)."""
    failed = [r for r in results if not r.ok]
    if failed:
        log.warning(
            "%s: %d of %d %r task(s) failed, scored as %s; first error: %s",
            where, len(failed), len(results), reward, shown_as, failed[0].error,
        )
