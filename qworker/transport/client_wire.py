"""Wire messages between ``qworker.Client``\\s and a reward service (``qworker serve``).

Same framing and structs as ``wire``: ``[kind, body]`` with a one-byte kind and
a msgpack body, checked on receipt by the socket's ``Decoder`` (``SERVICE`` for
the service's ROUTER, ``CLIENT`` for a client's DEALER); nothing is pickled.  A request is acknowledged at once
(``Accepted``, with an error when it cannot be served); its results follow in
``Resolved`` batches as they come.  Every reply names the service's
``instance`` (a random token drawn at start), so a client sees a restart and
resubmits what the old instance held.

Delivery is acknowledged end to end, so a link that breaks and comes back loses
nothing: each ``Resolved`` carries a per-client sequence number, the client
answers ``Ack`` with the numbers it received, and the service resends what is
not acknowledged (``service.ledger``).  A ``Ping`` names the requests the
client still waits on; the ``Pong`` names those the service does not hold (never
taken, or their results dropped from a full ledger), which the client
resubmits; it also states the service's frame limit (``max_message_bytes``), which
a client learns (it pings from its start until the service answers) and sends no ``Submit`` over: the
transport drops a larger one unread, and the link with it.  A client resends a
``Submit`` until it is ``Accepted``; the service
answers a repeated one without taking it twice.  ``Closing`` tells clients the
service is stopping, so their waiting futures fail at once.  A ``Submit`` is
stamped with the client's wire protocol (``wire.Stamped``): a service of
another protocol answers ``Refused``, and the client fails what it waits on
with one line naming both versions.

Results travel grouped by request: a ``Resolved`` carries, for each request
it answers, the positions of the tasks it resolves in that request and their
results, in two parallel arrays (``ResolvedRequest``), so a client resolves a
request's futures in one pass and the service never writes a request number or
an array header per result.

Payloads travel as msgpack values: each is the canonical encoding of the
caller's payload (``cache.hashing.encode_payload``, made by the client) placed in
the message as it is, and the service takes each back out undecoded
(``msgspec.Raw``, a slice of the message) and hands it to its producer as those
bytes: a payload is encoded once, at the client, and never decoded by the
service.  Results travel as maps of ``Result``'s fields, decoded into
``Result`` itself.
"""

from __future__ import annotations

from typing import ClassVar, Optional, Union

import msgspec

from ..engine.result import Result
from .wire import Count, Decoder, Message, Refused, Stamped, StatusReply, StatusRequest, _Body, encode, encode_body

__all__ = ["Submit", "Accepted", "Resolved", "ResolvedRequest", "Group", "Ack", "Ping", "Pong", "Closing", "ClientMessage", "encode",
           "encode_resolved", "SERVICE", "CLIENT"]

SUBMIT = b"U"  # client -> service: score these payloads
ACCEPTED = b"A"  # service -> client: the request is taken (or refused, with why)
RESOLVED = b"Z"  # service -> client: results of earlier requests
PING = b"I"  # client -> service: are you there?
PONG = b"O"  # service -> client
ACK = b"K"  # client -> service: these Resolved messages arrived
CLOSING = b"X"  # service -> client: stopping; what you wait on will not come


class Submit(Stamped):  # a client's first message: stamped with its protocol (``wire.Stamped``)
    KIND: ClassVar[bytes] = SUBMIT
    request: Count
    reward: str
    params: Optional[dict]
    payloads: list[msgspec.Raw]  # each a whole msgpack value: the payload's canonical encoding
    timeout_s: Optional[float]


class Accepted(Message):
    KIND: ClassVar[bytes] = ACCEPTED
    request: Count
    instance: str
    error: Optional[str]  # None: taken
    error_type: str  # the exception to raise at the client: "ConfigError", "RewardError", "ServiceUnavailable", ...


class ResolvedRequest(_Body):
    """Results of request ``request``: ``results[i]`` is the result of its ``indexes[i]``-th payload (the two arrays
    are of one length; a client drops a group where they are not)."""

    request: Count
    indexes: list[Count]
    results: list[Result]  # each a map of Result's fields; its latency_s is the client's to set


class Resolved(Message):
    KIND: ClassVar[bytes] = RESOLVED
    instance: str
    seq: Count  # numbers this client's Resolved messages, from 1; acknowledged with Ack
    requests: list[ResolvedRequest]


Group = tuple[int, list[int], list[Result]]  # (request, indexes, results): a ResolvedRequest as the service builds it
# ``encode_resolved`` writes these fields in this order: a field added to either struct must be added there too
if Resolved.__struct_fields__ != ("instance", "seq", "requests") or ResolvedRequest.__struct_fields__ != ("request", "indexes", "results"):
    raise ImportError("client_wire: Resolved/ResolvedRequest changed: update encode_resolved and Group to match")


def encode_resolved(instance: str, seq: int, groups: list[Group]) -> list[bytes]:
    """The frames of ``Resolved(instance, seq, groups)``, each group a tuple: the same bytes as ``encode`` makes from
    ``ResolvedRequest``\\s (both are arrays on the wire), without making a struct per group."""
    return [RESOLVED, encode_body((instance, seq, groups))]


class Ack(Message):
    KIND: ClassVar[bytes] = ACK
    seqs: list[Count]  # the seq of each Resolved received


class Ping(Message):
    KIND: ClassVar[bytes] = PING
    waiting: list[Count] = []  # request numbers taken and not fully answered


class Pong(Message, forbid_unknown_fields=False):  # a newer service's Pong may carry more: read what this one knows
    KIND: ClassVar[bytes] = PONG
    instance: str
    workers: Count  # workers connected to the service (a Client does not read it; a field goes only with a PROTOCOL raise)
    unknown: list[Count] = []  # of the Ping's requests, those this instance does not hold
    max_message_bytes: Count = 0  # the service's frame limit (a larger Submit is dropped unread); 0: not said


class Closing(Message):
    KIND: ClassVar[bytes] = CLOSING
    instance: str  # the stopping service's (a Client does not read it; a field goes only with a PROTOCOL raise)
    reason: str


ClientMessage = Union[Submit, Accepted, Resolved, Ack, Ping, Pong, Closing, StatusRequest, StatusReply, Refused]
ServiceInbound = Union[Submit, Ack, Ping, StatusRequest]
ClientInbound = Union[Accepted, Resolved, Pong, Closing, StatusReply, Refused]

SERVICE: Decoder[ServiceInbound] = Decoder("reward service", (Submit, Ack, Ping, StatusRequest))  # its clients' ROUTER
CLIENT: Decoder[ClientInbound] = Decoder("client", (Accepted, Resolved, Pong, Closing, StatusReply, Refused))
