"""A worker fits its RESULTS messages to the lower of its own frame limit and the producer's, which every ``Tasks``
message states, and states its own in ``Ready`` (pure: the socket is a stand-in)."""

from __future__ import annotations

import os
import time

import zmq

from qworker.cache.hashing import encode_payload
from qworker.config.options import WorkerOptions
from qworker.host.worker import Worker
from qworker.transport import wire

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
