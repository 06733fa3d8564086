"""Optional dependencies: import one, or fail with one line naming the extra to install."""

from __future__ import annotations

import importlib
from typing import Any

from .._exceptions import ConfigError

__all__ = ["MissingExtra", "need"]


class MissingExtra(ConfigError):
    """An optional dependency is not installed; the message names the extra to install."""


def need(module: str, extra: str, what: str) -> Any:
    """Import ``module`` or raise ``MissingExtra`` naming ``pip install 'qworker-rl[extra]'`` (no chained traceback)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] != module.split(".")[0]:
            raise  # the module is there but one of its own imports is broken: show that
        raise MissingExtra(f"{what} needs {module.split('.')[0]}, which is not installed: pip install 'qworker-rl[{extra}]'") from None
