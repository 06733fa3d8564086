"""TRL: reward functions for ``GRPOTrainer(reward_funcs=[...])`` that score with qworker,
and a trainer that overlaps the scoring with its own forward passes.

Tested against trl 1.16.0 (transformers 5.23.0 and 5.10.4, torch 2.13.0 CPU)::

    from qworker.integrations.trl import QworkerReward, QworkerGRPOTrainer

    trainer = QworkerGRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=ds,
                                 reward_funcs=[QworkerReward("math")])

``QworkerReward`` is a synchronous reward function, ``AsyncQworkerReward`` the
``async def`` form (TRL runs those on its event-loop thread).  Either works
with the plain ``GRPOTrainer``; the step then waits for the rewards after its
reference and old-policy forward passes.  ``QworkerGRPOTrainer`` submits each
qworker reward's tasks as soon as the completions are decoded, before those
forward passes, so the workers score while the GPU computes log-probs; TRL's
own reward call then only gathers.  The prefetched tasks are used only when
the call sees the same payloads (otherwise it submits afresh), so the result
is the same either way.

Data: standard (``prompt`` / ``completion`` strings) and conversational (lists
of messages: the last user message is the ``prompt``, the last assistant
message the ``response``); see ``_payload`` for every field.  A failed task
scores ``None`` (TRL leaves it out of the group baseline and gives it no
advantage) unless ``fallback`` is a number.  Each call logs the metric
``qworker/<reward>/failed`` (the fraction of failed tasks) and the column
``qworker_error/<reward>`` (the error kind, or None) in the completions table
(``log_names``).

Fail fast: the reward's name (and params) are checked in the constructor, and
a call in which every task failed (``fail_fraction=1.0``; or at least that
fraction of them) raises ``RewardsFailed`` with the first error and the
dataset columns it read, unless ``fail_fast=False``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from trl import GRPOTrainer

from ..engine.result import Result, ResultFuture
from ._client import RewardClient, reward_client
from ._outcome import ERROR_KEY, FAILED_KEY, RewardsFailed, check_reward, choose, failure_keys, reward_name, warn_failed
from ._payload import from_trl, trl_columns

__all__ = ["QworkerReward", "AsyncQworkerReward", "QworkerGRPOTrainer", "RewardsFailed", "default_name", "log_names"]

log = logging.getLogger("qworker.integrations")

_NOT_COLUMNS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"})


def default_name(reward: str) -> str:
    """TRL's name for a ``QworkerReward`` (its ``rewards/<name>/mean`` metric): ``qworker_<reward>``, where a
    ``pkg.mod:fn`` reward is its function's name, so metric names hold no module path or colon."""
    return f"qworker_{reward.rpartition(':')[2]}"


def log_names(name: str) -> tuple[str, str]:
    """The failure-rate metric and the completions-table column of a reward TRL names ``name``:
    ``qworker/<r>/failed`` and ``qworker_error/<r>``, ``<r>`` being ``name`` without its ``qworker_`` prefix."""
    short = name.removeprefix("qworker_")
    return f"qworker/{short}/failed", f"qworker_error/{short}"


