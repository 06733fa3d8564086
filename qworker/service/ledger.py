"""The reward service's ledger: results sent to each client and not yet acknowledged, resent until they are.

A link between a ``Client`` and ``qworker serve`` can break and come back (a
proxy, a NAT, a network blip): ZeroMQ reconnects, but the messages that were on
the wire, or sent while the client was away, are gone.  So every ``Resolved``
message to a client is numbered (``seq``, per client), kept here, and resent
until the client answers ``Ack`` with its number.  The client resolves each
future once, so a message that arrives twice is harmless.

Contract:

* ``taken(peer, request, n)`` records a request whose ``n`` results are owed;
  ``holds`` says whether a request is still owed (a repeated ``Submit`` of it
  is answered without taking it twice; a ``Ping`` naming one that is not held
  gets it back as unknown, and the client resubmits it).
* ``add(peer, groups, now)`` numbers and encodes the results for ``peer``
  (``(request, indexes, results)`` tuples, ``client_wire.Group``) into
  ``Resolved`` messages (``FLUSH_EVERY`` results each, a group split between
  two where it must, and fewer where those would encode to more than
  ``RESOLVED_MAX_BYTES``) and keeps them; results of a request not held are
  dropped (counted as ``dropped_rows``).
* ``ack(peer, seqs)`` forgets acknowledged messages; a request is no longer
  held once every one of its results is acknowledged.
* ``due(now)`` returns the messages to resend: unacknowledged ``resend_after_s``
  after their last send, that interval doubling per resend up to
  ``MAX_RESEND_EVERY_S``; ``poke(peer, now)`` returns at once those of one peer
  not sent in the last ``POKE_AFTER_S`` (the client spoke: it is back).
* **Bounded**: at most ``max_bytes`` of encoded messages in all (64 MiB by
  default) and none older than ``max_age_s`` (300 s): past either, the oldest
  messages are evicted, and the requests they carried are no longer held, so
  the client's next ``Ping`` learns they are unknown and resubmits them (its
  successful results come back from the producer's cache; failed ones run
  again).  A client silent for ``max_age_s`` with nothing owed is forgotten.

Counts for ``status()``: ``sent``, ``resent``, ``acked``, ``evicted``
(messages), ``dropped_rows`` (results for requests not held), ``repeats``
(repeated submissions answered).  Used on the producer's dispatcher thread only
(the service's handlers run there): no locking.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Optional

from ..engine.status import LedgerInfo
from ..transport import client_wire as cw

__all__ = ["Ledger", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_AGE_S", "FLUSH_EVERY", "RESOLVED_MAX_BYTES"]

DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_MAX_AGE_S = 300.0
RESEND_AFTER_S = 1.0  # an unacknowledged message is first resent this long after it was sent
MAX_RESEND_EVERY_S = 8.0
POKE_AFTER_S = 0.5  # a client that speaks gets its messages not sent in this long at once
FLUSH_EVERY = 512  # results per Resolved message, at most
RESOLVED_MAX_BYTES = 16 << 20  # a Resolved of more than one result is split into parts until each encodes to at most this


@dataclass(slots=True, eq=False)
class _Message:
    peer: bytes
    seq: int
    frames: list[bytes]  # the encoded Resolved: [kind, body]
    requests: dict[int, int]  # request -> results of it in this message
    born: float
    sent: float
    every: float

    @property
    def nbytes(self) -> int:
        return len(self.frames[1])


@dataclass(slots=True, eq=False)
class _Client:
    seq: int = 0
    owed: dict[int, int] = field(default_factory=dict)  # request -> results not yet acknowledged
    unacked: dict[int, _Message] = field(default_factory=dict)  # seq -> message
    heard: float = 0.0


class Ledger:
    def __init__(self, *, instance: str, max_bytes: int = DEFAULT_MAX_BYTES, max_age_s: float = DEFAULT_MAX_AGE_S,
                 resend_after_s: float = RESEND_AFTER_S) -> None:
        """``max_bytes``: encoded bytes of unacknowledged messages kept, all clients together; ``max_age_s``:
        seconds a message is kept unacknowledged; ``resend_after_s``: seconds before its first resend."""
        self.instance = instance
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.resend_after_s = resend_after_s
        self._clients: dict[bytes, _Client] = {}
        self._order: OrderedDict[tuple[bytes, int], _Message] = OrderedDict()  # oldest first, all clients
        self.bytes = 0
        self.counts = {"sent": 0, "resent": 0, "acked": 0, "evicted": 0, "dropped_rows": 0, "repeats": 0}

    def __len__(self) -> int:
        """Unacknowledged messages, all clients together."""
        return len(self._order)

    @property
    def clients(self) -> int:
        return len(self._clients)

    def _client(self, peer: bytes, now: Optional[float] = None) -> _Client:
        c = self._clients.get(peer)
        if c is None:
            c = self._clients[peer] = _Client()
        if now is not None:
            c.heard = now
        return c

    def heard(self, peer: bytes, now: float) -> None:
        """``peer`` sent something (it is alive: not forgotten while it speaks)."""
        self._client(peer, now)

    # requests -------------------------------------------------------------------
    def taken(self, peer: bytes, request: int, n: int) -> None:
        """``request`` of ``peer`` was taken: ``n`` results are owed to it."""
        if n > 0:
            self._client(peer).owed[request] = n

    def holds(self, peer: bytes, request: int) -> bool:
        c = self._clients.get(peer)
        return c is not None and request in c.owed

    def repeat(self) -> None:
        self.counts["repeats"] += 1

    def unknown(self, peer: bytes, requests: Iterable[int]) -> list[int]:
        """Of ``requests`` (a client's Ping), those not held: the client resubmits them."""
        c = self._clients.get(peer)
        owed = c.owed if c is not None else {}
        return [r for r in requests if r not in owed]

    # messages -------------------------------------------------------------------
    def add(self, peer: bytes, groups: list[cw.Group], now: float) -> list[list[bytes]]:
        """Encode ``groups`` (``(request, indexes, results)``) for ``peer`` as Resolved messages, keep them, return
        their frames."""
        c = self._client(peer)
        owed = c.owed
        if not all(group[0] in owed for group in groups):
            self.counts["dropped_rows"] += sum(len(group[1]) for group in groups if group[0] not in owed)
            groups = [group for group in groups if group[0] in owed]
        out = []
        chunk: list[cw.Group] = []
        per: dict[int, int] = {}  # request -> results of it in ``chunk``
        room = FLUSH_EVERY
        for request, indexes, results in groups:
            start, n = 0, len(indexes)
            while start < n:  # (once, unless the group is split between messages)
                take = min(room, n - start)
                chunk.append((request, indexes, results) if take == n else
                             (request, indexes[start : start + take], results[start : start + take]))
                per[request] = per.get(request, 0) + take
                start += take
                room -= take
                if not room:
                    out.extend(self._keep(c, peer, chunk, per, now))
                    chunk, per, room = [], {}, FLUSH_EVERY
        if chunk:
            out.extend(self._keep(c, peer, chunk, per, now))
        self.counts["sent"] += len(out)
        return out

    def _keep(self, c: _Client, peer: bytes, chunk: list[cw.Group], per: dict[int, int], now: float) -> list[list[bytes]]:
        """Number and encode ``chunk`` for ``peer`` as one Resolved message, or, if that is over ``RESOLVED_MAX_BYTES``
        and holds more than one result, as the messages of as many parts of its results (equal in count) as its size
        calls for, each fitted the same way; keep each until it is acknowledged; their frames.  A chunk that fits is
        encoded once; one that does not, about twice."""
        frames = cw.encode_resolved(self.instance, c.seq + 1, chunk)
        if len(frames[1]) > RESOLVED_MAX_BYTES and (results := sum(per.values())) > 1:
            parts = _parts(chunk, min(results, -(-len(frames[1]) // RESOLVED_MAX_BYTES) + 1))  # +1: sizes vary by result
            return [frames for part in parts for frames in self._keep(c, peer, part, _counts(part), now)]
        c.seq += 1
        m = _Message(peer, c.seq, frames, per, now, now, self.resend_after_s)
        c.unacked[c.seq] = m
        self._order[(peer, c.seq)] = m
        self.bytes += m.nbytes
        return [frames]

    def ack(self, peer: bytes, seqs: Iterable[int]) -> None:
        c = self._clients.get(peer)
        if c is None:
            return
        for seq in seqs:
            m = c.unacked.pop(seq, None)
            if m is None:
                continue  # acknowledged before (a resend arrived twice), or evicted
            self._forget(m)
            self.counts["acked"] += 1
            for request, n in m.requests.items():
                left = c.owed.get(request)
                if left is None:
                    continue
                if left <= n:
                    del c.owed[request]
                else:
                    c.owed[request] = left - n

    def _forget(self, m: _Message) -> None:
        del self._order[(m.peer, m.seq)]
        self.bytes -= m.nbytes

    def due(self, now: float) -> list[tuple[bytes, list[bytes]]]:
        """Messages to resend now (their next resend waits twice as long, up to ``MAX_RESEND_EVERY_S``)."""
        out = []
        for m in self._order.values():
            if now - m.sent >= m.every:
                m.sent = now
                m.every = min(2 * m.every, MAX_RESEND_EVERY_S)
                out.append((m.peer, m.frames))
        self.counts["resent"] += len(out)
        return out

    def poke(self, peer: bytes, now: float) -> list[list[bytes]]:
        """``peer`` spoke: its unacknowledged messages not sent in the last ``POKE_AFTER_S``, to resend now."""
        c = self._clients.get(peer)
        if c is None:
            return []
        out = []
        for m in c.unacked.values():
            if now - m.sent >= POKE_AFTER_S:
                m.sent = now
                m.every = self.resend_after_s
                out.append(m.frames)
        self.counts["resent"] += len(out)
        return out

    # bounds ---------------------------------------------------------------------
    def evict(self, now: float) -> int:
        """Drop the oldest messages past ``max_bytes`` or ``max_age_s``, and forget silent clients; returns
        how many messages were dropped.  The requests they carried are no longer held."""
        dropped = 0
        order = self._order
        while order:
            m = next(iter(order.values()))
            if self.bytes <= self.max_bytes and now - m.born <= self.max_age_s:
                break
            self._forget(m)
            c = self._clients.get(m.peer)
            if c is not None:
                c.unacked.pop(m.seq, None)
                for request in m.requests:
                    c.owed.pop(request, None)
            dropped += 1
        self.counts["evicted"] += dropped
        for peer, c in list(self._clients.items()):
            if not c.unacked and not c.owed and now - c.heard > self.max_age_s:
                del self._clients[peer]
        return dropped

    def peers(self) -> list[bytes]:
        return list(self._clients)

    def snapshot(self) -> LedgerInfo:
        """For ``status()``: what is kept now, and the counts."""
        n = self.counts
        return {"clients": len(self._clients), "unacked": len(self._order), "unacked_bytes": self.bytes, "sent": n["sent"],
                "resent": n["resent"], "acked": n["acked"], "evicted": n["evicted"], "dropped_rows": n["dropped_rows"],
                "repeats": n["repeats"]}


def _parts(chunk: list[cw.Group], k: int) -> list[list[cw.Group]]:
    """``chunk``'s results in ``k`` parts (2 <= ``k`` <= its results) of (nearly) equal count, in order, a group split
    between parts where it must."""
    total = sum(len(group[1]) for group in chunk)
    sizes = [total // k + (1 if i < total % k else 0) for i in range(k)]
    parts: list[list[cw.Group]] = [[] for _ in range(k)]
    part, room = 0, sizes[0]
    for request, indexes, results in chunk:
        start = 0
        while start < len(indexes):
            if not room:
                part += 1
                room = sizes[part]
            take = min(room, len(indexes) - start)
            parts[part].append((request, indexes[start:start + take], results[start:start + take]))
            start += take
            room -= take
    return parts


def _counts(chunk: list[cw.Group]) -> dict[int, int]:
    """Request -> results of it in ``chunk``."""
    per: dict[int, int] = {}
    for request, indexes, _ in chunk:
        per[request] = per.get(request, 0) + len(indexes)
    return per
