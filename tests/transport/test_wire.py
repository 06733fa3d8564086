import msgpack
import pytest

from qworker import WireError
from qworker.transport import wire

KEY = bytes(range(16))
LIMIT = 1 << 20


def roundtrip(msg):
    kind, body = wire.encode(msg)
    return wire.decode(kind, body, max_bytes=LIMIT)


@pytest.mark.parametrize(
    "msg",
    [
        wire.Tasks([(KEY, "math", {"a": 1}, b"\x80", None, 1, None), (KEY, "llm_judge", {}, b"", 2.5, 3, {"endpoint": 2})]),
        wire.Results(10, 4, [(KEY, 1.0, {"pred": "4"}, None, 0.01, None, "\0ran ab"), (KEY, None, None, "timeout: x", 2.0, {"status": 429}, None)]),
        wire.Ready("pool/w0.1", "pool", 123, "host", 8, 0, 0, ["noop"], ["cannot import x"], {"noop": "\0ran ab", "len": None}),
        wire.Giveback(8, 8, [KEY, KEY]),
        wire.Bye("draining"),
        wire.PoolReport("p", "h", 1, "running", [wire.WorkerReport("p/w0.1", 2, True, 0.5, 1, 30.0)], [wire.Lost("p/w1.1", "crashed: exit code -9", KEY)]),
        wire.StatusRequest(),
        wire.StatusReply({"producer": {}, "pools": []}),
    ],
)
def test_every_message_roundtrips(msg):
    assert roundtrip(msg) == msg


def test_score_ints_become_floats():
    kind, body = wire.RESULTS, msgpack.packb([1, 1, [[KEY, 1, None, None, 0, None, None]]])
    assert wire.decode(kind, body, max_bytes=LIMIT).results[0][1] == 1.0


@pytest.mark.parametrize(
    "kind, body, match",
    [
        (b"Z", msgpack.packb([]), "unknown message kind"),
        (wire.TASKS, b"\xc1\xc1\xc1", "undecodable"),
        (wire.TASKS, msgpack.packb({"not": "a list"}), "tasks must be a list"),
        (wire.TASKS, msgpack.packb([[KEY, "r", {}, b""]]), "task must be a list of 7"),
        (wire.TASKS, msgpack.packb([[b"short", "r", {}, b"", None, 1, None]]), "16 bytes"),
        (wire.TASKS, msgpack.packb([[KEY, "r", [], b"", None, 1, None]]), "params must be a map"),
        (wire.TASKS, msgpack.packb([[KEY, "r", {}, b"", "soon", 1, None]]), "timeout must be a number"),
        (wire.TASKS, msgpack.packb([[KEY, "r", {}, b"", None, 1, -2]]), "meta must be a map or nil"),
        (wire.RESULTS, msgpack.packb([1, -1, []]), "received must be a non-negative int"),
        (wire.RESULTS, msgpack.packb([1, 1, [[KEY, "1.0", None, None, 0.0, None, None]]]), "score must be a number"),
        (wire.RESULTS, msgpack.packb([1, 1, [[KEY, 1.0, [], None, 0.0, None, None]]]), "extra must be a map"),
        (wire.RESULTS, msgpack.packb([1, 1, [[KEY, 1.0, None, None, 0.0, "ok", None]]]), "meta must be a map or nil"),
        (wire.READY, msgpack.packb(["w", "p", 1, "h", 1, 1, 1, [1], [], {}]), "rewards must be strings"),
        (wire.RESULTS, msgpack.packb([1, 1, [[KEY, 1.0, None, None, 0.0, None, 3]]]), "version must be a string"),
        (wire.READY, msgpack.packb(["w", "p", 1, "h", 1, 1, 1, [], [], {"r": 3}]), "versions must map"),
        (wire.POOL, msgpack.packb(["p", "h", 1, "exploded", [], []]), "pool state"),
        (wire.STATUS, msgpack.packb([1]), "status request"),
    ],
)
def test_malformed_bodies_name_the_problem(kind, body, match):
    with pytest.raises(WireError, match=match):
        wire.decode(kind, body, max_bytes=LIMIT)


def test_oversized_body_is_refused_before_decoding():
    with pytest.raises(WireError, match="exceeds the 10-byte limit"):
        wire.decode(wire.TASKS, b"\x90" * 11, max_bytes=10)


def test_encode_refuses_non_messages():
    with pytest.raises(TypeError):
        wire.encode("hello")  # type: ignore[arg-type]
