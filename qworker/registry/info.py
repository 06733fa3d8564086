"""What the producer knows about a reward: the params it takes, and its own copy's version.

A misspelled param should be one error at start or at submission, not a
``TypeError`` in every task, so the producer checks params against the
rewards it can import.  Cache keys do not rest on the producer's copy of a
reward: they follow the version of the code the workers run (``cache.identity``);
the producer's own version only tells it, with a warning, when it imports
other code than its workers.  A reward is *known* in the producer's process
when it is registered there:

* the built-ins (``qworker.rewards``);
* the modules given as ``Producer(reward_modules=[...])`` / ``--rewards``, imported
  here once when the producer starts (a ``.py`` path that is the running
  script itself is not imported twice: its rewards are registered already);
* rewards decorated in the trainer's own process;
* ``module:function`` names whose module imports here.

A reward known only to the workers (its module does not import here) has its
params not checked here; a warning says so, once per name.  Its tasks still
run (and are cached under the version its workers report), and fail per task
if the params are wrong.

Params are checked against the function's signature (after its first, payload,
argument): unknown names are a ``ConfigError`` listing the names it takes;
with ``complete=True`` (the params a task will really carry) a missing
required keyword is one too.  A function that takes ``**kwargs`` accepts
anything.  A reward with an admission policy (``llm_judge``) is not checked here: its
policy's source checks its params (``engine.admission``).
"""

from __future__ import annotations

import difflib
import inspect
import logging
import os
import sys
import threading
from typing import Callable, Mapping, Optional, Sequence

from .._exceptions import ConfigError, RewardError
from . import registry as _registry
from .fingerprint import reward_version
from .registry import RewardSpec

__all__ = ["RewardBook"]

