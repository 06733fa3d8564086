"""``encode_payload_array``: a whole request's payloads encoded in one pass, each exactly as ``encode_payload`` encodes it."""

import collections

import pytest

from qworker.cache.hashing import encode_payload, encode_payload_array


@pytest.mark.parametrize("payloads", [
    [{"b": 1, "a": [1, 2, {"z": 1, "y": None}]}, "x", 3.5, [1, (2, 3)], b"q", {}, True, -7],
    [{"response": "#### 3", "ground_truth": "3"}] * 3,
    [],
])
def test_each_payload_is_encoded_as_encode_payload_encodes_it_alone(payloads):
    together = encode_payload_array(payloads)
    assert together is not None
    assert [bytes(raw) for raw in together] == [encode_payload(p) for p in payloads]


@pytest.mark.parametrize("payloads", [
    [{"a": 1}, {1: "int key"}],  # not a plain payload: the reference path decides its bytes
    [collections.OrderedDict(b=1, a=2)],
    [{"a": 2**70}],  # past 64 bits
    [{"a": 1}, object()],  # cannot be encoded at all
    [{"a": [1, {2: "b"}]}],  # a non-str key nested in a payload
    [{"a": 1}, [{1: 2}]],  # ... in a payload that is not a dict
    [{"a": collections.OrderedDict(b=1)}],  # a dict subclass as a value
])
def test_a_batch_with_a_payload_the_one_pass_cannot_encode_exactly_is_left_to_the_per_payload_path(payloads):
    assert encode_payload_array(payloads) is None


def test_a_cyclic_payload_sends_the_array_to_the_per_payload_path():
    cyclic: dict = {}
    cyclic["self"] = [cyclic]
    assert encode_payload_array([{"ok": 1}, cyclic]) is None


def test_the_one_pass_plain_check_accepts_exactly_what_the_general_one_accepts():
    import random

    from qworker.cache.hashing import _plain, _plain_each

    rng = random.Random(7)
    leaves = [1, -2, 2**70, 1.5, "s", b"b", None, True, object(), collections.OrderedDict(a=1)]

    def value(depth: int):
        kind = rng.randrange(5 if depth < 3 else 1)
        if kind == 0:
            return rng.choice(leaves)
        if kind == 1:
            return [value(depth + 1) for _ in range(rng.randrange(3))]
        if kind == 2:
            return tuple(value(depth + 1) for _ in range(rng.randrange(3)))
        keys = ["a", "b", 1, ("t",)] if kind == 3 else ["a", "b", "c"]
        return {rng.choice(keys): value(depth + 1) for _ in range(rng.randrange(3))}

    for _ in range(20_000):
        payloads = [value(0) for _ in range(rng.randrange(4))]
        assert _plain_each(payloads) == _plain(payloads), payloads
