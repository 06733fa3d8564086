import msgpack
import msgspec
import pytest

from qworker import Result, WireError
from qworker._errors import ErrorKind
from qworker.cache.hashing import encode_payload
from qworker.transport import client_wire as cw
from qworker.transport import wire

KEY = bytes(range(16))
LIMIT = 1 << 20
TIMEOUT = wire.Fault(ErrorKind.TIMEOUT, "x")


def roundtrip(msg):
    kind, body = wire.encode(msg)
    return wire.decode(kind, body, max_bytes=LIMIT)


@pytest.mark.parametrize(
    "msg",
    [
        wire.Tasks([wire.Task(KEY, "math", {"a": 1}, b"\x80", None, 1, None), wire.Task(KEY, "llm_judge", {}, b"", 2.5, 3, {"endpoint": 2})]),
        wire.Results(10, 4, [wire.TaskResult(KEY, 1.0, {"pred": "4"}, None, 0.01, None, "\0ran ab"),
                             wire.TaskResult(KEY, None, None, TIMEOUT, 2.0, {"status": 429}, None)]),
        wire.Ready(*wire.STAMP, "pool/w0.1", "pool", 123, "host", 8, 0, 0, ["noop"], ["cannot import x"], {"noop": "\0ran ab", "len": None}),
        wire.Giveback(8, 8, [KEY, KEY]),
        wire.Revoke(3),
        wire.Bye("draining"),
        wire.PoolReport(*wire.STAMP, "p", "h", 1, "running", [wire.WorkerReport("p/w0.1", 2, True, 0.5, 1, 30.0)],
                        [wire.Lost("p/w1.1", wire.Fault(ErrorKind.WORKER_LOST, "crashed: exit code -9"), KEY)]),
        wire.StatusRequest(),
        wire.StatusReply({"producer": {}, "pools": []}),
    ],
)
def test_every_message_roundtrips(msg):
    assert roundtrip(msg) == msg


def test_results_with_results_encoded_already_are_the_bytes_of_the_message():
    results = [wire.TaskResult(KEY, 1.0, {"pred": "4"}, None, 0.01, None, "\0ran ab"),
               wire.TaskResult(KEY, None, None, TIMEOUT, 2.0, {"status": 429}, None), wire.TaskResult(KEY, 0.5, None, None, 0.1, None, None)]
    mixed = [msgspec.Raw(wire.encode_body(results[0])), msgspec.Raw(wire.encode_body(results[1])), results[2]]
    assert wire.encode_results(10, 4, mixed) == wire.encode(wire.Results(10, 4, results))


@pytest.mark.parametrize(
    "msg, decoder",
    [
        (cw.Submit(*wire.STAMP, 1, "noop", None, [msgspec.Raw(encode_payload({"a": 1})), msgspec.Raw(encode_payload("x"))], 2.0), cw.SERVICE),
        (cw.Ack([1, 2]), cw.SERVICE),
        (cw.Ping([3]), cw.SERVICE),
        (wire.StatusRequest(), cw.SERVICE),
        (cw.Accepted(1, "inst", "no workers", "ServiceUnavailable"), cw.CLIENT),
        (cw.Resolved("inst", 4, [cw.ResolvedRequest(1, [0], [Result(score=0.5, extra={"p": 1}, error=None, attempts=1, key="ab")])]), cw.CLIENT),
        (cw.Pong("inst", 2, [5]), cw.CLIENT),
        (cw.Closing("inst", "stopping"), cw.CLIENT),
        (wire.StatusReply({"service": {}}), cw.CLIENT),
    ],
)
def test_every_client_message_roundtrips_through_the_decoder_of_the_socket_that_receives_it(msg, decoder):
    kind, body = cw.encode(msg)
    assert decoder.decode(kind, body, max_bytes=LIMIT) == msg


