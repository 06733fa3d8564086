"""The worker's normalisation of reward outputs, and a worker process driven by a real socket."""

import math
import os
import signal
import subprocess
import sys
import time

import msgspec
import zmq

from qworker._errors import ErrorKind
from qworker.cache.hashing import encode_payload
from qworker.host.slot import TaskSlot
from qworker.host.worker import fit_frame, result_bytes, to_score
from qworker.transport import wire
from qworker.transport.sockets import make_socket

RESULT = msgspec.msgpack.Decoder(wire.TaskResult)  # a result fit_frame encoded (msgspec.Raw)


def test_numbers_and_dicts_become_scores():
    assert to_score(1) == (1.0, None, None)
    assert to_score(True) == (1.0, None, None)
    assert to_score({"score": 0.5, "pred": "4"}) == (0.5, {"pred": "4"}, None)
    assert to_score({"score": 0.5}) == (0.5, None, None)


def test_bad_outputs_are_named():
    for out, named in [({"value": 1}, "without 'score'"), ("0.5", "str, not a number"), (None, "NoneType"), (math.nan, "non-finite")]:
        error = to_score(out)[2]
        assert error is not None and error.kind is ErrorKind.BAD_RESULT and named in error.detail, out
    # an extra that does not encode is named where the result is encoded, keeping the endpoint call's outcome
    score, extra, error = to_score({"score": 1, "obj": object()})
    packed, size = fit_frame(wire.TaskResult(b"k" * 16, score, extra, error, 0.1, {"status": 200}, None), 1 << 20)
    failed = RESULT.decode(packed)
    assert failed.error is not None and failed.error.kind is ErrorKind.BAD_RESULT and "cannot be encoded" in failed.error.detail
    assert failed.score is None and failed.extra is None and failed.meta == {"status": 200} and size == result_bytes(failed)


def recv(sock, timeout=10.0):
    assert sock.poll(int(timeout * 1000)), "no message from the worker"
    peer, kind, body = sock.recv_multipart()
    return peer, wire.PRODUCER.decode(kind, body, max_bytes=1 << 20)


def test_worker_process_speaks_the_protocol(tmp_path):
    ctx = zmq.Context.instance()
    router = make_socket(ctx, zmq.ROUTER, bind=f"ipc://{tmp_path}/w.sock")
    slot = TaskSlot(str(tmp_path / "slot"), create=True)  # the busy slot the pool's watchdog reads
    proc = subprocess.Popen([sys.executable, "-m", "qworker.host.worker", "--connect", f"ipc://{tmp_path}/w.sock", "--id", "t/w0.1", "--heartbeat", "0.2",
                             "--slot", slot.path])
    try:
        peer, ready = recv(router)
        assert peer == b"t/w0.1" and isinstance(ready, wire.Ready)
        assert ready.granted > 0 and ready.received == 0 and "gsm8k" in ready.rewards
        tasks = [wire.Task(bytes([i]) * 16, "gsm8k", {}, encode_payload({"response": f"#### {i}", "ground_truth": "3"}), None, 1, None) for i in range(5)]
        router.send_multipart([peer, *wire.encode(wire.Tasks(tasks))])
        got = {}
        while len(got) < 5:
            _, msg = recv(router)
            if isinstance(msg, wire.Results):
                got.update({r.key: r for r in msg.results})
                assert msg.received == 5
        assert got[bytes([3]) * 16].score == 1.0 and got[bytes([2]) * 16].score == 0.0
        assert slot.read() is None  # results sent: no task shows as running
        assert got[bytes([3]) * 16].extra == {"pred": "3"}
        # garbage does not kill it
        router.send_multipart([peer, b"T", b"\xc1"])
        router.send_multipart([peer, b"nonsense"])
        # idle: it sends READY heartbeats carrying its totals
        deadline = time.monotonic() + 5
        while True:
            _, msg = recv(router)
            if isinstance(msg, wire.Ready):
                assert (msg.received, msg.finished) == (5, 5)
                break
            assert time.monotonic() < deadline
        # SIGTERM: it hands back what it has not started and says BYE
        slow = [wire.Task(bytes([50 + i]) * 16, "sleep", {"ms": 300}, encode_payload({}), None, 1, None) for i in range(4)]
        router.send_multipart([peer, *wire.encode(wire.Tasks(slow))])
        time.sleep(0.1)
        os.kill(proc.pid, signal.SIGTERM)
        seen = []
        while not any(isinstance(m, wire.Bye) for m in seen):
            seen.append(recv(router)[1])
        back = [k for m in seen if isinstance(m, wire.Giveback) for k in m.keys]
        done = [r.key for m in seen if isinstance(m, wire.Results) for r in m.results]
        assert sorted(back + done) == sorted(t.key for t in slow) and back
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        router.close()


