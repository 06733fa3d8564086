"""``StubTransport``: the scheduler's ``send`` as a list, to drive a ``Scheduler`` with no processes and no sockets.

A test plays the workers and pools by handing the scheduler messages and times, and reads what the
scheduler sent from ``sent`` (as Dramatiq's ``StubBroker`` and httpx's ``MockTransport`` stand in
for a broker and a network).
"""

from __future__ import annotations

from ..transport import wire

__all__ = ["StubTransport"]


class StubTransport:
    """Records what the scheduler sends; every peer is reachable unless listed in ``gone``.

    Pass it as ``Scheduler(send=...)``.  ``sent`` holds ``(peer, message)`` pairs in the order sent;
    a send to a peer in ``gone`` returns False (the socket has no route to it) and is not recorded.
    """

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, wire.Message]] = []
        self.gone: set[bytes] = set()

    def __call__(self, peer: bytes, msg: wire.Message) -> bool:
        """Record ``msg`` to ``peer``; False when ``peer`` is in ``gone``."""
        if peer in self.gone:
            return False
        self.sent.append((peer, msg))
        return True

    def tasks_to(self, worker: str) -> list[wire.Task]:
        """Every task sent so far to the worker whose id is ``worker``, in order."""
        return [t for peer, m in self.sent if peer == worker.encode() and isinstance(m, wire.Tasks) for t in m.tasks]

    def take(self) -> list[tuple[bytes, wire.Message]]:
        """What was sent since the last ``take``, and forget it."""
        out, self.sent = self.sent, []
        return out
