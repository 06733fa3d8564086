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

**A reward that keeps failing stops the run** (``RewardsFailed``), rather than
training on scores that say nothing: TRL's ``QworkerReward`` checks each call
(a step's batch), the per-sample adapters (verl, OpenRLHF, slime) count a
process's consecutive failed tasks (``FailureStreak``).  Reward names are
checked before anything is scored where the adapter has a constructor
(``check_reward``); elsewhere an unknown name raises at the first submission.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from .._exceptions import QworkerError
from ..cli.score import resolve_reward
from ..engine.result import Result
from ..registry.registry import registered, unimportable_origin
from ._client import ENV_CONFIG, ENV_CONNECT, current_client
from ._payload import plain

__all__ = [
    "ENV_REWARD", "ENV_MAX_CONSECUTIVE_FAILURES", "DEFAULT_REWARD", "FAILED_KEY", "ERROR_KEY", "RewardsFailed", "FailureStreak",
    "check_reward", "choose", "failure_keys", "reward_name", "warn_failed",
]

ENV_REWARD = "QWORKER_REWARD"
DEFAULT_REWARD = "math"
FAILED_KEY = "qworker_failed"
ERROR_KEY = "qworker_error"
ENV_MAX_CONSECUTIVE_FAILURES = "QWORKER_MAX_CONSECUTIVE_FAILURES"
DEFAULT_MAX_CONSECUTIVE_FAILURES = 64


_FRAMEWORK_FIRST_PARAMS = frozenset({"prompts", "completions", "queries", "data_source", "args"})  # TRL, OpenRLHF, verl, slime


class RewardsFailed(QworkerError, RuntimeError):
    """Too many of a reward's tasks failed for training on them to mean anything (see the module docstring)."""

log = logging.getLogger("qworker.integrations")


def reward_name(reward: Union[str, Callable, None]) -> Optional[str]:
    """A reward given by name or as a function, as the name a worker resolves.

    A function registered with ``@reward`` is its registered name; another function (``def`` or
    ``async def``) defined at the top level of an importable module is ``"module:function"``.
    Anything else raises ``TypeError`` in one line: a worker process could not find it, or its first
    parameter is a framework's (``prompts``, ``completions``, ``queries``, ``data_source``, ``args``),
    so it is that framework's reward function, not one over a payload.
    """
    if reward is None or isinstance(reward, str):
        return reward
    if not callable(reward):
        raise TypeError(f"reward must be a reward name or a function, not {type(reward).__name__}")
    try:
        first = next(iter(inspect.signature(reward).parameters), None)
    except (TypeError, ValueError):
        first = None
    if first in _FRAMEWORK_FIRST_PARAMS:
        raise TypeError(f"reward {getattr(reward, '__qualname__', reward)!r} takes {first!r} first, as a framework's own reward "
                        "function does: a qworker reward takes one payload dict (fn(payload, **params) -> float | dict); "
                        "give the framework's function to the framework directly, or write it over the payload")
    names = sorted((s.name for s in registered().values() if s.fn is reward), key=lambda n: (":" in n, n))
    if names:
        return names[0]
    module, qualname = getattr(reward, "__module__", None), getattr(reward, "__qualname__", "")
    origin = unimportable_origin(reward) if module == "__main__" else None
    if module and module != "__main__" and qualname and "." not in qualname and "<" not in qualname:
        return f"{module}:{qualname}"
    where = origin or (f"{module}.{qualname}" if module == "__main__" else repr(reward))
    raise TypeError(f"reward {where} is not registered with @reward and no worker can import it by name: decorate it with "
                    "@qworker.reward in a module the workers import (reward_modules=), or define it at the top level of an "
                    "importable module")


def check_reward(reward: str, params: Optional[Mapping[str, Any]], client: Optional[Any] = None, *, where: str) -> None:
    """Raise now (``RewardError``/``ConfigError``, one line, closest names suggested) for a reward that
    the client an adapter will score through cannot run, or params it does not take; starts nothing.

    With a ``Producer`` (``client``, or the process-wide one already made), its own catalog decides.
    With none made yet and no ``QWORKER_CONNECT``, the catalog the embedded producer will have
    (``QWORKER_CONFIG``'s ``rewards:`` and ``reward_modules``, the built-ins, the rewards registered
    here) decides.  A reward service (``Client``, ``QWORKER_CONNECT``) is not asked here: it refuses
    an unknown name at the first submission.
    """
    target = client if client is not None else current_client()
    try:
        if target is not None:
            catalog = getattr(target, "catalog", None)
            if catalog is not None:
                catalog.resolve(reward, params)
            return
        if os.environ.get(ENV_CONNECT):
            return
        resolve_reward(config=os.environ.get(ENV_CONFIG) or None, reward=reward, modules=None, bind=None,
                       params=dict(params) if params is not None else None)
    except QworkerError as exc:
        raise type(exc)(f"{where}: {exc}") from None


class FailureStreak:
    """A process's run of consecutive failed tasks, for the adapters that see one sample at a time.

    ``record`` raises ``RewardsFailed`` once ``limit`` tasks in a row have failed (any success
    starts the count again), naming the first error of the run; ``limit`` is
    ``$QWORKER_MAX_CONSECUTIVE_FAILURES`` (default 64; 0 turns this off).  Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._first: Optional[str] = None

    @staticmethod
    def limit() -> int:
        raw = os.environ.get(ENV_MAX_CONSECUTIVE_FAILURES, "")
        if not raw:
            return DEFAULT_MAX_CONSECUTIVE_FAILURES
        try:
            value = int(raw)
        except ValueError:
            raise RewardsFailed(f"{ENV_MAX_CONSECUTIVE_FAILURES} must be a whole number of tasks (0: never stop), "
                                f"got {raw!r}") from None
        if value < 0:
            raise RewardsFailed(f"{ENV_MAX_CONSECUTIVE_FAILURES} must be 0 (never stop) or more, got {value}")
        return value

    def record(self, where: str, rewards: Sequence[str], results: Sequence[Result], mapping: str) -> None:
        """Count ``results`` (in order); ``mapping`` says where the payload's fields came from."""
        limit = self.limit()
        with self._lock:
            for result in results:
                if result.ok:
                    self._count, self._first = 0, None
                    continue
                self._count += 1
                if self._first is None:
                    self._first = result.error or ""
            if not limit or self._count < limit:
                return
            count, first = self._count, self._first
            self._count, self._first = 0, None
        names = ", ".join(map(repr, dict.fromkeys(rewards)))
        raise RewardsFailed(
            f"{where}: the last {count} {names} tasks in this process all failed, so training would go on with no "
            f"reward signal; first error: {first}; {mapping}; set {ENV_MAX_CONSECUTIVE_FAILURES}=0 to train on "
            "(failed tasks then score the fallback_score)")


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


def warn_failed(where: str, reward: str, results: list[Result], shown_as: str, mapping: str = "") -> None:
    """One warning for the failed tasks among ``results`` (none if all are ok); ``mapping``, when
    given, says where the payload's fields came from."""
    failed = [r for r in results if not r.ok]
    if failed:
        log.warning(
            "%s: %d of %d %r task(s) failed, scored as %s; first error: %s%s",
            where, len(failed), len(results), reward, shown_as, failed[0].error, f"; {mapping}" if mapping else "",
        )
