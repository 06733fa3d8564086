"""Wire messages between producer, pools, workers and status clients.

Every message is two frames, ``[kind, body]``: a one-byte kind and a msgpack
body (on the producer's ROUTER socket a routing-id frame comes first).  Nothing
here is pickled.  Each message is one ``msgspec`` struct, its kind byte a class
attribute (``KIND``); its body is the array of its fields, in order.

Each socket decodes with a ``Decoder`` of the messages it accepts (``PRODUCER``,
``WORKER``, ``STATUS_CLIENT``; the service's are in ``client_wire``): a body is
checked against its struct's schema as it is decoded (types, key length,
non-negative counts, every field without a default present, none extra unless the message reads a newer peer's
extra fields, below), and anything else (bad msgpack, a
schema mismatch, a kind this socket does not accept, an unknown kind) raises
``WireError`` naming what is wrong.  Decoding holds no other logic.

A task's failure travels as a ``Fault``, ``(ErrorKind, detail)``; it becomes the
``"kind: detail"`` text of ``Result.error`` (``str(fault)``) only when a task
resolves.

Versions: the messages that open a conversation (a worker's ``Ready``, a
pool's ``PoolReport``, a client's ``Submit``: ``Stamped``) begin with the
sender's wire protocol number and qworker version (``STAMP``).  Those two
fields keep their place and types in every version, so a receiver reads them
even from a message whose other fields are not of its schema; a peer of another
``PROTOCOL`` is refused (``ProtocolMismatch`` from the ``Decoder``, answered
with a ``Refused``, whose schema never changes), never decoded message by
message.  A peer from before protocols were numbered (qworker 0.1.0) sends no
stamp: its messages fail their schema check as any malformed message does.
``StatusRequest`` is not stamped: every version reads it.  A peer's version goes
into a log line only as ``printable`` makes it.  A few messages read a newer peer's extra trailing fields
(``forbid_unknown_fields=False``: ``Refused``, ``Ready``, ``Tasks``, ``client_wire.Pong``), so a field added at the end
of one of them, with a default, needs no ``PROTOCOL`` raise; any other change does.

Frame limits: libzmq drops a message over the receiving socket's ``max_message_bytes`` (MAXMSGSIZE) unread, and the
link with it, so each side states its own: a worker in ``Ready`` (the producer fits each ``Tasks`` message to it), the
producer in ``Tasks`` (the worker fits its ``Results`` to it).

Credit: a worker reports two running totals, ``granted`` (tasks it has ever
agreed to hold) and ``received`` (tasks it has ever been sent).  The producer
may send ``granted - sent`` more tasks.  Totals, not deltas, so a duplicated or
replayed report is harmless and a restarted producer can resynchronise.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Generic, Literal, Optional, Sequence, TypeVar, Union, cast

import msgspec

from .._errors import ErrorKind
from .._exceptions import WireError
from .._version import WIRE_PROTOCOL, __version__

__all__ = [
    "Fault", "Task", "TaskResult", "Message", "Ready", "Tasks", "Results", "Giveback", "Revoke", "Bye", "WorkerReport",
    "Lost", "PoolReport", "StatusRequest", "StatusReply", "Decoder", "PRODUCER", "WORKER", "STATUS_CLIENT", "encode",
    "decode", "encode_results", "WireError", "KEY_BYTES", "PROTOCOL", "STAMP", "Stamped", "Refused", "ProtocolMismatch", "SUPERVISOR",
    "refusal", "mismatch",
]

PROTOCOL = WIRE_PROTOCOL  # this wire protocol's number: raised with any change to a message (here or in ``client_wire``; see the
# docstring for the trailing fields that need none), with qworker's version (both are set in ``qworker._version``)
STAMP: tuple[int, str] = (PROTOCOL, __version__)  # the first fields of every ``Stamped`` message this process sends

READY = b"R"  # worker -> producer: hello, and idle heartbeat carrying credit
TASKS = b"T"  # producer -> worker: a batch of tasks
RESULTS = b"D"  # worker -> producer: a batch of results, with credit
GIVEBACK = b"G"  # worker -> producer: tasks it will not run (draining, or asked to)
REVOKE = b"V"  # producer -> worker: give back up to n tasks you have not started
BYE = b"B"  # worker -> producer: leaving; drop my leases
POOL = b"P"  # pool -> producer: supervisor report (liveness, losses)
STATUS = b"S"  # client -> producer: what do you see?
STATUS_REPLY = b"s"  # producer -> client
REFUSED = b"!"  # producer -> worker, pool or client, service -> client or pool: your wire protocol is not mine, or I am not what you take me for

KEY_BYTES = 16  # blake2b-128 task keys

Key = Annotated[bytes, msgspec.Meta(min_length=KEY_BYTES, max_length=KEY_BYTES)]
Count = Annotated[int, msgspec.Meta(ge=0)]  # a pid, a credit total, a number of tasks
PoolState = Literal["running", "draining", "stopped"]


class _Body(msgspec.Struct, array_like=True, forbid_unknown_fields=True, gc=False):
    """A fixed-length array on the wire.  ``gc=False``: these structs hold lists and dicts but nothing
    ever refers back to one, so none can be part of a reference cycle."""


class Fault(_Body):
    """Why a task failed: its kind and a human-readable detail.  ``str(fault)`` is ``Result.error``'s text."""

    kind: ErrorKind
    detail: str

    def __str__(self) -> str:
        return self.kind.error(self.detail)