log = logging.getLogger("qworker")

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class _Signature:
    """The params a reward function takes after its payload argument."""

    __slots__ = ("any", "names", "required")

    def __init__(self, fn: Callable) -> None:
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):  # no introspectable signature: accept anything
            params = [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
        if params and params[0].kind in _POSITIONAL:
            params = params[1:]  # the payload
        self.any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        self.names = frozenset(p.name for p in params if p.kind in _NAMED)
        self.required = frozenset(p.name for p in params if p.kind in _NAMED and p.default is p.empty)

    def listing(self) -> str:
        public = sorted(n for n in self.names if not n.startswith("_"))
        return ", ".join(public) if public else "no params"


_warned: set[str] = set()  # what this process has warned about (a CLI check and its producer both read the modules)
_warned_lock = threading.Lock()


def _warn_once(what: str, message: str, *args: object) -> None:
    with _warned_lock:
        if what in _warned:
            return
        _warned.add(what)
    log.warning(message, *args)


def _main_script() -> Optional[str]:
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.abspath(path) if path else None


def import_here(modules: Sequence[str]) -> list[str]:
    """Import the built-ins and ``modules`` in this process; one error line per failure."""
    main = _main_script()
    loaded = {os.path.abspath(p) for p in _registry._loaded_paths}
    todo = [m for m in modules if not (m.endswith(".py") and os.path.abspath(m) in (loaded | {main}))]
    return _registry.load_modules(todo)


class RewardBook:
    """The producer's view of the rewards it can see; thread-safe.

    ``complete=True`` says every reward a worker can run is known here (no
    remote pool may join and every module imported), so an unknown name in
    the config is an error, not a warning.
    """

    def __init__(self, modules: Sequence[str] = (), *, complete: bool = True) -> None:
        self.import_errors = import_here(modules)
        for line in self.import_errors:
            _warn_once(line, "qworker: %s (in the producer: the params of its rewards are not checked here; their "
                       "workers run them and their cache keys follow the workers' code)", line)
        self.complete = complete and not self.import_errors
        self._signatures: dict[Callable, _Signature] = {}
        self._unknown: set[str] = set()  # names looked up and not found (warned once)
        self._unimportable: set[str] = set()  # module:function names that did not import here
        self._lock = threading.Lock()

    def spec(self, name: str) -> Optional[RewardSpec]:
        """The registered spec for ``name``, importing ``module:function`` names once; None if unknown here."""
        spec = _registry.lookup(name)
        if spec is not None or ":" not in name or name in self._unimportable:
            return spec
        try:
            return _registry.resolve(name)
        except RewardError as exc:
            self._unimportable.add(name)  # tried once: an import is not retried on every submission
            log.debug("qworker: %s", exc)
            return None

    def known_names(self) -> list[str]:
        return sorted(n for n in _registry.registered() if ":" not in n)

    def version(self, name: str) -> Optional[str]:
        """The version of the producer's own copy of ``name``: its declared ``version``, else its code
        fingerprint (``registry.fingerprint``); None when unknown here (warned once) or it has none."""
        spec = self.spec(name)
        if spec is None:
            self._warn_unknown(name)
            return None
        return reward_version(spec.fn, spec.version)

    def _warn_unknown(self, name: str) -> None:
        with self._lock:
            if name in self._unknown:
                return
            self._unknown.add(name)
        hint = "" if self.import_errors else (
            " (name its module in Producer(reward_modules=[...]) so the producer can import it)")
        _warn_once(f"unknown {name}", "qworker: reward %r is not known in this process; its params are not checked here%s",
                   name, hint)

    def check_name(self, name: str, where: str) -> None:
        """Raise ``ConfigError`` for a name no worker can have; warn if only a remote pool might."""
        if self.spec(name) is not None:
            return
        if ":" in name or not self.complete:
            self._warn_unknown(name)
            return
        raise ConfigError(f"{where}: {self._not_known(name)}")

    def _not_known(self, name: str, asked: Optional[str] = None) -> str:
        """Why ``name`` (asked for as ``asked``) names no reward: the known ones, and the nearest of them, or where a
        name that is near none of them comes from."""
        known = self.known_names()
        near = difflib.get_close_matches(name, known, 3)
        hint = (f"did you mean {' or '.join(map(repr, near))}?" if near else
                "a reward of your own is known once its module is named in reward_modules (--reward-modules), "
                "a named or composite one with the config whose rewards: section defines it (--config)")
        return f"{asked or name!r} is not a known reward; known rewards: {', '.join(known)} ({hint})"

    def check_runnable(self, name: str, asked: str) -> None:
        """Raise ``RewardError`` at submission for a reward no worker can run: a name unknown here, or a
        function defined where no worker can import it from.  Only a warning (once) when a remote pool
        this process cannot see may bring it (``complete`` is false), or for ``module:function`` names."""
        spec = self.spec(name)
        if spec is None:
            if ":" in name or not self.complete:
                return  # version() warns once
            raise RewardError(self._not_known(name, asked))
        origin = _registry.unimportable_origin(spec.fn)
        if origin is None:
            return
        why = (f"reward {name!r} is defined in {origin}, which worker processes cannot import: put it in a module file "
               "and name it in Producer(reward_modules=['my_rewards']) (or a .py path)")
        if self.complete:
            raise RewardError(why)
        with self._lock:
            if name in self._unknown:
                return
            self._unknown.add(name)
        log.warning("qworker: %s; only a remote pool that registers it can run it", why)

    def check_params(self, name: str, params: Mapping[str, object], where: str, *, complete: bool) -> None:
        """Raise ``ConfigError`` if ``name``'s function cannot take ``params``.

        ``complete``: these are all the params its tasks will carry, so a
        missing required param is an error too.  Unknown rewards pass.
        """
        spec = self.spec(name)
        if spec is None or spec.admission is not None:  # its admission policy's source checks its params
            return
        sig = self._signatures.get(spec.fn)
        if sig is None:
            sig = self._signatures[spec.fn] = _Signature(spec.fn)
        if sig.any:
            return
        unknown = sorted(set(params) - sig.names)
        if unknown:
            raise ConfigError(
                f"{where}: unknown param{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                f"for reward {name!r}; it takes: {sig.listing()}"
            )
        missing = sorted(sig.required - set(params)) if complete else []
        if missing:
            raise ConfigError(f"{where}: reward {name!r} needs param{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
