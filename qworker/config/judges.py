"""The config's ``judges:`` section: judges written once, by name, and the rewards that name them.

::

    judges:
      deepseek:                        # a judge (``judge.settings.JudgeOptions``): model, endpoints, settings
        model: deepseek-v3
        endpoints: [{url: "http://127.0.0.1:8000/v1/chat/completions", api_key_env: JUDGE_API_KEY}]
        max_attempts: 4
    rewards:
      llm_judge:
        judge: deepseek                # the judge this reward calls
        rubric: "..."                  # what it asks: the reward's own params

``check_section`` checks every judge when the config is loaded (the producer's
start): its keys and types by the options machinery (``JudgeOptions.check_mapping``),
then as its gate will read it (a model, endpoints, every number in bounds:
``judge.control.checks.check``).  Any problem is one ``ConfigError`` naming the
file, the judge and the key.

``expand`` turns a reward's ``judge: NAME`` into the judge's keys, where the
producer resolves a reward's params (``registry.catalog``), so the gate and
the worker read exactly what the older inline spelling (the same keys among the
reward's params) gives them, and a task's hash is the same in both spellings.
A reward that names a judge and also gives one of its keys is a ``ConfigError``:
a judge's settings are written once, in its entry.
"""

from __future__ import annotations

from typing import Any, Mapping

from .._exceptions import ConfigError
from ..judge.control.checks import check
from ..judge.control.gate import identity
from ..judge.settings import GATE, JudgeOptions, JudgeSettings

__all__ = ["JUDGE_PARAM", "check_section", "expand"]

JUDGE_PARAM = "judge"  # the param by which a reward names a judge of the ``judges:`` section
_JUDGE_KEYS = frozenset(JudgeOptions.names())  # a judge's keys, which a reward naming it must not repeat


def check_section(section: Any, where: str) -> dict[str, dict]:
    """The ``judges:`` section, checked: judge name -> its params (keys given, None values left out)."""
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{where}: expected a mapping of judge names to their settings, got {type(section).__name__}")
    out: dict[str, dict] = {}
    for name, entry in section.items():
        at = f"{where}.{name}"
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: judge names must be non-empty strings, got {name!r}")
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{at}: expected a mapping of the judge's settings, got {type(entry).__name__} {entry!r}")
        JudgeOptions.check_mapping(entry, at)  # keys and types
        # the values as written, as the inline spelling passes them (``ceiling: 512`` stays 512: a gate is found by them)
        params = {k: v for k, v in entry.items() if v is not None}
        try:  # a model, endpoints, numbers in bounds: what the gate checks of the inline spelling too
            check(params)
        except (ValueError, TypeError, KeyError) as exc:  # ConfigError is a ValueError
            raise ConfigError(f"{at}: {exc}") from None
        out[name] = params
    _one_gate_per_judge(out, where)
    return out


def _one_gate_per_judge(judges: Mapping[str, dict], where: str) -> None:
    """Two entries that call the same servers (model, endpoints, ceiling) share one gate, so they must agree on
    its settings: a ``ConfigError`` at load naming both, not one at the first call of the second."""
    first: dict[str, tuple[str, dict]] = {}
    section = where.rsplit(": ", 1)[-1]  # "judges", without the file the message names once already
    for name, params in judges.items():
        mine = JudgeSettings.from_params(params).of_scope(GATE)
        other, theirs = first.setdefault(identity(params), (name, mine))
        differ = [f"{k} {mine[k]!r} ({section}.{other} has {theirs[k]!r})" for k in mine if mine[k] != theirs[k]]
        if differ:
            raise ConfigError(f"{where}.{name}: calls the same servers as {section}.{other}, which share one gate (one limit "
                              f"per endpoint), with other settings: {'; '.join(differ)}; give both the same "
                              f"{', '.join(JudgeSettings.names(GATE))}, or merge them into one judge")


def expand(params: Mapping[str, Any], judges: Mapping[str, dict], where: str) -> dict:
    """``params`` with ``judge: NAME`` replaced by that judge's keys; ``where`` names the params in an error."""
    name = params[JUDGE_PARAM]
    judge = judges.get(name) if isinstance(name, str) else None
    if judge is None:
        known = ", ".join(sorted(judges)) if judges else "none (the config has no judges: section)"
        raise ConfigError(f"{where}: {JUDGE_PARAM}: {name!r} names no judge of the config's judges: section; its judges: {known}")
    twice = sorted(_JUDGE_KEYS.intersection(params))
    if twice:
        raise ConfigError(
            f"{where}: {', '.join(map(repr, twice))} {'is a setting' if len(twice) == 1 else 'are settings'} of judge "
            f"{name!r}: set {'it' if len(twice) == 1 else 'them'} in its entry (judges.{name}), not beside "
            f"'{JUDGE_PARAM}: {name}' (a judge's settings are written once)")
    return {**judge, **{k: v for k, v in params.items() if k != JUDGE_PARAM}}
