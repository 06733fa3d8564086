"""Processes and sockets for the chaos scenarios: pools started as console scripts, stopping them,
a producer's local workers, free ports, and waiting on a condition."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import psutil

from qworker import Producer

TESTS = Path(__file__).resolve().parent.parent
TEST_REWARDS = str(TESTS / "rewards_for_tests.py")
BIN = Path(sys.executable).parent
HB = 0.5  # heartbeat_s in these scenarios: a worker silent for 3 of these (1.5 s) is lost


def wait_until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.01)


def console_script(name: str) -> str:
    return str(BIN / name)


def start_pool(endpoint: str, *args: str, stderr: Any = subprocess.DEVNULL, env: Optional[dict] = None) -> subprocess.Popen:
    return subprocess.Popen(
        [console_script("qworker-pool"), "--connect", endpoint, "--rewards", TEST_REWARDS, "--heartbeat", str(HB), *args],
        stdin=subprocess.DEVNULL, stderr=stderr, env=env,
    )


def stop_proc(proc: subprocess.Popen, timeout: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def local_worker_pids(p: Producer) -> list[int]:
    assert p._pool is not None
    return [c.pid for c in psutil.Process(p._pool.pid).children() if "qworker.host.worker" in " ".join(c.cmdline())]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