class Task(_Body):
    """One task as a worker receives it.  ``meta`` is what the task's admission policy attached to this
    delivery (``engine.admission``; handed to the reward as ``EndpointCall.meta``), None for a task with no policy."""

    key: Key
    reward: str
    params: dict
    payload: bytes  # msgpack of the payload
    timeout_s: Optional[float]  # None: the reward's or the worker's default
    attempt: Count
    meta: Optional[dict]


class TaskResult(_Body):
    """One task's result.  ``meta`` is what the reward reported about its admitted call, for its policy
    (None when it reported none); ``ran`` is the version of the code that computed it (its declared version or its code
    fingerprint, ``registry.fingerprint.reward_version``), None when it has none or the reward could not be loaded."""

    key: Key
    score: Optional[float]
    extra: Optional[dict]
    error: Optional[Fault]  # None: it succeeded
    compute_s: float  # seconds inside the reward
    meta: Optional[dict]
    ran: Optional[str]


class Message(_Body):
    """Base of the messages of this protocol and ``client_wire``'s; ``KIND`` is its kind frame."""

    KIND: ClassVar[bytes]


class Stamped(Message):
    """A message that opens a conversation: its first fields are its sender's ``STAMP``, in every version."""

    protocol: Count  # the sender's PROTOCOL
    qworker: str  # the sender's qworker version


class _Stamp(msgspec.Struct, array_like=True):
    """The first two fields of a ``Stamped`` message (or a ``Refused``) of any version; the rest is ignored."""

    protocol: Count
    qworker: str


class Refused(Message, forbid_unknown_fields=False):
    """The answer to a ``Stamped`` message of another protocol, or to a peer at an endpoint that is not for its kind
    (a pool at a reward service's clients' endpoint, a ``Client`` at a producer's endpoint for pools): the refuser's
    stamp and why.  Its fields never change
    (a later version may only add some after them, which this one ignores), so every version reads it."""

    KIND: ClassVar[bytes] = REFUSED
    protocol: int
    qworker: str
    reason: str
    by: str = ""  # what refused, as the refused peer names it ("the producer's pool endpoint"); "": not said (``refuser``)


VERSION_REFUSED = "another wire protocol"  # the reason of a ``refusal``, in every version that stamps its messages


