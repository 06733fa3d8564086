"""The producer's judge gates: one ``Gate`` per judge, shared by every task that calls it.

A judge is identified by its model, endpoints and ceiling (``gate.identity``),
so two reward names that reach the same endpoints share one limit.  Used from the
caller's thread at submission; the gates themselves are driven by the dispatcher.
"""

from __future__ import annotations

import threading

from .._exceptions import ConfigError
from .gate import Gate, identity

__all__ = ["JudgeGates"]


class JudgeGates:
    def __init__(self) -> None:
        self._gates: dict[str, Gate] = {}
        self._lock = threading.Lock()

    def for_params(self, params: dict) -> Gate:
        """The gate of the judge these params call; a bad judge config is a ``ConfigError``."""
        ident = identity(params)
        with self._lock:
            gate = self._gates.get(ident)
            if gate is None:
                try:
                    gate = self._gates[ident] = Gate(params)
                except (ValueError, TypeError, KeyError) as exc:
                    raise ConfigError(f"llm_judge: {exc}") from None
            return gate
