"""Remote pools over tcp://127.0.0.1, garbage on the producer's socket, draining (SIGTERM, Ctrl-C)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import msgpack
import zmq

from qworker import Producer
from qworker.transport import wire
from tests.conftest import TEST_REWARDS, console_script, count_lines


def start_pool(endpoint: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [console_script("qworker-pool"), "--connect", endpoint, "--rewards", TEST_REWARDS, *args],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )


def test_a_remote_pool_serves_a_producer_over_tcp():
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0) as p:
        assert p.endpoint.startswith("tcp://127.0.0.1:")
        pool = start_pool(p.endpoint, "--workers", "2", "--id", "remote-a")
        try:
            p.wait_for_workers(2, timeout=30)
            results = p.map("gsm8k", [{"response": f"#### {i}", "ground_truth": str(i)} for i in range(200)], timeout=30)
            status = p.status()
        finally:
            pool.send_signal(signal.SIGTERM)
            _, err = pool.communicate(timeout=30)
    assert all(r.ok and r.score == 1.0 for r in results)
    assert {r.worker.split("/")[0] for r in results} == {"remote-a"}
    assert [pl["pool"] for pl in status["pools"]] == ["remote-a"]
    assert pool.returncode == 0, err
    assert "draining" in err and "stopped" in err  # it logs what it does


def test_tasks_wait_for_a_pool_that_connects_later():
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0) as p:
        futures = p.submit_batch("noop", [{"i": i} for i in range(50)])
        time.sleep(0.3)
        assert not any(f.done() for f in futures)
        pool = start_pool(p.endpoint, "--workers", "1")
        try:
            assert all(r.ok for r in p.gather(futures, timeout=30))
        finally:
            pool.send_signal(signal.SIGTERM)
            pool.communicate(timeout=30)


def test_sigterm_drains_a_pool_and_another_pool_finishes_the_work(tmp_path):
    log = str(tmp_path / "evals")
    n = 300
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0) as p:
        first = start_pool(p.endpoint, "--workers", "2", "--id", "first")
        p.wait_for_workers(2, timeout=30)
        futures = p.submit_batch("count_eval", [{"log": log, "i": i, "sleep_ms": 20} for i in range(n)])
        while count_lines(log) < 30:
            time.sleep(0.05)
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=30)
        assert first.returncode == 0
        done_by_first = sum(f.done() for f in futures)
        assert done_by_first < n  # it handed work back rather than finishing everything
        second = start_pool(p.endpoint, "--workers", "2", "--id", "second")
        try:
            results = p.gather(futures, timeout=60)
        finally:
            second.send_signal(signal.SIGTERM)
            second.communicate(timeout=30)
    assert [r.score for r in results] == [float(i) for i in range(n)]
    assert all(r.ok and r.attempts == 1 for r in results)  # handed back, not lost: no extra attempt
    assert count_lines(log) == n  # and nothing ran twice
    assert {r.worker.split("/")[0] for r in results} == {"first", "second"}


def test_ctrl_c_drains_a_pool_and_exits_130_and_a_second_stops_a_running_task_at_once(tmp_path):
    log = str(tmp_path / "evals")
    pools: list[subprocess.Popen] = []
    try:
        with Producer(bind="tcp://127.0.0.1:0", local_workers=0) as p:
            for _ in range(2):  # as a terminal's foreground job: Ctrl-C is SIGINT to the pool and its workers
                pools.append(subprocess.Popen([console_script("qworker-pool"), "--connect", p.endpoint, "--rewards", TEST_REWARDS,
                                               "--workers", "1", "--drain-timeout", "600"], stdin=subprocess.DEVNULL,
                                              stderr=subprocess.PIPE, text=True, start_new_session=True))
                p.wait_for_workers(1, timeout=30)
                if len(pools) == 1:
                    os.killpg(pools[0].pid, signal.SIGINT)  # idle: it drains and stops
                    _, err = pools[0].communicate(timeout=60)
                    assert pools[0].returncode == 130 and "stopped" in err and "Traceback" not in err, err
            busy = pools[1]
            p.submit_batch("count_eval", [{"log": log, "i": 0, "sleep_ms": 600_000}], timeout_s=900)
            while count_lines(log) < 1:
                time.sleep(0.05)
            os.killpg(busy.pid, signal.SIGINT)  # its task would run for 10 minutes, within the drain timeout
            while True:
                line = busy.stderr.readline()
                assert line, f"the pool ended before it drained (exit {busy.wait()})"
                if "draining" in line:
                    break
            os.killpg(busy.pid, signal.SIGINT)  # the second: its worker is stopped now
            _, err = busy.communicate(timeout=60)
        assert busy.returncode == 130 and "Traceback" not in err, err
    finally:
        for pool in pools:
            if pool.poll() is None:
                os.killpg(pool.pid, signal.SIGKILL)
                pool.wait()


def test_a_worker_stopped_from_outside_its_pool_is_not_called_a_crash():
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0) as p:
        pool = start_pool(p.endpoint, "--workers", "1")
        try:
            p.wait_for_workers(1, timeout=30)
            os.kill(p.status()["pools"][0]["workers"][0]["pid"], signal.SIGTERM)  # an operator's kill, not the pool's
            line = pool.stderr.readline()
            while " ended after " not in line:
                line = pool.stderr.readline()
                assert line, "the pool's stderr ended before it said the worker ended"
        finally:
            pool.send_signal(signal.SIGTERM)
            pool.communicate(timeout=30)
    assert "exited with code 0 (a SIGTERM this pool did not send" in line and "crashed" not in line, line


def test_garbage_on_the_producer_socket_is_dropped_and_counted():
    with Producer(bind="tcp://127.0.0.1:0", local_workers=1, max_message_bytes=1 << 20) as p:
        host, port = p.endpoint.removeprefix("tcp://").rsplit(":", 1)
        # 1. not ZeroMQ at all
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 10)
        # 2. ZeroMQ, but not qworker
        ctx = zmq.Context.instance()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(p.endpoint)
        key = bytes(16)
        garbage = [
            [b"hello"],  # one frame
            [b"a", b"b", b"c"],  # too many frames
            [wire.TASKS, b"\xc1\xc1"],  # bad msgpack
            [b"Z", msgpack.packb([])],  # unknown kind
            [wire.RESULTS, msgpack.packb([1, 1, [[b"short", 1.0, None, None, 0.0, None, None]]])],  # bad key
            [wire.RESULTS, msgpack.packb([1, 1, [[key, 1.0, None, None, 0.0, None, None]]])],  # a result from a peer that is no worker
            wire.encode(wire.Tasks([wire.Task(key, "noop", {}, b"\x80", None, 1, None)])),  # wrong direction
            wire.encode(wire.Ready(*wire.STAMP, "someone-else", "p", 1, "h", 5, 0, 0, [], [])),  # spoofed name
            [wire.TASKS, b"x" * (2 << 20)],  # over MAXMSGSIZE: libzmq drops the connection
        ]
        for frames in garbage:
            s.send_multipart(frames)
        time.sleep(0.5)
        results = p.map("noop", [{"after": i} for i in range(100)], timeout=30)
        st = p.status()["producer"]
        s.close()
    assert all(r.ok for r in results)
    assert st["dropped_frames"] >= 7


def test_status_cli_reads_a_running_producer():
    with Producer(bind="tcp://127.0.0.1:0", local_workers=1) as p:
        p.map("noop", [{"i": i} for i in range(5)])
        out = subprocess.run([console_script("qworker"), "status", "--connect", p.endpoint], capture_output=True, text=True, timeout=30)
        found = subprocess.run([console_script("qworker"), "status"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "producer tcp://127.0.0.1:" in out.stdout and "resolved 5" in out.stdout
    assert "/w0.1" in out.stdout and "alive" in out.stdout
    assert found.returncode == 0 and p.endpoint in found.stdout  # found through the runtime dir


def test_status_cli_reports_an_unreachable_producer():
    out = subprocess.run(
        [console_script("qworker"), "status", "--connect", "tcp://127.0.0.1:9", "--timeout", "0.5"],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 1 and "no answer from tcp://127.0.0.1:9" in out.stderr


def test_a_worker_over_its_memory_limit_is_recycled_without_losing_tasks():
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0) as p:
        pool = start_pool(p.endpoint, "--workers", "1", "--max-rss-mb", "150", "--heartbeat", "0.2")
        try:
            p.wait_for_workers(1, timeout=30)
            results = []
            for i in range(8):  # 40 MB per task: passes 150 MB after ~3 tasks
                results += p.map("leak", [{"i": i}], timeout=30)
                time.sleep(0.3)
            status = p.status()
        finally:
            pool.send_signal(signal.SIGTERM)
            _, err = pool.communicate(timeout=30)
    assert all(r.ok for r in results)
    assert status["pools"][0]["workers"][0]["restarts"] >= 1
    assert "recycling" in err and "MB limit" in err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_pools_started_first_serve_a_producer_and_its_restart():
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    pool = start_pool(endpoint, "--workers", "2", "--id", "early")  # nothing listens yet
    try:
        time.sleep(0.5)
        with Producer(bind=endpoint, local_workers=0) as p:
            p.wait_for_workers(2, timeout=30)
            first = p.map("noop", [{"run": 1, "i": i} for i in range(300)], timeout=30)
        # the trainer restarts at the same address; the pool's workers re-register
        with Producer(bind=endpoint, local_workers=0) as p:
            p.wait_for_workers(2, timeout=30)
            second = p.map("noop", [{"run": 2, "i": i} for i in range(300)], timeout=30)
    finally:
        pool.send_signal(signal.SIGTERM)
        pool.communicate(timeout=30)
    assert all(r.ok for r in first + second)
    assert {r.worker.split("/")[0] for r in second} == {"early"}