class QworkerReward:
    """A TRL reward function that scores each completion as one qworker task.

    ``reward``: a reward name (``math``, a config alias or composite, or
    ``pkg.mod:fn``), or the function itself (``def`` or ``async def``: one
    registered with ``@reward``, or one at the top level of an importable
    module); default ``$QWORKER_REWARD``, else ``math``.  The name and
    ``params`` are checked here (``check_reward``) against the client it will
    use: an unknown name raises now, with the closest known names (so call
    ``use_client`` first, or pass ``client=``, when it is your own Producer).  ``params``: keyword arguments for it.  ``fallback``: the score of a failed task (None:
    ``None``, excluded from the baseline).  ``ground_truth_column``: the dataset
    column with the ground truth (default: the first of ``ground_truth``,
    ``solution``, ``answer``, ``label`` present).  ``max_response_length``: tokens
    (``QworkerGRPOTrainer`` fills in ``max_completion_length``).  ``timeout``:
    seconds to wait for a call's results (None: qworker's own limits apply).
    ``name``: how TRL names it in logs (default ``qworker_<reward>``).
    ``client``: a ``Producer``/``Client`` (default: ``reward_client()``).
    ``fail_fraction``: a call in which at least this fraction of the tasks
    failed raises ``RewardsFailed`` (default 1.0: only a call in which every
    task failed), with the first error and the columns read; ``fail_fast=False``
    turns that off (the failures then score ``fallback`` and are warned).
    """

    def __init__(
        self, reward: Union[str, Callable, None] = None, *, params: Optional[Mapping[str, Any]] = None,
        fallback: Optional[float] = None, ground_truth_column: Optional[str] = None, max_response_length: Optional[int] = None,
        timeout: Optional[float] = None, name: Optional[str] = None, client: Optional[RewardClient] = None,
        fail_fast: bool = True, fail_fraction: float = 1.0,
    ) -> None:
        if isinstance(fail_fraction, bool) or not isinstance(fail_fraction, (int, float)) or not 0 < fail_fraction <= 1:
            raise ValueError(f"fail_fraction must be a fraction of a call's tasks in (0, 1], got {fail_fraction!r}")
        self.reward, self.params = choose(reward_name(reward), params)
        check_reward(self.reward, self.params, client, where=f"{type(self).__name__}({self.reward!r})")
        self.fail_fast = bool(fail_fast)
        self.fail_fraction = float(fail_fraction)
        self.fallback = fallback
        self.ground_truth_column = ground_truth_column
        self.max_response_length = max_response_length
        self.timeout = timeout
        self.__name__ = name or default_name(self.reward)
        self._client = client
        self._lock = threading.Lock()
        self._prefetched: Optional[tuple[list[dict], list[ResultFuture]]] = None
        self.prefetch_hits = 0  # calls answered by prefetched tasks (QworkerGRPOTrainer)
        self._columns_read = ""  # trl_columns() of the latest call

    # submitting ---------------------------------------------------------------
    def payloads(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Optional[Sequence[Sequence[int]]],
                 columns: Mapping[str, Any]) -> list[dict]:
        """One payload per completion; ``columns`` are TRL's keyword arguments (non-columns are skipped)."""
        cols = {k: v for k, v in columns.items() if k not in _NOT_COLUMNS and isinstance(v, list) and len(v) == len(completions)}
        self._columns_read = trl_columns(cols, ground_truth_column=self.ground_truth_column)
        return from_trl(prompts, completions, completion_ids, cols, ground_truth_column=self.ground_truth_column,
                        max_response_length=self.max_response_length)

    def prefetch(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Optional[Sequence[Sequence[int]]] = None,
                 **columns: Any) -> None:
        """Submit the tasks for a call that is coming, so they run in the meantime."""
        payloads = self.payloads(prompts, completions, completion_ids, columns)
        futures = self.client.submit_batch(self.reward, payloads, params=self.params)
        with self._lock:
            self._prefetched = (payloads, futures)

    def _futures(self, payloads: list[dict]) -> list[ResultFuture]:
        with self._lock:
            pending, self._prefetched = self._prefetched, None
        if pending is not None and pending[0] == payloads:
            self.prefetch_hits += 1
            return pending[1]
        return self.client.submit_batch(self.reward, payloads, params=self.params)

    @property
    def client(self) -> RewardClient:
        return self._client if self._client is not None else reward_client()

    # results -> TRL --------------------------------------------------------------
    def _scores(self, results: list[Result], kwargs: Mapping[str, Any]) -> list[Optional[float]]:
        shown = "None" if self.fallback is None else str(self.fallback)
        failed = [r for r in results if not r.ok]
        if self.fail_fast and failed and len(failed) >= self.fail_fraction * len(results):
            share = f"all {len(results)}" if len(failed) == len(results) else f"{len(failed)} of {len(results)}"
            raise RewardsFailed(
                f"trl reward {self.__name__}: {share} {self.reward!r} tasks of this call failed (fail_fraction="
                f"{self.fail_fraction:g}), so training would go on with no reward signal; first error: {failed[0].error}; "
                f"{self._columns_read}; pass fail_fast=False to train on (failed tasks then score {shown})")
        warn_failed(f"trl reward {self.__name__}", self.reward, results, shown, self._columns_read)
        keys = [failure_keys(r) for r in results]
        log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
        if callable(log_metric):  # every call logs it, so all ranks log the same names
            log_metric(log_names(self.__name__)[0], sum(k[FAILED_KEY] for k in keys) / max(1, len(keys)))
        if callable(log_extra):
            log_extra(log_names(self.__name__)[1], [k[ERROR_KEY] or None for k in keys])
        return [float(r.score) if r.ok else self.fallback for r in results]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Optional[Sequence[Sequence[int]]] = None,
                 **kwargs: Any) -> list[Optional[float]]:
        """TRL's reward-function call: one score (or None) per completion, in order."""
        futures = self._futures(self.payloads(prompts, completions, completion_ids, kwargs))
        return self._scores(self.client.gather(futures, timeout=self.timeout), kwargs)

    def __getstate__(self) -> dict:  # picklable: no lock, no pending futures, no client
        state = dict(self.__dict__)
        state.update(_lock=None, _prefetched=None, _client=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reward!r}, name={self.__name__!r})"


