"""How often a receiving socket's owner logs what it drops or refuses: bounded, whatever a peer sends.

``LogRation`` counts one kind of event and says which to log: the first ten, then one
in a thousand.  ``RefusedStamps`` holds the stamps of the peers a socket refused for
their wire protocol and says which refusal is the first of its stamp (one line per
version), for the first ten stamps: a peer inventing versions cannot flood the log.
``PeerRation`` says which events to log when a peer sends several of one kind (a
refused ``Client``'s submission and its ping): a peer's first, rationed as
``LogRation`` over the peers.
"""

from __future__ import annotations

from .._recent import RecentKeys
from .wire import ProtocolMismatch

__all__ = ["LogRation", "RefusedStamps", "PeerRation"]

FIRST = 10  # events logged before the ration thins out
THEN_EVERY = 1000  # after them, one logged in this many
STAMPS = 10  # refused stamps logged, at most
PEERS = 1024  # peers a ``PeerRation`` remembers (the most recently heard)


class LogRation:
    """Counts events (``count``: the total so far); ``tick`` counts one and says whether to log it."""

    def __init__(self) -> None:
        self.count = 0

    def tick(self) -> bool:
        self.count += 1
        return self.count <= FIRST or self.count % THEN_EVERY == 0


class RefusedStamps:
    """The (protocol, version) stamps of the peers refused; ``first`` says whether this refusal is the first of its
    stamp, among the first ``STAMPS`` stamps."""

    def __init__(self) -> None:
        self._seen: set[tuple[int, str]] = set()

    def first(self, exc: ProtocolMismatch) -> bool:
        stamp = (exc.protocol, exc.qworker)
        if stamp in self._seen or len(self._seen) >= STAMPS:
            return False
        self._seen.add(stamp)
        return True


class PeerRation:
    """Events of one kind from peers, each named by its identity: ``tick`` says whether to log this one, which is so
    for a peer's first event (among the ``PEERS`` peers heard most recently), rationed as ``LogRation`` over those
    firsts.  A peer sending many frames is one line; many peers are ten lines, then one in a thousand."""

    def __init__(self) -> None:
        self.count = 0  # events, all peers together
        self._firsts = LogRation()
        self._peers: RecentKeys[bytes] = RecentKeys(PEERS)

    def tick(self, peer: bytes) -> bool:
        self.count += 1
        return self._peers.add(peer) and self._firsts.tick()
