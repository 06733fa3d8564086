"""The reward registry: ``@reward`` and name resolution in workers.

A reward is a function ``fn(payload: dict, **params) -> float | dict``, or an
``async def`` one (the worker awaits it; see ``host.worker.run_awaitable``).  A
dict must hold ``"score"``; its other keys travel back as ``Result.extra``.

Workers find rewards three ways:

* the built-ins in ``qworker.rewards`` (always imported);
* modules named with ``--rewards`` / ``Producer(reward_modules=[...])``, imported at
  start-up so that their ``@reward`` decorators run; a path ending in ``.py``
  is imported from that file;
* a task whose reward name is ``"package.module:function"``, imported on first use.

``Producer`` also forwards the modules of rewards registered in its own process,
so a ``@reward`` defined in the training script works with the local pool (the
script is imported under another name, as ``multiprocessing`` does: keep its
side effects under ``if __name__ == "__main__":``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Callable, Optional, Union

from .._exceptions import RewardError

__all__ = [
    "EndpointCall", "RewardSpec", "reward", "lookup", "resolve", "load_modules", "registered", "modules_to_forward"]

KINDS = ("cpu", "io")
BUILTIN_MODULE = "qworker.rewards"


@dataclass(frozen=True, slots=True)
class RewardSpec:
    name: str
    fn: Callable[..., object]
    kind: str  # "cpu": runs on the worker's main thread; "io": on its thread pool
    timeout_s: Optional[float]  # hard limit; None = the worker's default
    version: Optional[str] = None  # part of the task hash (see _hashing); None = unversioned
    admission: Optional[str] = None  # "module:attr" of its admission policy's source (``engine.admission``); None: no policy


@dataclass(slots=True)
class EndpointCall:
    """Given to a reward whose task an admission policy admitted (``engine.admission``; ``llm_judge``'s gate).

    ``meta`` is what the policy attached to this delivery (the judge's: ``{"endpoint": index}``),
    passed on unchanged; the reward records how the call went in ``outcome`` (status,
    latency, Retry-After, ...; see ``rewards.llm_judge``), or raises ``CallFailed``
    carrying it.  The worker returns the outcome to the policy as the result's ``meta``,
    never in the reward's ``extra``.
    """

    meta: dict
    outcome: Optional[dict] = None


_registry: dict[str, RewardSpec] = {}


def reward(
    name: Union[str, Callable, None] = None, *, kind: str = "cpu", timeout: Optional[float] = None,
    version: Union[str, int, None] = None, admission: Optional[str] = None,
) -> Callable:
    """Register a reward function under ``name`` (default: the function's name).

    ``kind="cpu"`` rewards run on the worker's main thread, where SIGALRM-based
    timeouts (math_verify) work; ``kind="io"`` rewards run on a thread pool in
    the worker.  An ``async def`` reward is awaited: a ``kind="cpu"`` one on the
    worker's main thread (one event loop per worker process), a ``kind="io"``
    one on one event loop the io threads share.  A generator function is
    refused here (a reward returns its score).  ``timeout`` is the hard limit in seconds, past which a CPU
    reward's worker is killed and respawned.  ``version`` (a string, or an int
    taken as its decimal string) is part of every task's hash: bump it when you
    change what the reward computes, so cached scores of the old code are not
    returned.  ``admission`` ("module:attr") names the source of the admission policy its
    tasks wait in before they are sent (``engine.admission``; ``llm_judge``'s gate); None: none.
    """
    if callable(name):  # bare @reward
        return reward(None, kind=kind, timeout=timeout, version=version, admission=admission)(name)
    if kind not in KINDS:
        raise RewardError(f"reward kind must be one of {KINDS}, not {kind!r}")
    if timeout is not None and not timeout > 0:
        raise RewardError(f"reward timeout must be a positive number of seconds, not {timeout!r}")
    if version is not None and (isinstance(version, bool) or not isinstance(version, (str, int)) or str(version) == ""
                                or "\0" in str(version)):
        raise RewardError(f"reward version must be a non-empty string or an int, not {version!r}")
    if isinstance(name, str) and (not name or "\0" in name):
        raise RewardError(f"reward name must be a non-empty string without NUL, not {name!r}")

    def register(fn: Callable) -> Callable:
        reward_name = name or fn.__name__
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise RewardError(f"reward {reward_name!r} is a generator function (it yields); a reward returns its score "
                              "(a number or a dict with 'score'), from a def or an async def")
        old = _registry.get(reward_name)
        if old is not None and _origin(old.fn)[1] != _origin(fn)[1]:
            raise RewardError(
                f"reward {reward_name!r} is already registered by {'.'.join(_origin(old.fn))}"
            )
        _registry[reward_name] = RewardSpec(reward_name, fn, kind, timeout, None if version is None else str(version),
                                            admission)
        return fn

    return register


def _origin(fn: Callable) -> tuple[str, str]:
    return (getattr(fn, "__module__", "?"), getattr(fn, "__qualname__", "?"))


def registered() -> dict[str, RewardSpec]:
    """A copy of the registry: name -> spec."""
    return dict(_registry)


def lookup(name: str) -> Optional[RewardSpec]:
    """The spec registered under ``name`` in this process, or None (imports nothing)."""
    return _registry.get(name)


def resolve(name: str) -> RewardSpec:
    """The spec for ``name``; imports ``module:function`` names on first use."""
    spec = _registry.get(name)
    if spec is not None:
        return spec
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise RewardError(f"unknown reward {name!r}: cannot import {module_name!r} ({exc})") from None
        fn = getattr(module, attr, None)
        if not callable(fn):
            raise RewardError(f"unknown reward {name!r}: {module_name!r} has no function {attr!r}")
        # a function registered with @reward keeps its kind, timeout and version under its path too
        known = next((s for s in _registry.values() if s.fn is fn), None)
        spec = _registry.get(name) or (
            RewardSpec(name, fn, known.kind, known.timeout_s, known.version) if known else RewardSpec(name, fn, "cpu", None)
        )
        _registry[name] = spec
        return spec
    names = ", ".join(sorted(n for n in _registry)) or "none"
    raise RewardError(f"unknown reward {name!r}; this worker has: {names}")


def _import_path(path: str) -> None:
    module_name = "__qworker_main__" if not _loaded_paths else f"__qworker_file_{len(_loaded_paths)}__"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    _loaded_paths.append(path)
    spec.loader.exec_module(module)


_loaded_paths: list[str] = []


def load_modules(modules: list[str]) -> list[str]:
    """Import reward modules (dotted names or ``.py`` paths); return one error line per failure."""
    errors = []
    for m in [BUILTIN_MODULE, *modules]:
        try:
            if m.endswith(".py"):
                _import_path(m)
            else:
                importlib.import_module(m)
        except (Exception, SystemExit) as exc:  # a broken user module must not kill the worker
            errors.append(f"cannot import reward module {m!r}: {type(exc).__name__}: {exc}")
    return errors


def unimportable_origin(fn: Callable) -> Optional[str]:
    """Where ``fn`` was defined, if no worker process can import it from there (a REPL, a notebook,
    ``python -c``, ``python -``); None when its module can be imported or forwarded."""
    if getattr(fn, "__module__", None) != "__main__":
        return None
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if path and os.path.isfile(path):
        return None
    return "an interactive session (a REPL, a notebook, or python -c)" if not path else f"{path!r} (standard input)"


def modules_to_forward() -> list[str]:
    """Modules a local pool must import to know the rewards registered here."""
    out: list[str] = []
    for spec in _registry.values():
        module = getattr(spec.fn, "__module__", None)
        if not module or module.startswith(BUILTIN_MODULE) or module.startswith("__qworker"):
            continue
        if module == "__main__":
            path = getattr(sys.modules["__main__"], "__file__", None)
            if path is None or unimportable_origin(spec.fn) is not None:
                continue  # nothing importable to forward: its tasks are refused at submission
            module = os.path.abspath(path)
        if module not in out:
            out.append(module)
    return out
