"""Named rewards from the config's ``rewards:`` section.

Each entry under ``rewards:`` takes one of three forms::

    rewards:
      math:                      # defaults: params merged into every "math" task
        format_bonus: 0.1
      math_strict:               # an alias: a new name for a reward with fixed params
        reward: math
        params: {strict: true}
      gsm8k_shaped:              # a composite: weighted sum of component rewards
        on_error: fail           # a failed component fails the whole reward (default),
                                 # or "fallback": it counts as its fallback value
        fallback: 0.0            # the components' default fallback value
        components:
          - {reward: math, weight: 1.0}
          - {reward: format, weight: 0.1, on_error: fallback, fallback: 0.0}
          - {name: overlong, reward: length_penalty, params: {buffer_len: 64}}

An entry with ``components`` is a composite, one with ``reward`` an alias, and
any other mapping holds default params for the reward of that name.  A reward
with an admission policy (``llm_judge``) may name a judge of the config's
``judges:`` section (``judge: NAME``): its params then get that judge's keys
(``config.judges.expand``), and an unknown name is a ``ConfigError``.  Params
given at submission win over the alias's, which win over the defaults.  The
params a task finally carries are part of its hash, so changing a config value
never returns a stale cached score.  Composites are combined by the producer
(``engine.composite``); their components cannot be composites.

Every entry is checked when the catalog is built (the producer's start): the
structure first, then each reward name and its params against what the
producer knows (``registry.info``).  A defaults entry whose name is no known
reward (``mth: {...}``), an alias or component naming an unknown reward, and a
param the reward's function does not take are ``ConfigError``s naming the
place; when remote pools may join (``remote=True``) or a module did not import
here, an unknown *name* is only a warning, since a remote pool may have it.
Params given at submission are checked in ``resolve``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

from .._exceptions import ConfigError, RewardError
from ..config.judges import JUDGE_PARAM, expand
from .info import RewardBook

__all__ = ["Plain", "Component", "Composite", "Catalog"]

ON_ERROR = ("fail", "fallback")
_COMPONENT_KEYS = {"name", "reward", "weight", "params", "on_error", "fallback"}
_ENTRY_KEYS = ["components", "reward", "params", "on_error", "fallback"]


@dataclass(frozen=True, slots=True)
class Plain:
    """A reward the workers run, with the params its tasks carry."""

    reward: str
    params: dict


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    task: Plain
    weight: float
    on_error: str  # "fail" | "fallback"
    fallback: float


@dataclass(frozen=True, slots=True)
class Composite:
    name: str
    components: tuple[Component, ...]


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: expected a number, got {type(value).__name__} {value!r}")
    return float(value)


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    return dict(value)


class Catalog:
    """Resolves reward names given to ``submit_batch`` into what workers run."""

    def __init__(
        self, section: Optional[Mapping[str, Any]] = None, where: str = "config", *,
        modules: Sequence[str] = (), remote: bool = False, judges: Optional[Mapping[str, dict]] = None,
    ) -> None:
        """``modules``: the reward modules the workers import (imported here too);
        ``remote``: pools this process cannot see may join (unknown names only warn);
        ``judges``: the config's checked ``judges:`` section (``config.judges.check_section``), which rewards name."""
        self.book = RewardBook(modules, complete=not remote)
        self._judges = dict(judges or {})
        self._where = f"{where}: rewards"
        self._entries = {}
        for name, entry in _mapping(section, self._where).items():
            if not isinstance(name, str):
                raise ConfigError(f"{self._where}: reward names must be strings, got {name!r}")
            self._entries[name] = _mapping(entry, f"{self._where}.{name}")
        # each entry resolved once, now (a typo fails at start-up): what ``resolve`` returns for it without params
        self._resolved: dict[str, Union[Plain, Composite]] = {
            name: self._composite(name, entry) if "components" in entry else self._plain(name, {}, ())
            for name, entry in self._entries.items()
        }
        for name, entry in self._entries.items():  # then names and params, against the rewards known here
            self._check(name, entry)
        # a reward not in the config submitted without params, once it has passed its checks: one ``Plain`` per name,
        # so its submissions' tasks share one params dict (callers do not change it), as a config entry's do
        self._bare: dict[str, Plain] = {}

    def _check(self, name: str, entry: dict) -> None:
        where = f"{self._where}.{name}"
        book = self.book
        resolved = self._resolved[name]
        if isinstance(resolved, Composite):
            for i, c in enumerate(resolved.components):
                at = f"{where}.components[{i}]"
                book.check_name(c.task.reward, f"{at}.reward")
                book.check_params(c.task.reward, c.task.params, at, complete=True)  # no params come at submission
            return
        plain = resolved
        if "reward" in entry:
            book.check_name(plain.reward, f"{where}.reward")
        elif book.spec(name) is None and not (":" in name or not book.complete):
            hints = [f"{k!r} -> {m[0]!r}?" for k in entry if (m := difflib.get_close_matches(str(k), _ENTRY_KEYS, 1))]
            hints += [f"{m[0]!r}?" for m in [difflib.get_close_matches(name, book.known_names(), 1)] if m]
            raise ConfigError(
                f"{where}: {name!r} is not a known reward, and the entry is not an alias (no 'reward:' key) or a "
                f"composite (no 'components:' key){'; did you mean ' + ' or '.join(hints) if hints else ''}; "
                f"known rewards: {', '.join(book.known_names())}"
            )
        else:
            book.check_name(name, where)
        book.check_params(plain.reward, plain.params, where, complete=False)

    def version(self, reward: str) -> Optional[str]:
        """The version of the producer's own copy of ``reward`` (a plain reward's name, after aliases); cache keys
        follow the version its workers report instead (``cache.identity``)."""
        return self.book.version(reward)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        return sorted(self._entries)

    def resolve(self, name: str, params: Optional[Mapping[str, Any]] = None) -> Union[Plain, Composite]:
        """What ``name`` runs with ``params`` given at submission.  A config entry without params is the one
        resolved at start (its params dict is shared: callers do not change it)."""
        resolved = self._resolved.get(name)
        if isinstance(resolved, Composite):
            if params:
                raise RewardError(f"reward {name!r} is a composite: give params to its components in the config, not at submission")
            if any(JUDGE_PARAM in c.task.params and self._admits(c.task.reward) for c in resolved.components):
                resolved = self._resolved[name] = self._composite(name, self._entries[name])  # its policy registered since
            return resolved
        if resolved is not None and not params:
            if JUDGE_PARAM in resolved.params and self._admits(resolved.reward):  # its policy registered since
                resolved = self._resolved[name] = self._plain(name, {}, ())
            plain = resolved
        elif not params and name in self._bare:
            plain = self._bare[name]
        else:
            plain = self._plain(name, dict(params or {}), (), asked=f"params for reward {name!r}")
        self.book.check_runnable(plain.reward, name)
        # the params tasks will carry: unknown names were checked at start for the config's own
        self.book.check_params(plain.reward, plain.params, f"params for reward {name!r}", complete=True)
        if resolved is None and not params and self.book.spec(plain.reward) is not None:
            self._bare[name] = plain  # only a reward known here: never one per name a remote catalog lets through
        return plain

    def _plain(self, name: str, params: dict, seen: tuple[str, ...], asked: Optional[str] = None) -> Plain:
        """What ``name`` runs with ``params`` over its aliases' and defaults', a named judge's keys in place of its name;
        ``asked``: how an error names params given at submission."""
        plain = self._merge(name, params, seen)
        if JUDGE_PARAM in plain.params and self._admits(plain.reward):
            return Plain(plain.reward, expand(plain.params, self._judges, asked or f"{self._where}.{name}"))
        return plain

    def _admits(self, reward: str) -> bool:
        """Whether ``reward`` is known here with an admission policy (whose params a ``judge: NAME`` expands into).
        A reward registered after the catalog was built counts from then on: an entry resolved at start that kept
        its ``judge: NAME`` is resolved again."""
        spec = self.book.spec(reward)
        return spec is not None and spec.admission is not None

    def _merge(self, name: str, params: dict, seen: tuple[str, ...]) -> Plain:
        if name in seen:
            raise ConfigError(f"{self._where}: aliases loop: {' -> '.join((*seen, name))}")
        entry = self._entries.get(name)
        if entry is None:
            return Plain(name, params)
        where = f"{self._where}.{name}"
        if "components" in entry:
            raise ConfigError(f"{where}: a composite cannot be used inside another reward ({' -> '.join(seen)})")
        if "reward" not in entry:
            return Plain(name, {**entry, **params})  # defaults
        unknown = set(entry) - {"reward", "params"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)} in an alias; expected 'reward' and 'params'")
        target = entry["reward"]
        if not isinstance(target, str) or not target:
            raise ConfigError(f"{where}.reward: expected a reward name, got {target!r}")
        merged = {**_mapping(entry.get("params"), f"{where}.params"), **params}
        return self._merge(target, merged, (*seen, name))

    def _composite(self, name: str, entry: dict) -> Composite:
        where = f"{self._where}.{name}"
        unknown = set(entry) - {"components", "on_error", "fallback"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)} in a composite; expected 'components', 'on_error', 'fallback'")
        default_fallback = _number(entry.get("fallback", 0.0), f"{where}.fallback")
        default_policy = entry.get("on_error", "fail")
        if default_policy not in ON_ERROR:
            raise ConfigError(f"{where}.on_error: expected one of {ON_ERROR}, got {default_policy!r}")
        items = entry["components"]
        if not isinstance(items, list) or not items:
            raise ConfigError(f"{where}.components: expected a non-empty list")
        out: list[Component] = []
        for i, item in enumerate(items):
            at = f"{where}.components[{i}]"
            item = _mapping(item, at)
            unknown = set(item) - _COMPONENT_KEYS
            if unknown:
                raise ConfigError(f"{at}: unknown key(s) {sorted(unknown)}; known: {sorted(_COMPONENT_KEYS)}")
            reward = item.get("reward")
            if not isinstance(reward, str) or not reward:
                raise ConfigError(f"{at}.reward: expected a reward name, got {reward!r}")
            cname = item.get("name", reward)
            if not isinstance(cname, str) or cname == "components" or any(c.name == cname for c in out):
                raise ConfigError(f"{at}.name: {cname!r} must be a unique string (and not 'components'); name repeated rewards")
            policy = item.get("on_error", default_policy)
            if policy not in ON_ERROR:
                raise ConfigError(f"{at}.on_error: expected one of {ON_ERROR}, got {policy!r}")
            if item.get("on_error") == "fallback" and "fallback" not in item:
                raise ConfigError(f"{at}: on_error 'fallback' needs a 'fallback' value")
            task = self._plain(reward, _mapping(item.get("params"), f"{at}.params"), (name,), asked=at)
            out.append(Component(
                cname, task, _number(item.get("weight", 1.0), f"{at}.weight"), policy,
                _number(item.get("fallback", default_fallback), f"{at}.fallback"),
            ))
        return Composite(name, tuple(out))
