"""The worker's normalisation of reward outputs, and a worker process driven by a real socket."""

import math
import os
import signal
import subprocess
import sys
import time

import msgpack
import zmq

from qworker._hashing import encode_payload
from qworker.host.slot import TaskSlot
from qworker.host.worker import fit_frame, result_bytes, to_score
from qworker.transport import wire
from qworker.transport.sockets import make_socket


def test_numbers_and_dicts_become_scores():
    assert to_score(1) == (1.0, None, None)
    assert to_score(True) == (1.0, None, None)
    assert to_score({"score": 0.5, "pred": "4"}) == (0.5, {"pred": "4"}, None)
    assert to_score({"score": 0.5}) == (0.5, None, None)


def test_bad_outputs_are_named():
    assert "without 'score'" in to_score({"value": 1})[2]
    assert "str, not a number" in to_score("0.5")[2]
    assert "NoneType" in to_score(None)[2]
    assert "non-finite" in to_score(math.nan)[2]
    assert "cannot be encoded" in to_score({"score": 1, "obj": object()})[2]


def recv(sock, timeout=10.0):
    assert sock.poll(int(timeout * 1000)), "no message from the worker"
    peer, kind, body = sock.recv_multipart()
    return peer, wire.decode(kind, body, max_bytes=1 << 20)


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
        tasks = [(bytes([i]) * 16, "gsm8k", {}, encode_payload({"response": f"#### {i}", "ground_truth": "3"}), None, 1, -1) for i in range(5)]
        router.send_multipart([peer, *wire.encode(wire.Tasks(tasks))])
        got = {}
        while len(got) < 5:
            _, msg = recv(router)
            if isinstance(msg, wire.Results):
                got.update({r[0]: r for r in msg.results})
                assert msg.received == 5
        assert got[bytes([3]) * 16][1] == 1.0 and got[bytes([2]) * 16][1] == 0.0
        assert slot.read() is None  # results sent: no task shows as running
        assert got[bytes([3]) * 16][2] == {"pred": "3"}
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
        slow = [(bytes([50 + i]) * 16, "sleep", {"ms": 300}, encode_payload({}), None, 1, -1) for i in range(4)]
        router.send_multipart([peer, *wire.encode(wire.Tasks(slow))])
        time.sleep(0.1)
        os.kill(proc.pid, signal.SIGTERM)
        seen = []
        while not any(isinstance(m, wire.Bye) for m in seen):
            seen.append(recv(router)[1])
        back = [k for m in seen if isinstance(m, wire.Giveback) for k in m.keys]
        done = [r[0] for m in seen if isinstance(m, wire.Results) for r in m.results]
        assert sorted(back + done) == sorted(t[0] for t in slow) and back
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        router.close()


def test_a_result_that_fits_a_frame_passes_and_one_that_does_not_becomes_a_small_bad_result():
    key = b"k" * 16
    small = (key, 1.0, {"blob": b"x" * 1000}, None, 0.1, None, "\0ran 0123456789abcdef")
    assert fit_frame(small, 1 << 20) == (small, result_bytes(small))
    big = (key, 1.0, {"blob": b"x" * (2 << 20)}, None, 0.1, {"status": 200}, "\0ran 0123456789abcdef")
    failed, size = fit_frame(big, 1 << 20)
    assert failed[:3] == (key, None, None) and failed[4:] == (0.1, {"status": 200}, "\0ran 0123456789abcdef") and size < 4096
    assert failed[3].startswith("bad_result: ") and f"{1 << 20}-byte message limit" in failed[3]
    assert f"the result is {result_bytes(big)} bytes" in failed[3]
    assert result_bytes(big) >= len(msgpack.packb(big, use_bin_type=True))  # an upper bound on the encoded size
    errs = (key, None, None, "reward_error: " + "é" * 500, 0.1, None, "\0ran 0123456789abcdef")
    assert result_bytes(errs) >= len(msgpack.packb(errs, use_bin_type=True))


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
            return (bytes([i]) * 16, name, {}, encode_payload(payload), timeout_s, 1, -1)

        tasks = [task(i, "async_cpu", {"n": i}) for i in range(1, 4)] + [task(4, "async_cpu", {"n": 0, "fail": True})]
        tasks += [task(i, "async_io", {"n": i}) for i in range(5, 8)]
        tasks.append(task(9, "async_io", {"n": 9, "sleep": 60}, timeout_s=0.5))
        router.send_multipart([peer, *wire.encode(wire.Tasks(tasks))])
        got = {}
        while len(got) < len(tasks):
            _, msg = recv(router, timeout=30)
            if isinstance(msg, wire.Results):
                got.update({r[0][0]: r for r in msg.results})
        for i in (1, 2, 3, 5, 6, 7):
            assert got[i][1] == float(i) and got[i][3] is None, got[i]
        cpu, io = [got[i][2] for i in (1, 2, 3)], [got[i][2] for i in (5, 6, 7)]
        assert all(e["main_thread"] for e in cpu) and not any(e["main_thread"] for e in io)
        assert len({e["loop"] for e in cpu}) == 1 and len({e["loop"] for e in io}) == 1  # one loop each, reused
        assert got[4][1] is None and got[4][3] == "reward_error: ValueError: asked to fail"
        assert got[9][1] is None and got[9][3].startswith("timeout: ")
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
        stuck = (bytes([1]) * 16, "async_io", {}, encode_payload({"n": 1, "sleep": 3600}), 0.3, 1, -1)
        after = (bytes([2]) * 16, "async_io", {}, encode_payload({"n": 2}), 60.0, 1, -1)
        router.send_multipart([peer, *wire.encode(wire.Tasks([stuck, after]))])
        got = {}
        while len(got) < 2:
            _, msg = recv(router, timeout=60)
            if isinstance(msg, wire.Results):
                got.update({r[0][0]: r for r in msg.results})
        assert got[1][3].startswith("timeout: ")
        assert got[2][1] == 2.0 and got[2][3] is None, got[2]
    finally:
        proc.kill()
        proc.wait()
        router.close(linger=0)