def test_a_result_that_fits_a_frame_passes_and_one_that_does_not_becomes_a_small_bad_result():
    key = b"k" * 16
    small = wire.TaskResult(key, 1.0, {"blob": b"x" * 1000}, None, 0.1, None, "\0ran 0123456789abcdef")
    assert fit_frame(small, 1 << 20) == (msgspec.Raw(wire.encode_body(small)), result_bytes(small))  # encoded once, here
    big = wire.TaskResult(key, 1.0, {"blob": b"x" * (2 << 20)}, None, 0.1, {"status": 200}, "\0ran 0123456789abcdef")
    packed, size = fit_frame(big, 1 << 20)
    failed = RESULT.decode(packed)
    assert failed == wire.TaskResult(key, None, None, failed.error, 0.1, {"status": 200}, "\0ran 0123456789abcdef") and size < 4096
    assert failed.error is not None and failed.error.kind is ErrorKind.BAD_RESULT and f"{1 << 20}-byte message limit" in failed.error.detail
    assert f"the result is {result_bytes(big)} bytes" in failed.error.detail
    assert result_bytes(big) >= len(wire.encode_body(big))  # an upper bound on the encoded size
    errs = wire.TaskResult(key, None, None, wire.Fault(ErrorKind.REWARD_ERROR, "é" * 500), 0.1, None, "\0ran 0123456789abcdef")
    assert result_bytes(errs) >= len(wire.encode_body(errs))


ASYNC_REWARDS = '''
import asyncio
import threading

from qworker import reward


def where() -> dict:
    return {"main_thread": threading.current_thread() is threading.main_thread(), "loop": id(asyncio.get_running_loop())}


@reward("async_cpu")
async def async_cpu(payload: dict) -> dict:
    await asyncio.sleep(0.01)
    if payload.get("fail"):
        raise ValueError("asked to fail")
    return {"score": float(payload["n"]), **where()}


@reward("async_io", kind="io")
async def async_io(payload: dict) -> dict:
    await asyncio.sleep(payload.get("sleep", 0.01))
    return {"score": float(payload["n"]), **where()}
'''


def test_async_def_rewards_are_awaited_on_one_loop_per_kind_and_io_ones_keep_their_deadline(tmp_path):
    module = tmp_path / "async_rewards.py"
    module.write_text(ASYNC_REWARDS)
    ctx = zmq.Context.instance()
    router = make_socket(ctx, zmq.ROUTER, bind=f"ipc://{tmp_path}/w.sock")
    proc = subprocess.Popen([sys.executable, "-m", "qworker.host.worker", "--connect", f"ipc://{tmp_path}/w.sock", "--id", "t/w0.1",
                             "--heartbeat", "0.2", "--reward-modules", str(module)])
    try:
        peer, ready = recv(router)
        assert {"async_cpu", "async_io"} <= set(ready.rewards)

        def task(i, name, payload, timeout_s=None):
            return wire.Task(bytes([i]) * 16, name, {}, encode_payload(payload), timeout_s, 1, None)

        tasks = [task(i, "async_cpu", {"n": i}) for i in range(1, 4)] + [task(4, "async_cpu", {"n": 0, "fail": True})]
        tasks += [task(i, "async_io", {"n": i}) for i in range(5, 8)]
        tasks.append(task(9, "async_io", {"n": 9, "sleep": 60}, timeout_s=0.5))
        router.send_multipart([peer, *wire.encode(wire.Tasks(tasks))])
        got = {}
        while len(got) < len(tasks):
            _, msg = recv(router, timeout=30)
            if isinstance(msg, wire.Results):
                got.update({r.key[0]: r for r in msg.results})
        for i in (1, 2, 3, 5, 6, 7):
            assert got[i].score == float(i) and got[i].error is None, got[i]
        cpu, io = [got[i].extra for i in (1, 2, 3)], [got[i].extra for i in (5, 6, 7)]
        assert all(e["main_thread"] for e in cpu) and not any(e["main_thread"] for e in io)
        assert len({e["loop"] for e in cpu}) == 1 and len({e["loop"] for e in io}) == 1  # one loop each, reused
        assert got[4].score is None and got[4].error == wire.Fault(ErrorKind.REWARD_ERROR, "ValueError: asked to fail")
        assert got[9].score is None and got[9].error.kind is ErrorKind.TIMEOUT
    finally:
        proc.kill()
        proc.wait()
        router.close(linger=0)


def test_an_async_io_reward_past_its_deadline_gives_back_its_thread(tmp_path):
    # one io thread: a coroutine that never ends is cancelled after its deadline, so the next io task still runs
    module = tmp_path / "async_rewards.py"
    module.write_text(ASYNC_REWARDS)
    ctx = zmq.Context.instance()
    router = make_socket(ctx, zmq.ROUTER, bind=f"ipc://{tmp_path}/w.sock")
    proc = subprocess.Popen([sys.executable, "-m", "qworker.host.worker", "--connect", f"ipc://{tmp_path}/w.sock", "--id", "t/w0.1",
                             "--heartbeat", "0.2", "--io-threads", "1", "--reward-modules", str(module)])
    try:
        peer, _ = recv(router)
        stuck = wire.Task(bytes([1]) * 16, "async_io", {}, encode_payload({"n": 1, "sleep": 3600}), 0.3, 1, None)
        after = wire.Task(bytes([2]) * 16, "async_io", {}, encode_payload({"n": 2}), 60.0, 1, None)
        router.send_multipart([peer, *wire.encode(wire.Tasks([stuck, after]))])
        got = {}
        while len(got) < 2:
            _, msg = recv(router, timeout=60)
            if isinstance(msg, wire.Results):
                got.update({r.key[0]: r for r in msg.results})
        assert got[1].error.kind is ErrorKind.TIMEOUT
        assert got[2].score == 2.0 and got[2].error is None, got[2]
    finally:
        proc.kill()
        proc.wait()
        router.close(linger=0)