def test_a_resolved_request_decodes_into_results_whose_error_text_is_unchanged():
    group = cw.ResolvedRequest(7, [2], [Result(score=0.0, error="timeout: reward ran past its 2 s hard limit", worker="w")])
    msg = cw.CLIENT.decode(*cw.encode(cw.Resolved("i", 1, [group])), max_bytes=LIMIT)
    [got] = msg.requests
    [result] = got.results
    assert isinstance(result, Result) and result.error == "timeout: reward ran past its 2 s hard limit"
    assert result.error_kind == ErrorKind.TIMEOUT and (got.request, got.indexes) == (7, [2])


def test_a_fault_renders_as_the_result_error_text():
    fault = wire.Fault(ErrorKind.REWARD_ERROR, "ValueError: boom")
    assert str(fault) == "reward_error: ValueError: boom" == ErrorKind.REWARD_ERROR.error("ValueError: boom")
    assert wire.Lost("w", fault, None).why == "reward_error: ValueError: boom"
    assert wire.Lost("w", wire.Fault(ErrorKind.WORKER_LOST, "crashed: exit code -9"), None).why == "crashed: exit code -9"


def test_score_ints_become_floats():
    kind, body = wire.RESULTS, msgpack.packb([1, 1, [[KEY, 1, None, None, 0, None, None]]])
    score = wire.decode(kind, body, max_bytes=LIMIT).results[0].score
    assert score == 1.0 and isinstance(score, float)


@pytest.mark.parametrize(
    "kind, body, match",
    [
        (b"?", msgpack.packb([]), "unknown message kind"),
        (wire.TASKS, b"\xc1\xc1\xc1", "undecodable"),
        (wire.TASKS, msgpack.packb({"not": "a list"}), "malformed Tasks message: Expected `array`, got `object`"),
        (wire.TASKS, msgpack.packb([[[KEY, "r", {}, b""]]]), r"Expected `array` of at least length 7, got 4 - at `\$\[0\]\[0\]`"),
        (wire.TASKS, msgpack.packb([[[KEY, "r", {}, b"", None, 1, None, "extra"]]]), "at most length 7, got 8"),
        (wire.TASKS, msgpack.packb([[[b"short", "r", {}, b"", None, 1, None]]]), r"length >= 16 - at `\$\[0\]\[0\]\[0\]`"),
        (wire.TASKS, msgpack.packb([[[KEY, "r", [], b"", None, 1, None]]]), r"Expected `object`, got `array` - at `\$\[0\]\[0\]\[2\]`"),
        (wire.TASKS, msgpack.packb([[[KEY, "r", {}, b"", "soon", 1, None]]]), r"Expected `float \| null`, got `str` - at `\$\[0\]\[0\]\[4\]`"),
        (wire.TASKS, msgpack.packb([[[KEY, "r", {}, b"", None, 1, -2]]]), r"got `int` - at `\$\[0\]\[0\]\[6\]`"),
        (wire.TASKS, msgpack.packb([[[KEY, "r", {}, b"", None, True, None]]]), r"Expected `int`, got `bool`"),
        (wire.RESULTS, msgpack.packb([1, -1, []]), r"Expected `int` >= 0 - at `\$\[1\]`"),
        (wire.RESULTS, msgpack.packb([1, 1, [[KEY, "1.0", None, None, 0.0, None, None]]]), r"got `str` - at `\$\[2\]\[0\]\[1\]`"),
        (wire.RESULTS, msgpack.packb([1, 1, [[KEY, 1.0, [], None, 0.0, None, None]]]), r"got `array` - at `\$\[2\]\[0\]\[2\]`"),
        (wire.RESULTS, msgpack.packb([1, 1, [[KEY, 1.0, None, None, 0.0, "ok", None]]]), r"got `str` - at `\$\[2\]\[0\]\[5\]`"),
        (wire.RESULTS, msgpack.packb([1, 1, [[KEY, 1.0, None, None, 0.0, None, 3]]]), r"got `int` - at `\$\[2\]\[0\]\[6\]`"),
        (wire.RESULTS, msgpack.packb([1, 1, [[KEY, None, None, ["exploded", "x"], 0.0, None, None]]]), "Invalid enum value 'exploded'"),
        (wire.RESULTS, msgpack.packb([1, 1, [[KEY, None, None, "timeout: x", 0.0, None, None]]]), r"got `str` - at `\$\[2\]\[0\]\[3\]`"),
        (wire.READY, msgpack.packb([*wire.STAMP, "w", "p", 1, "h", 1, 1, 1, [1], [], {}]), r"Expected `str`, got `int` - at `\$\[9\]\[0\]`"),
        (wire.READY, msgpack.packb([*wire.STAMP, "w", "p", -1, "h", 1, 1, 1, [], [], {}]), r"Expected `int` >= 0 - at `\$\[4\]`"),
        (wire.READY, msgpack.packb([*wire.STAMP, "w", "p", 1, "h", 1, 1, 1, [], [], {"r": 3}]), r"Expected `str \| null`, got `int` - at `\$\[11\]\[\.\.\.\]`"),
        (wire.GIVEBACK, msgpack.packb([1, 1, [KEY, KEY[:15]]]), r"length >= 16 - at `\$\[2\]\[1\]`"),
        (wire.POOL, msgpack.packb([*wire.STAMP, "p", "h", 1, "exploded", [], []]), "Invalid enum value 'exploded'"),
        (wire.POOL, msgpack.packb([*wire.STAMP, "p", "h", 1, "running", [], [["w", "crashed", None]]]), r"got `str` - at `\$\[7\]\[0\]\[1\]`"),
        (wire.STATUS, msgpack.packb([1]), "malformed StatusRequest message: Expected `array` of at most length 0, got 1"),
        (wire.STATUS_REPLY, msgpack.packb([[1]]), r"malformed StatusReply message: Expected `object`, got `array` - at `\$\[0\]`"),
    ],
)
def test_malformed_bodies_name_the_problem(kind, body, match):
    with pytest.raises(WireError, match=match):
        wire.decode(kind, body, max_bytes=LIMIT)