def refusal() -> Refused:
    """The answer to a ``Stamped`` message of another protocol."""
    return Refused(*STAMP, VERSION_REFUSED)


def refuser(theirs: Refused, endpoint: str, expected: str) -> str:
    """Who refused, for ``refused_line``: what the refuser says it is (``by``) and ``endpoint``
    ("the producer's pool endpoint tcp://H:P"), or, when it does not say, ``expected`` (what the refused peer dialled
    ``endpoint`` for: "the reward service at tcp://H:P")."""
    return f"{printable(theirs.by)} {endpoint}" if theirs.by else expected


def printable(text: str, limit: int = 64) -> str:
    """A peer's words (its version, a reason) as they may go into one log line: at most ``limit`` characters,
    printable ASCII (any other character escaped as ``ascii`` writes it, then cut), so a peer cannot break the line
    or forge another."""
    text = text[:limit]
    return text if text.isprintable() and text.isascii() else ascii(text)[1:-1][:limit]


class ProtocolMismatch(WireError):
    """A ``Stamped`` message from a peer of another wire protocol; ``protocol`` and ``qworker`` are its stamp
    (``qworker`` made ``printable``)."""

    def __init__(self, name: str, protocol: int, qworker: str) -> None:
        qworker = printable(qworker)  # a version, or a peer's nonsense: this goes into a log line
        super().__init__(f"a {name} message of qworker {qworker} (wire protocol {protocol}); this process runs qworker "
                         f"{STAMP[1]} (wire protocol {STAMP[0]})")
        self.protocol, self.qworker = protocol, qworker


def _versions(here: str, theirs: Refused) -> str:
    return (f"it runs qworker {printable(theirs.qworker)} (wire protocol {theirs.protocol}), {here} qworker {STAMP[1]} "
            f"(wire protocol {STAMP[0]}); install the same qworker version on both")


def mismatch(who: str, here: str, theirs: Refused) -> str:
    """The line that says ``who`` (the refuser, "the producer at tcp://...") and ``here`` ("this pool") speak
    different wire protocols, naming both versions."""
    return f"{who} refused {here}: {_versions(here, theirs)}"


def refused_line(who: str, here: str, theirs: Refused) -> str:
    """The line that says why ``who`` refused ``here``: another wire protocol (``mismatch``), or the reason it gave
    (an endpoint not for ``here``'s kind: a reward service's clients' endpoint refusing a pool, a producer's endpoint
    for pools refusing a ``Client``), then both versions where the refuser's protocol is another (the peer must
    connect elsewhere and run the same version)."""
    if theirs.protocol != STAMP[0] and theirs.reason == VERSION_REFUSED:
        return mismatch(who, here, theirs)
    line = f"{who} refused {here}: {printable(theirs.reason, 300)}"
    return line if theirs.protocol == STAMP[0] else f"{line}; besides, {_versions(here, theirs)}"


class Ready(Stamped, forbid_unknown_fields=False):  # a newer worker's Ready may carry more: read what this one knows
    """A worker's hello and idle heartbeat.  ``max_message_bytes`` is its frame limit (its socket's MAXMSGSIZE): the
    producer sends it no ``Tasks`` message larger (``engine.scheduler``)."""

    KIND: ClassVar[bytes] = READY
    worker: str
    pool: str
    pid: Count
    host: str
    granted: Count
    received: Count
    finished: Count  # tasks completed or given back; == received means idle
    rewards: list[str] = []
    errors: list[str] = []
    versions: dict[str, Optional[str]] = {}  # reward -> the version of the code loaded here
    max_message_bytes: Count = 0  # the worker's frame limit, bytes; 0: not said (taken as the producer's own)


class Tasks(Message, forbid_unknown_fields=False):  # a newer producer's Tasks may carry more: read what this one knows
    """A batch of tasks.  ``max_message_bytes`` is the producer's frame limit: the worker sends it no ``Results``
    message larger (``host.worker``)."""

    KIND: ClassVar[bytes] = TASKS
    tasks: list[Task]
    max_message_bytes: Count = 0  # the producer's frame limit, bytes; 0: not said (taken as the worker's own)


