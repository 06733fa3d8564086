"""Wire messages between ``qworker.Client``\\s and a reward service (``qworker serve``).

Same framing as ``wire``: ``[kind, body]`` with a one-byte kind and a msgpack
body checked on receipt; nothing is pickled.  A request is acknowledged at once
(``Accepted``, with an error when it cannot be served); its results follow in
``Resolved`` batches as they come.  Every reply names the service's
``instance`` (a random token drawn at start), so a client sees a restart and
resubmits what the old instance held.

Delivery is acknowledged end to end, so a link that breaks and comes back loses
nothing: each ``Resolved`` carries a per-client sequence number, the client
answers ``Ack`` with the numbers it received, and the service resends what is
not acknowledged (``service._ledger``).  A ``Ping`` names the requests the
client still waits on; the ``Pong`` names those the service does not hold (never
taken, or their results dropped from a full ledger), which the client
resubmits.  A client resends a ``Submit`` until it is ``Accepted``; the service
answers a repeated one without taking it twice.  ``Closing`` tells clients the
service is stopping, so their waiting futures fail at once.

Payloads travel as msgpack values, results as maps of ``Result``'s fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from .._result import Result
from .wire import (
    STATUS,
    STATUS_REPLY,
    StatusReply,
    StatusRequest,
    _build_status_reply,
    _build_status_request,
    _expect,
    _int,
    _list,
    _opt_num,
    _pack,
    _str,
    decode_with,
)

__all__ = ["Submit", "Accepted", "Resolved", "Ack", "Ping", "Pong", "Closing", "ClientMessage", "encode", "decode", "RESULT_FIELDS"]

SUBMIT = b"U"  # client -> service: score these payloads
ACCEPTED = b"A"  # service -> client: the request is taken (or refused, with why)
RESOLVED = b"Z"  # service -> client: results of earlier requests
PING = b"I"  # client -> service: are you there?
PONG = b"O"  # service -> client
ACK = b"K"  # client -> service: these Resolved messages arrived
CLOSING = b"X"  # service -> client: stopping; what you wait on will not come

RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(Result))  # a result travels as Result.to_dict()
_RESULT_FIELD_SET = frozenset(RESULT_FIELDS)


@dataclass(slots=True)
class Submit:
    request: int
    reward: str
    params: Optional[dict]
    payloads: list
    timeout_s: Optional[float]


@dataclass(slots=True)
class Accepted:
    request: int
    instance: str
    error: Optional[str]  # None: taken
    error_type: str  # the exception to raise at the client: "ConfigError", "RewardError", "ServiceUnavailable", ...


@dataclass(slots=True)
class Resolved:
    instance: str
    seq: int  # numbers this client's Resolved messages, from 1; acknowledged with Ack
    results: list  # [request, index, {field: value}] each


@dataclass(slots=True)
class Ack:
    seqs: list  # the seq of each Resolved received


@dataclass(slots=True)
class Ping:
    waiting: list = dataclasses.field(default_factory=list)  # request numbers taken and not fully answered


@dataclass(slots=True)
class Pong:
    instance: str
    workers: int
    unknown: list = dataclasses.field(default_factory=list)  # of the Ping's requests, those this instance does not hold


@dataclass(slots=True)
class Closing:
    instance: str
    reason: str


ClientMessage = Union[Submit, Accepted, Resolved, Ack, Ping, Pong, Closing, StatusRequest, StatusReply]


def encode(msg: ClientMessage) -> list[bytes]:
    if isinstance(msg, Submit):
        return [SUBMIT, _pack([msg.request, msg.reward, msg.params, msg.payloads, msg.timeout_s])]
    if isinstance(msg, Accepted):
        return [ACCEPTED, _pack([msg.request, msg.instance, msg.error, msg.error_type])]
    if isinstance(msg, Resolved):
        return [RESOLVED, _pack([msg.instance, msg.seq, msg.results])]
    if isinstance(msg, Ack):
        return [ACK, _pack(msg.seqs)]
    if isinstance(msg, Ping):
        return [PING, _pack(msg.waiting)]
    if isinstance(msg, Pong):
        return [PONG, _pack([msg.instance, msg.workers, msg.unknown])]
    if isinstance(msg, Closing):
        return [CLOSING, _pack([msg.instance, msg.reason])]
    if isinstance(msg, StatusRequest):
        return [STATUS, _pack([])]
    if isinstance(msg, StatusReply):
        return [STATUS_REPLY, _pack(msg.status)]
    raise TypeError(f"not a client message: {type(msg).__name__}")


def decode(kind: bytes, body: bytes, *, max_bytes: int) -> ClientMessage:
    """Decode and schema-check one message; raise ``WireError`` if it is not valid."""
    return decode_with(_BUILDERS, kind, body, max_bytes=max_bytes)


def _submit(obj: Any) -> Submit:
    request, reward, params, payloads, timeout_s = _list(obj, 5, "submit")
    _expect(params is None or isinstance(params, dict), "params must be a map or nil")
    _expect(isinstance(payloads, list), "payloads must be a list")
    return Submit(_int(request, "request"), _str(reward, "reward"), params, payloads, _opt_num(timeout_s, "timeout_s"))


def _accepted(obj: Any) -> Accepted:
    request, instance, error, error_type = _list(obj, 4, "accepted")
    _expect(error is None or isinstance(error, str), "error must be a string or nil")
    return Accepted(_int(request, "request"), _str(instance, "instance"), error, _str(error_type, "error_type"))


def _resolved(obj: Any) -> Resolved:
    instance, seq, rows = _list(obj, 3, "resolved")
    _expect(isinstance(rows, list), "results must be a list")
    for row in rows:
        request, index, fields = _list(row, 3, "result")
        _int(request, "request")
        _int(index, "index")
        _expect(isinstance(fields, dict) and fields.keys() == _RESULT_FIELD_SET, f"a result must be a map of {RESULT_FIELDS}")
    return Resolved(_str(instance, "instance"), _int(seq, "seq"), rows)


def _ints(obj: Any, what: str) -> list:
    _expect(isinstance(obj, list), f"{what} must be a list")
    for v in obj:
        _int(v, what)
    return obj


def _ack(obj: Any) -> Ack:
    return Ack(_ints(obj, "ack"))


def _ping(obj: Any) -> Ping:
    return Ping(_ints(obj, "ping"))


def _pong(obj: Any) -> Pong:
    instance, workers, unknown = _list(obj, 3, "pong")
    return Pong(_str(instance, "instance"), _int(workers, "workers"), _ints(unknown, "unknown"))


def _closing(obj: Any) -> Closing:
    instance, reason = _list(obj, 2, "closing")
    return Closing(_str(instance, "instance"), _str(reason, "reason"))


_BUILDERS: dict[bytes, Callable[[Any], ClientMessage]] = {
    SUBMIT: _submit, ACCEPTED: _accepted, RESOLVED: _resolved, ACK: _ack, PING: _ping, PONG: _pong, CLOSING: _closing,
    STATUS: _build_status_request, STATUS_REPLY: _build_status_reply,  # the producer's, unchanged
}
