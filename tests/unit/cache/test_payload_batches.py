"""A submission's payloads encoded as a batch: the same bytes, and the same refusals, as one by one."""

from __future__ import annotations

import datetime
import enum
from collections import OrderedDict

import pytest

from qworker.cache.hashing import encode_payload, encode_payloads, new_packer


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Tagged(str):
    pass


PAYLOADS = [
    {"i": 1, "rep": 0},
    {"b": 2, "a": 1},  # keys out of order: sorted as they are encoded
    {"prompt": "q", "messages": [{"role": "user", "content": "hi"}, {"content": "x", "role": "assistant"}]},
    {"nested": {"z": 1, "a": (1, 2)}},
    OrderedDict([("b", 1), ("a", 2)]),  # a dict subclass: packed as msgpack packs it, not sorted
    {1: "int key", 2: "two"},
    {"big": 2**70 - 1},  # past 64 bits: msgpack refuses it
    {"level": Level.HIGH, "tag": Tagged("t")},
    [3, {"y": 1, "x": 2}],
    "a plain string",
    None,
    {"when": datetime.date(2026, 1, 1)},  # msgpack cannot encode it: refused
    {"colour": Colour.RED},
    {"set": {1, 2}},
    {"bytes": b"\x00\x01", "f": 1.5, "t": True},
]


def _one_by_one(payload: object) -> object:
    try:
        return encode_payload(payload, new_packer())
    except Exception as exc:
        return type(exc)


def test_a_batch_encodes_each_payload_to_the_bytes_encode_payload_gives_and_refuses_the_same_ones():
    batch = encode_payloads(PAYLOADS, new_packer())
    assert len(batch) == len(PAYLOADS)
    for payload, got in zip(PAYLOADS, batch, strict=True):
        want = _one_by_one(payload)
        if isinstance(got, Exception):
            assert want is type(got), payload
        else:
            assert got == want, payload
    assert any(isinstance(got, Exception) for got in batch)  # the refusals are in the batch, in place


@pytest.mark.parametrize("bad", [{"when": datetime.date(2026, 1, 1)}, {"big": 2**70}])
def test_a_payload_that_cannot_be_encoded_leaves_its_neighbours_encoded(bad: dict):
    a, refused, b = encode_payloads([{"i": 1}, bad, {"i": 2}], new_packer())
    assert a == encode_payload({"i": 1}) and b == encode_payload({"i": 2})
    assert isinstance(refused, Exception)


def test_a_cyclic_payload_is_refused_alone_and_its_neighbours_are_encoded():
    cyclic: dict = {}
    cyclic["self"] = [cyclic]
    out = encode_payloads([{"ok": 1}, cyclic, {"ok": 2}], new_packer())
    assert out[0] == encode_payload({"ok": 1}) and out[2] == encode_payload({"ok": 2})
    assert isinstance(out[1], RecursionError)