class Results(Message):
    KIND: ClassVar[bytes] = RESULTS
    granted: Count
    received: Count
    results: list[TaskResult]


# ``encode_results`` writes Results' fields in this order: a field added to it must be added there too
if Results.__struct_fields__ != ("granted", "received", "results"):
    raise ImportError("wire: Results changed: update encode_results to match")


class Giveback(Message):
    KIND: ClassVar[bytes] = GIVEBACK
    granted: Count
    received: Count
    keys: list[Key]


class Revoke(Message):
    KIND: ClassVar[bytes] = REVOKE
    n: Count


class Bye(Message):
    KIND: ClassVar[bytes] = BYE
    reason: str


class WorkerReport(_Body):
    worker: str
    pid: Count
    alive: bool
    busy_s: float  # seconds the current task has run; 0 when idle
    restarts: Count
    rss_mb: float


class Lost(_Body):
    """A worker the pool saw end.  ``reason.kind`` is ``TIMEOUT`` when the pool killed it for ``task``'s hard
    limit (only that task fails), else ``WORKER_LOST`` with what happened ("crashed: exit code -9", ...)."""

    worker: str
    reason: Fault
    task: Optional[Key]  # the task it was running, when known

    @property
    def why(self) -> str:
        """What happened to the worker, as text: "crashed: exit code -9", "timeout: reward ran past ..."."""
        return self.reason.detail if self.reason.kind is ErrorKind.WORKER_LOST else str(self.reason)


class PoolReport(Stamped):
    KIND: ClassVar[bytes] = POOL
    pool: str
    host: str
    pid: Count
    state: PoolState
    workers: list[WorkerReport]
    lost: list[Lost]


class StatusRequest(Message):
    KIND: ClassVar[bytes] = STATUS


class StatusReply(Message):
    KIND: ClassVar[bytes] = STATUS_REPLY
    status: dict


def _as_builtin(obj: Any) -> Any:
    """A subclass of str, int, float or bytes as its builtin value, as msgpack would pack it (msgspec refuses them)."""
    for t in (str, int, float, bytes):
        if isinstance(obj, t):
            return t(obj)  # type: ignore[arg-type]  # obj is a t
    raise TypeError(f"cannot encode a value of type {type(obj).__name__}")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_as_builtin)


def encode_body(value: Any) -> bytes:
    """``value`` as msgpack, as a message carries it; raises (TypeError, OverflowError, ...) if it cannot be."""
    return _ENCODER.encode(value)


def encode(msg: Message) -> list[bytes]:
    """Return the ``[kind, body]`` frames for ``msg`` (a message of this protocol or ``client_wire``'s)."""
    if not isinstance(msg, Message):
        raise TypeError(f"not a wire message: {type(msg).__name__}")
    return [msg.KIND, _ENCODER.encode(msg)]


def encode_results(granted: int, received: int, results: Sequence[Union[TaskResult, msgspec.Raw]]) -> list[bytes]:
    """The frames of ``Results(granted, received, results)``, where a result may come encoded already (a
    ``msgspec.Raw`` of its ``encode_body``, placed in the message as it is): the same bytes as ``encode`` makes."""
    return [RESULTS, _ENCODER.encode((granted, received, results))]


_M = TypeVar("_M", bound=Message)
_KIND_NAMES: dict[bytes, str] = {}  # every kind of both protocols -> its message's name, for errors


