"""A worker's call of a reward: what fails is named for its cause (pure: no processes)."""

from __future__ import annotations

from types import SimpleNamespace

import msgpack
import pytest

from qworker._errors import ErrorKind
from qworker.cache.hashing import encode_payload
from qworker.host.worker import call_reward


def score_of(payload: dict) -> float:
    return float(payload["x"])


@pytest.mark.parametrize("payload_bytes", [
    msgpack.packb({"x": "1"}).replace(b"1", b"\xff"),  # a str whose bytes are not UTF-8
    b"\xc1",  # a byte msgpack never uses
    encode_payload({"x": 1})[:-1],  # cut short
    b"\x91" * 1100 + b"\x01",  # arrays nested past the decoder's recursion limit
], ids=["invalid-utf8", "not-msgpack", "truncated", "too-deep"])
def test_payload_bytes_that_do_not_decode_fail_as_bad_payload_not_as_the_rewards_error(payload_bytes):
    called = []
    score, extra, error, outcome = call_reward(SimpleNamespace(fn=lambda p: called.append(p) or 1.0), payload_bytes, {})
    assert score is None and not called
    assert error is not None and error.kind is ErrorKind.BAD_PAYLOAD and "encode_payload" in error.detail


def test_a_reward_that_raises_is_a_reward_error():
    score, extra, error, outcome = call_reward(SimpleNamespace(fn=score_of), encode_payload({"y": 1}), {})
    assert score is None and error is not None and error.kind is ErrorKind.REWARD_ERROR and "KeyError" in error.detail