def test_a_task_with_a_15_byte_key_is_refused_by_the_workers_decoder():
    body = msgpack.packb([[[KEY[:15], "noop", {}, b"\x80", None, 1, None]]])
    with pytest.raises(WireError, match=r"malformed Tasks message: Expected `bytes` of length >= 16 - at `\$\[0\]\[0\]\[0\]`"):
        wire.WORKER.decode(wire.TASKS, body, max_bytes=LIMIT)
    body = msgpack.packb([[[KEY + b"!", "noop", {}, b"\x80", None, 1, None]]])
    with pytest.raises(WireError, match="length <= 16"):
        wire.WORKER.decode(wire.TASKS, body, max_bytes=LIMIT)


@pytest.mark.parametrize(
    "decoder, msg, refusal",
    [
        (wire.PRODUCER, wire.Tasks([wire.Task(KEY, "noop", {}, b"\x80", None, 1, -1)]), "a producer does not accept Tasks messages"),
        (wire.PRODUCER, wire.Revoke(3), "a producer does not accept Revoke messages"),
        (wire.PRODUCER, wire.StatusReply({}), "a producer does not accept StatusReply messages"),
        (wire.WORKER, wire.Ready(*wire.STAMP, "w", "p", 1, "h", 1, 0, 0), "a worker does not accept Ready messages"),
        (wire.WORKER, wire.StatusRequest(), "a worker does not accept StatusRequest messages"),
        (wire.STATUS_CLIENT, wire.Bye("draining"), "a status client does not accept Bye messages"),
        (cw.SERVICE, cw.Resolved("i", 1, []), "a reward service does not accept Resolved messages"),
        (cw.SERVICE, wire.Ready(*wire.STAMP, "w", "p", 1, "h", 1, 0, 0), "a reward service does not accept Ready messages"),
        (cw.CLIENT, cw.Submit(*wire.STAMP, 1, "noop", None, [], None), "a client does not accept Submit messages"),
        (cw.CLIENT, wire.Tasks([]), "a client does not accept Tasks messages"),
    ],
)
def test_a_socket_refuses_a_message_of_a_kind_it_does_not_accept_naming_it(decoder, msg, refusal):
    kind, body = wire.encode(msg)
    with pytest.raises(WireError, match=f"^{refusal}$"):
        decoder.decode(kind, body, max_bytes=LIMIT)


