"""A worker fits its RESULTS messages to the lower of its own frame limit and the producer's, which every ``Tasks``
message states, and states its own in ``Ready`` (pure: the socket is a stand-in)."""

from __future__ import annotations

import os
import time

import msgspec
import zmq

from qworker.cache.hashing import encode_payload
from qworker.config.options import WorkerOptions
from qworker.host.worker import Worker, fit_frame
from qworker.transport import wire
from qworker.transport.sockets import CURVE_FRAME_BYTES

RESULT = msgspec.msgpack.Decoder(wire.TaskResult)

LOW = 65_536


def blob(payload: dict) -> dict:
    return {"score": float(payload["n"]), "blob": b"x" * payload["bytes"]}


class Socket:
    """Hands the worker the frames in ``inbox``; records what it sends."""

    def __init__(self, inbox: list[list[bytes]]) -> None:
        self.inbox = inbox
        self.sent: list[list[bytes]] = []

    def getsockopt(self, option: int) -> int:
        assert option == zmq.EVENTS
        return zmq.POLLIN if self.inbox else 0

    def recv_multipart(self, **_: object) -> list[bytes]:
        return self.inbox.pop(0)

    def send_multipart(self, frames: list[bytes], **_: object) -> None:
        self.sent.append(list(frames))


def run(worker: Worker, tasks: wire.Tasks) -> list[wire.Message]:
    worker.sock = Socket([wire.encode(tasks)])  # type: ignore[assignment]
    try:
        worker._drain_socket()
        worker._run_tasks(time.monotonic() + 30)
        worker._flush()
        worker._ready()
    finally:
        os.close(worker._wake_r)
        os.close(worker._wake_w)
    return [wire.decode(kind, body, max_bytes=64 << 20) for kind, body in worker.sock.sent]  # type: ignore[attr-defined]


def test_results_fit_the_producers_lower_limit_and_one_over_it_fails_as_bad_result():
    worker = Worker(WorkerOptions(connect="ipc:///nowhere", worker_id="t/w0.1"))  # its own limit: 64 MiB
    name = f"{__name__}:blob"
    sizes = [20_000] * 6 + [200_000]
    tasks = [wire.Task(bytes([n]) * 16, name, {}, encode_payload({"n": n, "bytes": b}), None, 1, None) for n, b in enumerate(sizes)]
    sent = run(worker, wire.Tasks(tasks, LOW))
    frames = [m for m in sent if isinstance(m, wire.Results)]
    assert all(len(wire.encode(m)[1]) <= LOW for m in frames) and len(frames) > 1
    results = {r.key[0]: r for m in frames for r in m.results}
    assert all(results[n].error is None and results[n].extra == {"blob": b"x" * 20_000} for n in range(6))
    bad = results[6].error
    assert bad is not None and bad.kind.value == "bad_result" and f"{LOW}-byte message limit" in bad.detail, bad
    [hello] = [m for m in sent if isinstance(m, wire.Ready)]
    assert hello.max_message_bytes == 64 << 20  # it states its own limit


def test_a_producer_of_a_higher_limit_leaves_the_workers_own():
    worker = Worker(WorkerOptions(connect="ipc:///nowhere", worker_id="t/w0.1", max_message_bytes=LOW))
    run(worker, wire.Tasks([], 64 << 20))
    assert worker.frame_bytes == LOW and worker.batch_bytes == LOW // 2


def largest_blob_that_fits(limit: int) -> int:
    """The largest ``blob`` reward's byte count whose result ``fit_frame`` passes at ``limit``."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        result = wire.TaskResult(b"k" * 16, 1.0, {"blob": b"x" * mid}, None, 0.1, None, None)
        packed, _ = fit_frame(result, limit)
        lo, hi = (mid, hi) if isinstance(packed, msgspec.Raw) and RESULT.decode(packed).error is None else (lo, mid - 1)
    return lo


def test_results_fitted_to_a_limit_leave_room_for_curves_framing():
    # CURVE adds CURVE_FRAME_BYTES to each frame on the wire and MAXMSGSIZE counts them: a RESULTS body at the limit
    # would drop the link.  The tightest cases: one result as large as fits, and batches of results at the batch bound.
    edge = largest_blob_that_fits(LOW)  # for a result of another key and time: the worker's run near it, each side
    sizes = [edge - k for k in range(-40, 200, 4)] + [LOW // 7] * 20 + [LOW // 2 - 200] * 4
    worker = Worker(WorkerOptions(connect="ipc:///nowhere", worker_id="t/w0.1", max_message_bytes=LOW))
    tasks = [wire.Task(n.to_bytes(2, "big") * 8, f"{__name__}:blob", {}, encode_payload({"n": n, "bytes": b}), None, 1, None)
             for n, b in enumerate(sizes)]
    worker.granted = worker.received = 2**63 - 1  # the widest credit counts msgpack writes
    sent = run(worker, wire.Tasks(tasks, LOW))
    bodies = [body for kind, body in worker.sock.sent if kind == wire.RESULTS]  # type: ignore[attr-defined]
    results = [r for m in sent if isinstance(m, wire.Results) for r in m.results]
    assert sorted(r.key for r in results) == sorted(t.key for t in tasks)  # those over the line fail as small bad_results
    sent_sizes = {sizes[int.from_bytes(r.key[:2], "big")] for r in results if r.error is None}
    failed = {sizes[int.from_bytes(r.key[:2], "big")] for r in results if r.error is not None}
    assert failed and min(failed) - max(sent_sizes) == 4  # the line was probed: the largest sent is next to the smallest failed
    assert max(len(body) for body in bodies) + CURVE_FRAME_BYTES <= LOW, sorted(map(len, bodies))[-3:]
