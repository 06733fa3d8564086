"""A reward's code fingerprint: what its cache identity holds when it declares no ``version``.

A cached score is only as good as the code that computed it.  Unless a reward
says ``@reward(..., version=...)`` (the explicit promise that its scores are
the same across edits), its tasks hash a fingerprint of its code: its
function's bytecode and constants (nested functions included) and the source
file of the module that defines it, read once per reward per process.  So
editing the reward, or anything else in its module, makes its old cached
scores unreachable; editing a helper in *another* module does not (give a
``version`` and bump it, or clear the cache, for that).

The fingerprint is computed where tasks are hashed (the producer, or the
service), from that process's copy of the code: a remote pool running other
code is not seen.
"""

from __future__ import annotations

import sys
import types
from hashlib import blake2b
from typing import Callable

__all__ = ["code_fingerprint"]


def _code_bytes(code: types.CodeType, h: blake2b) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_bytes(const, h)
        else:
            h.update(repr(const).encode())


def code_fingerprint(fn: Callable) -> str:
    """A short hex digest of ``fn``'s code and of its module's source file (when it has one)."""
    h = blake2b(digest_size=8)
    target = getattr(fn, "__wrapped__", fn)
    code = getattr(target, "__code__", None)
    if isinstance(code, types.CodeType):
        _code_bytes(code, h)
    else:
        h.update(repr(getattr(target, "__qualname__", type(target).__qualname__)).encode())
    path = getattr(sys.modules.get(getattr(target, "__module__", None) or ""), "__file__", None)
    if path:
        try:
            with open(path, "rb") as f:
                h.update(f.read())
        except OSError:
            pass  # not readable (a zip import, a deleted file): the bytecode alone
    return h.hexdigest()
