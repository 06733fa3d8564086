"""How often a receiving socket's owner logs what it drops or refuses: bounded, whatever a peer sends.

``LogRation`` counts one kind of event and says which to log: the first ten, then one
in a thousand.  ``RefusedStamps`` holds the stamps of the peers a socket refused for
their wire protocol and says which refusal is the first of its stamp (one line per
version), for the first ten stamps: a peer inventing versions cannot flood the log.
"""

from __future__ import annotations

from .wire import ProtocolMismatch

__all__ = ["LogRation", "RefusedStamps"]

FIRST = 10  # events logged before the ration thins out
THEN_EVERY = 1000  # after them, one logged in this many
STAMPS = 10  # refused stamps logged, at most


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