class Decoder(Generic[_M]):
    """The decoder of one socket: it accepts the messages of ``accepts`` and refuses every other kind."""

    def __init__(self, role: str, accepts: tuple[type[_M], ...]) -> None:
        """``role`` names the socket's owner in errors ("a worker does not accept StatusReply messages")."""
        self.role = role
        self._decoders: dict[bytes, tuple[str, msgspec.msgpack.Decoder[Any], bool]] = {}
        for cls in accepts:
            _KIND_NAMES[cls.KIND] = cls.__name__  # so that every socket's errors name it
            self._decoders[cls.KIND] = (cls.__name__, msgspec.msgpack.Decoder(cls), issubclass(cls, Stamped))

    def decode(self, kind: bytes, body: bytes, *, max_bytes: int) -> _M:
        """Decode and schema-check one message; raise ``WireError`` if it is not one this socket accepts, and its
        subclass ``ProtocolMismatch`` for a ``Stamped`` message of another protocol (whatever the rest of it holds)."""
        if len(body) > max_bytes:
            raise WireError(f"message of {len(body)} bytes exceeds the {max_bytes}-byte limit")
        entry = self._decoders.get(kind)
        if entry is None:
            name = _KIND_NAMES.get(kind)
            if name is None:
                raise WireError(f"unknown message kind {kind[:8]!r}")
            raise WireError(f"a {self.role} does not accept {name} messages")
        name, decoder, stamped = entry
        try:
            msg: _M = decoder.decode(body)
        except msgspec.ValidationError as exc:
            if stamped:
                _check_stamp(name, body)
            raise WireError(f"malformed {name} message: {exc}") from None
        except Exception as exc:  # msgspec.DecodeError; RecursionError for arrays nested past the interpreter's limit
            raise WireError(f"undecodable msgpack body of a {name} message: {exc}") from None
        if stamped:  # a flag, not isinstance: a few tens of ns on every message otherwise
            stamp = cast(Stamped, msg)
            if stamp.protocol != STAMP[0]:
                raise ProtocolMismatch(name, stamp.protocol, stamp.qworker)
        return msg


_STAMP_DECODER = msgspec.msgpack.Decoder(_Stamp)


def _check_stamp(name: str, body: bytes) -> None:
    """Raise ``ProtocolMismatch`` if ``body``, a ``name`` message that failed its schema check, is stamped with
    another protocol (else return: it is malformed, or from a peer that sends no stamp).  A stamp's version begins
    with a digit: an unstamped ``Submit`` of 0.1.0 (a request number, then a reward's name) is not read as one."""
    try:
        stamp = _STAMP_DECODER.decode(body)
    except Exception:
        return
    if stamp.protocol != STAMP[0] and stamp.qworker[:1].isdigit():
        raise ProtocolMismatch(name, stamp.protocol, stamp.qworker) from None


ProducerMessage = Union[Ready, Results, Giveback, Bye, PoolReport, StatusRequest]
WorkerMessage = Union[Tasks, Revoke, Refused]
AnyMessage = Union[Ready, Tasks, Results, Giveback, Revoke, Bye, PoolReport, StatusRequest, StatusReply, Refused]

_EVERY: Decoder[AnyMessage] = Decoder("peer", (Ready, Tasks, Results, Giveback, Revoke, Bye, PoolReport, StatusRequest, StatusReply,
                                              Refused))
PRODUCER: Decoder[ProducerMessage] = Decoder("producer", (Ready, Results, Giveback, Bye, PoolReport, StatusRequest))  # its ROUTER
WORKER: Decoder[WorkerMessage] = Decoder("worker", (Tasks, Revoke, Refused))
SUPERVISOR: Decoder[Refused] = Decoder("pool", (Refused,))  # a pool supervisor's socket: it hears only a refusal
STATUS_CLIENT: Decoder[StatusReply] = Decoder("status client", (StatusReply,))  # ``qworker status``


def decode(kind: bytes, body: bytes, *, max_bytes: int) -> AnyMessage:
    """Decode a message of any kind of this protocol (for tests and tools: a socket uses its own ``Decoder``)."""
    return _EVERY.decode(kind, body, max_bytes=max_bytes)
