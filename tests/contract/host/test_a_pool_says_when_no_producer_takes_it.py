"""A pool pointed where no producer is waits for one, as it must for a producer that starts later, but says so:
one warning naming the endpoint after ``UNREACHED_BEATS`` heartbeats, and a line when a producer takes it."""

from __future__ import annotations

import queue
import signal
import socket
import subprocess
import threading
import time

from qworker import Producer
from tests.conftest import TEST_REWARDS, console_script


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_line(lines: queue.Queue, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no line with {text!r} within {timeout} s"
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            continue
        if text in line:
            return line


def lines_for(lines: queue.Queue, seconds: float) -> list[str]:
    """Every line that arrives within ``seconds``."""
    got, deadline = [], time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            got.append(lines.get(timeout=left))
        except queue.Empty:
            pass
    return got


def test_a_pool_with_no_producer_says_so_once_and_says_when_one_takes_it():
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    pool = subprocess.Popen([console_script("qworker-pool"), "--connect", endpoint, "--reward-modules", TEST_REWARDS,
                             "--workers", "1", "--heartbeat", "0.2"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in pool.stderr:  # type: ignore[union-attr]
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        said = wait_for_line(lines, "has taken this pool's connection", 30)
        assert f"no producer at {endpoint} has taken this pool's connection" in said and "still trying" in said
        later = lines_for(lines, 3.0)  # 15 more heartbeats with still no producer: no second warning
        assert not any("has taken this pool's connection" in line for line in later), later
        with Producer(bind=endpoint, local_workers=0) as p:
            wait_for_line(lines, f"reached the producer at {endpoint}", 30)
            p.wait_for_workers(1, timeout=30)
            assert p.map("noop", [{"i": 1}], timeout=30)[0].ok
    finally:
        pool.send_signal(signal.SIGTERM)
        pool.wait(30)
    assert pool.returncode == 0
    reader.join(10)
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert sum("has taken this pool's connection" in line for line in rest) <= 1  # after the producer left: once more at most
