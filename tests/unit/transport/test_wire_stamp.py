"""The wire's version stamp: a ``Stamped`` message of another protocol is told apart from a malformed one, whatever
the rest of it holds, and ``Refused`` reads the same in every version."""

from __future__ import annotations

import msgpack
import msgspec
import pytest

from qworker.transport import client_wire as cw
from qworker.transport import wire
from qworker.transport.wire import ProtocolMismatch, WireError

LIMIT = 1 << 20
OTHER = (wire.PROTOCOL + 1, "9.9.9")


def ready(stamp: tuple[int, str]) -> wire.Ready:
    return wire.Ready(*stamp, "pool/w0.1", "pool", 1, "h", 8, 0, 0)


def test_every_message_that_opens_a_conversation_is_stamped_first():
    for cls in (wire.Ready, wire.PoolReport, cw.Submit):
        assert issubclass(cls, wire.Stamped) and cls.__struct_fields__[:2] == ("protocol", "qworker")
    assert wire.Refused.__struct_fields__[:2] == ("protocol", "qworker")


@pytest.mark.parametrize(
    "decoder, frames",
    [
        (wire.PRODUCER, wire.encode(ready(OTHER))),
        (wire.PRODUCER, wire.encode(wire.PoolReport(*OTHER, "p", "h", 1, "running", [], []))),
        (cw.SERVICE, wire.encode(cw.Submit(*OTHER, 1, "noop", None, [], None))),
    ],
)
def test_a_stamped_message_of_another_protocol_is_a_mismatch_naming_both_versions(decoder, frames):
    with pytest.raises(ProtocolMismatch) as exc:
        decoder.decode(*frames, max_bytes=LIMIT)
    assert (exc.value.protocol, exc.value.qworker) == OTHER
    assert f"qworker 9.9.9 (wire protocol {OTHER[0]})" in str(exc.value)
    assert f"qworker {wire.STAMP[1]} (wire protocol {wire.PROTOCOL})" in str(exc.value)


@pytest.mark.parametrize(
    "kind, fields",
    [
        (wire.READY, ["pool/w0.1", {"a new": "field"}, 3.5]),  # another version's Ready: other fields, other types
        (wire.POOL, []),
        (cw.SUBMIT, [1, "noop", None, [], None, "a field this version lacks"]),
    ],
)
def test_the_stamp_is_read_whatever_the_rest_of_the_message_holds(kind, fields):
    body = msgpack.packb([*OTHER, *fields])
    decoder = cw.SERVICE if kind == cw.SUBMIT else wire.PRODUCER
    with pytest.raises(ProtocolMismatch, match="qworker 9.9.9"):
        decoder.decode(kind, body, max_bytes=LIMIT)


@pytest.mark.parametrize(
    "body",
    [
        msgpack.packb([*wire.STAMP, "w", "p", -1, "h", 1, 1, 1]),  # this protocol, malformed
        msgpack.packb(["w", "p", 1, "h", 1, 1, 1, [], [], {}]),  # a peer from before the stamp: no number first
        msgpack.packb([-1, "9.9.9", "w", "p", 1, "h", 1, 1, 1]),  # no protocol is negative: garbage, not a version
        msgpack.packb({"protocol": 2}),
        msgpack.packb([]),
    ],
)
def test_a_message_without_another_protocols_stamp_is_malformed_not_a_mismatch(body):
    with pytest.raises(WireError, match="malformed Ready message") as exc:
        wire.PRODUCER.decode(wire.READY, body, max_bytes=LIMIT)
    assert not isinstance(exc.value, ProtocolMismatch)


def test_a_message_of_this_protocol_decodes():
    assert wire.PRODUCER.decode(*wire.encode(ready(wire.STAMP)), max_bytes=LIMIT) == ready(wire.STAMP)


@pytest.mark.parametrize("decoder", [wire.WORKER, wire.SUPERVISOR, cw.CLIENT])
def test_refused_is_read_by_each_refused_side_even_with_fields_a_later_version_adds(decoder):
    assert decoder.decode(*wire.encode(wire.refusal()), max_bytes=LIMIT) == wire.Refused(*wire.STAMP, "another wire protocol")
    later = msgpack.packb([*OTHER, "another wire protocol", "the producer's pool endpoint", {"new": 1}, [2]])
    msg = decoder.decode(wire.REFUSED, later, max_bytes=LIMIT)
    assert msg == wire.Refused(*OTHER, "another wire protocol", "the producer's pool endpoint")
    earlier = msgpack.packb([*OTHER, "another wire protocol"])  # a version before ``by``
    assert decoder.decode(wire.REFUSED, earlier, max_bytes=LIMIT) == wire.Refused(*OTHER, "another wire protocol")