@pytest.mark.parametrize(
    "decoder, kind, shape",
    [
        (wire.WORKER, wire.TASKS, [[[KEY, "r", {"p": "DEEP"}, b"", None, 1, None]]]),  # in a task's params
        (wire.PRODUCER, wire.RESULTS, [1, 1, [[KEY, 1.0, {"e": "DEEP"}, None, 0.0, None, None]]]),  # in a result's extra
        (cw.SERVICE, cw.SUBMIT, [*wire.STAMP, 1, "noop", None, ["DEEP"], None]),  # in a payload
    ],
)
def test_a_body_nested_past_the_recursion_limit_is_refused_not_a_crash(decoder, kind, shape):
    body = msgpack.packb(shape).replace(msgpack.packb("DEEP"), b"\x91" * 200_000 + b"\xc0")  # 200k arrays, one in another
    with pytest.raises(WireError, match="undecodable msgpack body"):
        decoder.decode(kind, body, max_bytes=LIMIT)


def test_oversized_body_is_refused_before_decoding():
    with pytest.raises(WireError, match="exceeds the 10-byte limit"):
        wire.decode(wire.TASKS, b"\x90" * 11, max_bytes=10)


def test_encode_refuses_non_messages():
    with pytest.raises(TypeError):
        wire.encode("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wire.encode(wire.Task(KEY, "noop", {}, b"", None, 1, -1))  # a part of a message, not one


def test_values_that_msgpack_packs_encode_the_same_way():
    # params and payloads are checked by msgpack at submission: whatever it packs, a message must carry
    class Name(str):
        pass

    class Count(int):
        pass

    params = {"model": Name("judge"), "n": Count(3), (1, 2): b"k", None: 1.5}
    task = wire.Task(KEY, "noop", params, b"", None, 1, None)
    assert wire.encode_body(task) == msgpack.packb([KEY, "noop", params, b"", None, 1, None], use_bin_type=True)
    with pytest.raises(TypeError, match="cannot encode a value of type object"):
        wire.encode_body({"x": object()})


def test_damaged_bodies_of_every_message_decode_or_raise_wire_error_and_nothing_else():
    import random

    rng = random.Random(7)
    valid = [
        (wire.PRODUCER, wire.Results(10, 4, [wire.TaskResult(KEY, 1.0, {"pred": "4"}, TIMEOUT, 0.01, {"status": 429}, "\0ran ab")])),
        (wire.PRODUCER, wire.Ready(*wire.STAMP, "pool/w0.1", "pool", 123, "host", 8, 0, 0, ["noop"], ["x"], {"noop": "v", "len": None})),
        (wire.PRODUCER, wire.PoolReport(*wire.STAMP, "p", "h", 1, "running", [wire.WorkerReport("p/w0.1", 2, True, 0.5, 1, 30.0)],
                                        [wire.Lost("p/w1.1", TIMEOUT, KEY)])),
        (wire.WORKER, wire.Tasks([wire.Task(KEY, "math", {"a": [1, {"b": 2.5}]}, b"\x80", 2.5, 1, -1)])),
        (cw.SERVICE, cw.Submit(*wire.STAMP, 1, "noop", {"k": "v"}, [{"a": 1}, [1, 2], "x"], 2.0)),
        (cw.CLIENT, cw.Resolved("inst", 4, [cw.ResolvedRequest(1, [0], [Result(score=0.5, extra={"p": 1}, error="timeout: x")])])),
    ]
    for decoder, msg in valid:
        kind, body = wire.encode(msg)
        for _ in range(400):
            damaged = bytearray(body)
            for _ in range(rng.randint(1, 4)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            cut = bytes(damaged[: rng.randint(0, len(damaged))]) if rng.random() < 0.2 else bytes(damaged)
            try:
                decoder.decode(kind, cut, max_bytes=LIMIT)
            except WireError:
                pass