class AsyncQworkerReward(QworkerReward):
    """``QworkerReward`` as an ``async def`` reward function (TRL >= 0.27 awaits it on its loop thread)."""

    async def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],  # type: ignore[override]
                       completion_ids: Optional[Sequence[Sequence[int]]] = None, **kwargs: Any) -> list[Optional[float]]:
        payloads = self.payloads(prompts, completions, completion_ids, kwargs)
        futures = await asyncio.to_thread(self._futures, payloads)  # off the loop: a service acknowledges each batch
        results = await asyncio.wait_for(asyncio.gather(*futures), self.timeout)
        return self._scores(list(results), kwargs)


class QworkerGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that submits its qworker rewards as soon as completions exist.

    It overrides two methods of trl 1.16's ``GRPOTrainer``: ``_generate_and_score_completions``
    (to see the batch's dataset columns) and ``_generate`` (to submit right after
    decoding, before the old-policy and reference forward passes).  If ``_generate``
    returns another shape (another trl version), it logs one warning and the
    rewards are scored as by ``GRPOTrainer``: correct, only not overlapped.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._qworker_inputs: Optional[list[dict]] = None
        self._qworker_warned = False
        for func in self._qworker_rewards():
            if func.max_response_length is None:
                func.max_response_length = getattr(self.args, "max_completion_length", None)  # a GRPOConfig field

    def _qworker_rewards(self) -> list[QworkerReward]:
        return [f for f in self.reward_funcs if isinstance(f, QworkerReward)]

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        self._qworker_inputs = inputs
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self._qworker_inputs = None

    def _generate(self, prompts: list) -> Any:
        out = super()._generate(prompts)
        rewards, inputs = self._qworker_rewards(), self._qworker_inputs
        if not rewards or inputs is None:
            return out
        if not (isinstance(out, tuple) and len(out) == 8 and isinstance(out[3], list) and isinstance(out[5], dict)):
            if not self._qworker_warned:
                log.warning("QworkerGRPOTrainer: unexpected _generate() result in this trl version; rewards are not overlapped")
                self._qworker_warned = True
            return out
        _, completion_ids, _, completions, _, extra_fields, _, _ = out
        columns = _columns(inputs, extra_fields)
        for func in rewards:
            func.prefetch(prompts, completions, completion_ids, **columns)
        return out


def _columns(inputs: list[dict], extra_fields: Mapping[str, Any]) -> dict[str, list]:
    """The keyword columns ``_calculate_rewards`` will pass: each input key but the
    prompt/completion ones, with ``extra_fields`` (from a ``rollout_func``) merged in as it does."""
    rows = [dict(x) for x in inputs]
    for i, row in enumerate(rows):
        for key, values in extra_fields.items():
            if isinstance(values, list) and i < len(values):
                row[key] = values[i]
            elif not isinstance(values, list):
                row[key] = values
    keys = [k for k in rows[0] if k not in ("prompt", "completion", "completion_ids")]
    return {k: [row.get(k) for row in rows] for k in keys}