def test_a_refused_line_names_what_refused_as_the_refuser_says_it_is():
    said = wire.Refused(*wire.STAMP, "it is for pools", "the producer's pool endpoint")
    who = wire.refuser(said, "tcp://h:5555", "the reward service at tcp://h:5555")
    assert wire.refused_line(who, "this client", said) == "the producer's pool endpoint tcp://h:5555 refused this client: it is for pools"
    unsaid = wire.Refused(*OTHER, "another wire protocol")  # a refuser that does not say: the one the peer dialled
    assert wire.refused_line(wire.refuser(unsaid, "tcp://h:5555", "the reward service at tcp://h:5555"), "this client",
                             unsaid).startswith("the reward service at tcp://h:5555 refused this client: it runs qworker 9.9.9")


def test_the_refused_sides_line_names_both_versions():
    line = wire.mismatch("the producer at tcp://h:5555", "this pool", wire.Refused(*OTHER, "another wire protocol"))
    assert line == (f"the producer at tcp://h:5555 refused this pool: it runs qworker 9.9.9 (wire protocol {OTHER[0]}), this pool "
                    f"qworker {wire.STAMP[1]} (wire protocol {wire.PROTOCOL}); install the same qworker version on both")


def test_a_stamp_too_long_for_a_log_line_is_cut():
    body = msgspec.msgpack.encode([OTHER[0], "9" + "x" * 10_000])
    with pytest.raises(ProtocolMismatch) as exc:
        wire.PRODUCER.decode(wire.READY, body, max_bytes=LIMIT)
    assert len(exc.value.qworker) == 64


@pytest.mark.parametrize("forged", ["9.9\n2025-01-01 ERROR qworker: forged line", "9.9\x1b[2J", "9.9\u2028x", "9" + "\x1b" * 63])
def test_a_stamp_that_would_break_or_forge_a_log_line_is_escaped(forged):
    body = msgspec.msgpack.encode([OTHER[0], forged])
    with pytest.raises(ProtocolMismatch) as exc:
        wire.PRODUCER.decode(wire.READY, body, max_bytes=LIMIT)
    assert exc.value.qworker.isprintable() and len(exc.value.qworker) <= 64 and "\n" not in str(exc.value)
    line = wire.mismatch("the service", "this client", wire.Refused(OTHER[0], forged, "another wire protocol"))
    assert line.isprintable(), line


@pytest.mark.parametrize("request_number", [1, 2, 7])
def test_an_unstamped_submit_from_before_the_stamp_is_malformed_not_a_mismatch(request_number):
    """A 0.1.0 client's Submit begins with its request number and a reward's name, which fit a stamp's types: it is
    a malformed message (that client cannot read a refusal), never a refusal of a made-up version."""
    body = msgpack.packb([request_number, "math", None, [], None])
    with pytest.raises(WireError) as exc:
        cw.SERVICE.decode(cw.SUBMIT, body, max_bytes=LIMIT)
    assert not isinstance(exc.value, ProtocolMismatch), exc.value


def test_a_refusal_for_the_endpoint_by_another_version_gives_its_reason_then_both_versions():
    # a Client of another version at a producer's endpoint for pools: installing one version is not enough
    said = wire.Refused(*OTHER, "it is for pools and workers; Clients connect to tcp://h:5557", "the producer's pool endpoint")
    line = wire.refused_line(wire.refuser(said, "tcp://h:5555", "the reward service at tcp://h:5555"), "this client", said)
    assert line == ("the producer's pool endpoint tcp://h:5555 refused this client: it is for pools and workers; Clients connect "
                    f"to tcp://h:5557; besides, it runs qworker 9.9.9 (wire protocol {OTHER[0]}), this client qworker "
                    f"{wire.STAMP[1]} (wire protocol {wire.PROTOCOL}); install the same qworker version on both")
    version_only = wire.Refused(*OTHER, "another wire protocol")
    assert wire.refused_line("the service", "this client", version_only) == wire.mismatch("the service", "this client", version_only)


def test_ready_and_tasks_read_the_fields_a_later_version_adds_and_take_a_limit_not_said_as_zero():
    task = [b"k" * 16, "noop", {}, b"\x80", None, 1, None]
    later_tasks = wire.WORKER.decode(wire.TASKS, msgpack.packb([[task], 65_536, "new", [1]]), max_bytes=LIMIT)
    assert later_tasks == wire.Tasks([wire.Task(*task)], 65_536)
    assert wire.WORKER.decode(wire.TASKS, msgpack.packb([[task]]), max_bytes=LIMIT) == wire.Tasks([wire.Task(*task)], 0)
    fields = [*wire.STAMP, "pool/w0.1", "pool", 1, "h", 8, 0, 0, [], [], {}]
    later_ready = wire.PRODUCER.decode(wire.READY, msgpack.packb([*fields, 65_536, {"new": 1}]), max_bytes=LIMIT)
    assert isinstance(later_ready, wire.Ready) and later_ready.max_message_bytes == 65_536
    unsaid = wire.PRODUCER.decode(wire.READY, msgpack.packb(fields), max_bytes=LIMIT)
    assert isinstance(unsaid, wire.Ready) and unsaid.max_message_bytes == 0
