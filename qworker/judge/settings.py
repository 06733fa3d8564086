"""A judge's options, spelled once: ``JudgeOptions`` (an entry of the config's ``judges:`` section),
``JudgeSettings``, its settings that choose where and how its calls are made, and ``JudgeAsk``, what a
judge reward asks and how it scores the reply (the reward's own params, beside ``judge: NAME``).

A judge is written once, by name, in the config's ``judges:`` section (see
``configs/judge.yaml``; checked at start by ``config.judges``), and a reward
names it (``rewards: llm_judge: {judge: NAME, ...}``); the older spelling, the
same keys inline among the reward's params, still works and means the same.
Every place that reads a setting reads ``JudgeSettings``: its defaults, the gate's values (``from_params``), which keys are left
out of a task's hash (all of these are: they do not change what is scored),
which travel to the worker (scope ``call``), which a later config of the same
judge must repeat (scope ``gate``), and their bounds (``checks``).  The keys a
judge reward's params may hold (``param_names``) and those left out of a task's
hash (``JudgeOptions.names(scored=False)``) are derived from these classes.

Scopes (the field metadata ``scope``):

* ``call``: read by the reward in the worker (``rewards.llm_judge``): sent with each task;
* ``judge``: part of which judge this is (``gate.identity``); stays in the producer;
* ``gate``: one value per gate, which every config of that judge must give alike
  (``registry``); stays in the producer.

``scored`` (field metadata, default false): the key is part of what is scored, so
part of a task's hash (the model, and every ``JudgeAsk`` key).

``bounds`` = (low, high, integer, low excluded): a value outside is a
``ConfigError`` at start naming the key and value (``checks.check``).
Units: seconds, requests.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from .._options import _opt, _Options
from .client.ratelimit import MAX_DELAY_S
from .prompt import DEFAULT_TEMPLATE

__all__ = ["CALL", "DEFAULT_BALANCE", "GATE", "JUDGE", "ROUTINGS", "JudgeAsk", "JudgeOptions", "JudgeSettings", "param_names"]

CALL, JUDGE, GATE = "call", "judge", "gate"
ROUTINGS = ("capacity", "round_robin", "prefix")  # how a gate routes within a priority tier (``control.routing``)
DEFAULT_BALANCE = 0.25  # prefix routing: a replica may hold up to 1.25x the mean load (plus one) before tasks spill


@dataclass(frozen=True, kw_only=True)
class _Family(_Options):
    """Options whose fields say where they apply (``scope``), whether they are scored, and their bounds."""

    @classmethod
    @functools.cache
    def names(cls, *scopes: str, scored: Optional[bool] = None) -> tuple[str, ...]:
        """The keys (of ``scopes`` only, when given; scored or not, when ``scored`` is given), in declaration order."""
        return tuple(f.name for f, _ in cls._fields()
                     if (not scopes or f.metadata["scope"] in scopes) and (scored is None or f.metadata.get("scored", False) is scored))

    @classmethod
    def bounds(cls) -> dict[str, tuple[float, float, bool, bool]]:
        return {f.name: f.metadata["bounds"] for f, _ in cls._fields() if f.metadata.get("bounds")}


@dataclass(frozen=True, kw_only=True)
class JudgeSettings(_Family):
    timeout_s: float = _opt(60.0, "wall clock per request (connect + answer), seconds; the task's hard limit is this + 5",
                            scope=CALL, bounds=(0.0, MAX_DELAY_S, False, True))
    connections_per_host: int = _opt(128, "pooled connections per judge host in each worker", scope=CALL,
                                     bounds=(1, 65536, True, False))
    ceiling: float = _opt(512.0, "the adaptive limit never goes above this per endpoint", scope=JUDGE,
                          bounds=(1.0, 1e6, False, False))
    max_attempts: int = _opt(4, "calls per task after errors (5xx, timeouts, connection); 429s get 5x this", scope=GATE,
                             bounds=(1, 1000, True, False))
    initial_concurrency: float = _opt(32.0, "where the adaptive limit starts", scope=GATE, bounds=(1.0, 1e6, False, False))
    dead_after_s: float = _opt(10.0, "with no endpoint reachable, a waiting task fails after this long, seconds", scope=GATE,
                               bounds=(0.0, MAX_DELAY_S, False, True))
    error_budget: float = _opt(0.15, "5xx/resets up to this share of the last 200 answers are noise", scope=GATE,
                               bounds=(0.0, 1.0, False, False))
    routing: str = _opt("capacity", f"within a priority tier: {', '.join(ROUTINGS)}", scope=GATE, one_of=ROUTINGS)
    prefix_balance: float = _opt(DEFAULT_BALANCE, "prefix routing: a replica takes up to 1 + this times the mean load",
                                 scope=GATE, bounds=(0.0, 100.0, False, True))
    coordinate: bool = _opt(True, "share each endpoint evenly with the other producers on this host", scope=GATE)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> JudgeSettings:
        """The settings ``params`` (checked by ``checks.check``) ask for; a missing or null key takes its default."""
        values = {f.name: tp(params[f.name]) for f, tp in cls._fields() if params.get(f.name) is not None}
        return cls(**values)

    def of_scope(self, scope: str) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names(scope)}


@dataclass(frozen=True, kw_only=True)
class JudgeOptions(JudgeSettings):
    """One judge of the config's ``judges:`` section: the model it runs, its endpoints, and its ``JudgeSettings``.

    ``check_mapping`` checks an entry's keys and types (the options machinery); ``config.judges`` then checks
    that it has a model and endpoints, and every number's bounds.  A reward that names the judge
    (``judge: NAME``) gets these as its params, exactly as if they were written inline.
    """

    model: Optional[str] = _opt(None, "the judge model's name, sent as \"model\"; part of the task hash (required)", scope=CALL,
                                scored=True)
    endpoints: Optional[list[dict]] = _opt(
        None, "its servers, a list of {url, api_key_env, weight, priority, max_concurrency, rpm, tpm, metrics_url} "
        "(required); not part of the task hash", scope=CALL)


@dataclass(frozen=True, kw_only=True)
class JudgeAsk(_Family):
    """What a judge reward asks and how it scores the reply: the reward's own params (``rewards.llm_judge``'s
    keywords and defaults), written beside ``judge: NAME``, never in a ``judges:`` entry.  All are sent with each
    task and part of its hash."""

    prompt_template: str = _opt(DEFAULT_TEMPLATE, "the user message, with {prompt} {response} {ground_truth} {rubric}",
                                scope=CALL, scored=True)
    system_prompt: Optional[str] = _opt(None, "a system message before it", scope=CALL, scored=True)
    rubric: str = _opt("", "text for the template's {rubric}", scope=CALL, scored=True)
    request: Optional[dict] = _opt(None, "more request body fields, passed through (temperature, max_tokens, ...)",
                                   scope=CALL, scored=True)
    score_pattern: Optional[str] = _opt(None, "a regex whose group 1 is the score (the last match wins)", scope=CALL, scored=True)
    score_json_field: Optional[str] = _opt(None, "the reply is JSON: the dotted path of its score", scope=CALL, scored=True)
    score_max: float = _opt(10.0, "the score is parsed / score_max, in [0, 1]", scope=CALL, scored=True,
                            bounds=(0.0, 1e12, False, True))


def param_names() -> frozenset[str]:
    """Every key a judge reward's params may hold (besides ``judge: NAME``): a judge's and what the reward asks."""
    return frozenset((*JudgeOptions.names(), *JudgeAsk.names()))
