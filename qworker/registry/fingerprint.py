"""A reward's code fingerprint: what its cache identity holds when it declares no ``version``.

A cached score is only as good as the code that computed it.  Unless a reward
says ``@reward(..., version=...)`` (the explicit promise that its scores are
the same across edits), its results are cached under a fingerprint of its
code: its function's bytecode and constants (nested functions included) and
the source file of the module that defines it, read once per reward per
process.  So editing the reward, or anything else in its module, makes its old
cached scores unreachable; editing a helper in *another* module does not (give
a ``version`` and bump it, or clear the cache, for that).

The fingerprint that counts is taken where the reward runs: each worker takes
it of the code it imported, says it in every READY and with every result, and
the producer caches each result under the fingerprint of the code that
computed it and looks scores up only under a fingerprint a worker has
reported (``cache.identity``).  The producer's own copy of the code (if it can
import one) is never what a cache key rests on.  A reward with no Python code
and no source file to read (a builtin such as ``len``) has no fingerprint: its
results are not cached unless it declares a ``version``.
"""

from __future__ import annotations

import functools
import sys
import types
from hashlib import blake2b
from typing import Callable, Optional

__all__ = ["code_fingerprint", "reward_version", "CODE_MARK"]

# A code fingerprint is hashed as CODE_MARK + hex digest: NUL cannot appear in a declared version, so the two never
# collide.  (The mark changed when fingerprints moved from the producer to the workers: rows cached under the
# producer's copy of the code are no longer found.)
CODE_MARK = "\0ran "

_versions: dict[Callable, Optional[str]] = {}  # fn -> its version, once per process (rewards live as long as it)


def _const_repr(const: object) -> str:
    """``repr`` of a code constant that is the same in every process: a frozenset (``x in {"a", "b"}``) prints
    in hash order, which ``PYTHONHASHSEED`` changes, so its members are sorted."""
    if isinstance(const, frozenset):
        return "frozenset(" + repr(sorted(map(_const_repr, const))) + ")"
    if isinstance(const, tuple):
        return "(" + ", ".join(map(_const_repr, const)) + ",)"
    return repr(const)


def _code_bytes(code: types.CodeType, h: blake2b) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_bytes(const, h)
        else:
            h.update(_const_repr(const).encode())


def _code_of(target: object) -> Optional[types.CodeType]:
    """The code object of a function, of a callable object's ``__call__``, or of a ``functools.partial``'s function."""
    call = type(target).__dict__.get("__call__") if not isinstance(target, types.FunctionType) else None
    for candidate in (target, call, getattr(target, "func", None)):
        code = getattr(candidate, "__code__", None)
        if isinstance(code, types.CodeType):
            return code
    return None


def code_fingerprint(fn: Callable) -> Optional[str]:
    """A short hex digest of ``fn``'s code and of its module's source file; None when it has neither
    (no Python code object and no readable source file): then nothing tells its versions apart."""
    h = blake2b(digest_size=8)
    target = getattr(fn, "__wrapped__", fn)
    code = _code_of(target)
    if code is not None:
        _code_bytes(code, h)
    if isinstance(target, functools.partial):  # its bound arguments are part of what it computes
        h.update(repr((target.args, sorted(target.keywords.items()))).encode())
    inner = target.func if isinstance(target, functools.partial) else target  # a partial's __module__ is functools
    module = getattr(inner, "__module__", None) or getattr(type(inner), "__module__", None) or ""
    path = getattr(sys.modules.get(module), "__file__", None)
    source = False
    if path:
        try:
            with open(path, "rb") as f:
                h.update(f.read())
            source = True
        except OSError:
            pass  # not readable (a zip import, a deleted file): the bytecode alone
    if code is None and not source:
        return None
    return h.hexdigest()


def reward_version(fn: Callable, declared: Optional[str]) -> Optional[str]:
    """What a reward's results are cached under besides name, params and payload: its ``declared`` version,
    else ``CODE_MARK`` + its code fingerprint (taken once per function per process); None when it has neither."""
    if declared is not None:
        return declared
    try:
        return _versions[fn]
    except KeyError:
        version = _versions[fn] = _code_version(fn)
        return version
    except TypeError:  # an unhashable callable: fingerprinted every time (rare, and still cheap)
        return _code_version(fn)


def _code_version(fn: Callable) -> Optional[str]:
    try:
        fp = code_fingerprint(fn)
    except Exception:  # an odd callable whose attributes raise: no fingerprint, so its results are not cached
        fp = None
    return None if fp is None else CODE_MARK + fp
