"""A worker encodes each result once on its way to the producer (pure: the socket is a stand-in)."""

from __future__ import annotations

import os
import time

import msgspec
import pytest

from qworker.cache.hashing import encode_payload
from qworker.config.options import WorkerOptions
from qworker.host.worker import MESSAGE_OVERHEAD, Worker, fit_frame
from qworker.transport import wire


class Marked(str):
    """A str the encoder meets through its hook (msgspec hands it str subclasses): each encoding of an extra holding
    one calls the hook once."""


def marked(payload: dict) -> dict:
    return {"score": float(payload["n"]), "pred": Marked(str(payload["n"]))}


class Socket:
    def __init__(self) -> None:
        self.sent: list[list[bytes]] = []

    def send_multipart(self, frames: list[bytes], **_: object) -> None:
        self.sent.append(list(frames))


def test_a_result_with_an_extra_is_encoded_once_and_arrives_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    encodings = []

    def hook(obj: object) -> object:
        if isinstance(obj, Marked):
            encodings.append(str(obj))
        return wire._as_builtin(obj)

    monkeypatch.setattr(wire, "_ENCODER", msgspec.msgpack.Encoder(enc_hook=hook))
    worker = Worker(WorkerOptions(connect="ipc:///nowhere", worker_id="t/w0.1"))
    worker.sock = Socket()  # type: ignore[assignment]
    name = f"{__name__}:marked"
    worker.inbox.extend(wire.Task(bytes([n]) * 16, name, {}, encode_payload({"n": n}), None, 1, None) for n in range(3))
    worker.received = 3
    try:
        worker._run_tasks(time.monotonic() + 30)
    finally:
        os.close(worker._wake_r)
        os.close(worker._wake_w)
    got = [wire.PRODUCER.decode(kind, body, max_bytes=1 << 20) for kind, body in worker.sock.sent]  # type: ignore[attr-defined]
    results = [r for m in got if isinstance(m, wire.Results) for r in m.results]
    assert [(r.score, r.extra, r.error) for r in results] == [(float(n), {"pred": str(n)}, None) for n in range(3)]
    assert sorted(encodings) == ["0", "1", "2"]  # each extra encoded once: to learn its size, and those bytes sent


def _fits(packed: object, size: int, limit: int) -> wire.TaskResult:
    body = bytes(packed) if isinstance(packed, msgspec.Raw) else wire.encode_body(packed)
    assert size + MESSAGE_OVERHEAD <= limit
    return msgspec.msgpack.decode(body, type=wire.TaskResult)


def test_a_result_whose_extra_does_not_encode_fails_small_even_with_a_large_call_outcome() -> None:
    limit = 1 << 16
    big = {"o": "x" * limit}
    failed = _fits(*fit_frame(wire.TaskResult(b"k" * 16, 1.0, {"x": object()}, None, 0.1, big, None), limit), limit)
    assert failed.error is not None and "cannot be encoded" in failed.error.detail and failed.meta is None


def test_a_call_outcome_that_does_not_encode_is_a_small_failure_not_an_exception() -> None:
    limit = 1 << 16
    failed = _fits(*fit_frame(wire.TaskResult(b"k" * 16, 1.0, None, None, 0.1, {"o": object()}, None), limit), limit)
    assert failed.error is not None and "call outcome cannot be encoded" in failed.error.detail and failed.meta is None
