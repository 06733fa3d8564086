"""The producer's judge gates: one ``Gate`` per judge, shared by every task that calls it.

``JudgeGates`` is ``llm_judge``'s admission-policy source (``qworker.engine.admission``):
the producer makes one and asks it, per submission, for the gate its tasks wait in.

A judge is identified by its model, endpoints and ceiling (``gate.identity``),
so two reward names that reach the same endpoints share one limit.  Used from the
caller's thread at submission; the gates themselves are driven by the dispatcher.

The gate's own settings (``JudgeSettings`` of scope ``gate``: retry budget, dead-endpoint bound,
error budget, starting limit, routing, sharing with other producers) are one per gate.  A later caller that asks for
other values for the same judge gets a ``ConfigError`` naming both, rather than
silently the first caller's: making them part of the identity would split one
endpoint's limit into two limits that each believe they own it.
"""

from __future__ import annotations

import threading
from typing import Optional

from ..._exceptions import ConfigError
from ...engine.admission import Submission
from ..settings import GATE, JudgeSettings
from .checks import check
from .gate import Gate, hash_params, identity, task_params
from .peers import Board, default_board

__all__ = ["JudgeGates"]


class JudgeGates:
    def __init__(self, board: Optional[Board] = None) -> None:
        """``board``: where gates with ``coordinate`` (the default) trade notes with other producers (default: ``peers.default_board``)."""
        self._gates: dict[str, Gate] = {}
        self._lock = threading.Lock()
        self._board = board

    def close(self) -> None:
        """The producer closes: every gate withdraws its notes to other producers (``Gate.close``)."""
        with self._lock:
            gates = list(self._gates.values())
        for gate in gates:
            gate.close()

    def submission(self, params: dict) -> Submission:
        """How tasks with these params are admitted: the judge's gate; hashed without the params that choose where and
        how a call is made; a hard limit past the request's own deadline (``timeout_s``)."""
        gate = self.for_params(params)
        return Submission(gate, hash_params(params), gate.settings.timeout_s + 5.0, task_params(params))

    def for_params(self, params: dict) -> Gate:
        """The gate of the judge these params call; a bad judge config, or one at odds with the gate's settings, is a ``ConfigError``."""
        ident = identity(params)
        with self._lock:
            gate = self._gates.get(ident)
            if gate is None:
                try:
                    board = None
                    if JudgeSettings.from_params(params).coordinate:
                        board = self._board = self._board or default_board()
                    gate = self._gates[ident] = Gate(params, board=board)
                except (ValueError, TypeError, KeyError) as exc:
                    raise ConfigError(f"llm_judge: {exc}") from None
                return gate
        try:
            check(params)  # a later config is checked as fully as the first
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"llm_judge: {exc}") from None
        have = gate.settings.of_scope(GATE)
        want = JudgeSettings.from_params(params).of_scope(GATE)
        differ = [f"{k} {want[k]!r} (the gate has {have[k]!r})" for k in have if want[k] != have[k]]
        if differ:
            raise ConfigError(
                f"llm_judge: this judge (model {params.get('model')!r}, endpoints {[e.get('url') for e in params['endpoints']]}) "
                f"already has a gate, made by an earlier config with other settings: {'; '.join(differ)}. "
                "One judge has one gate (one limit per endpoint): give every config that calls it the same "
                f"{', '.join(JudgeSettings.names(GATE))}")
        gate.allow_replies(params)  # (one attribute per endpoint, set whole: read by the dispatcher thread as it is)
        return gate
