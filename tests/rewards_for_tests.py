"""Rewards the tests run in real worker processes (imported by path)."""

from __future__ import annotations

import os
import re
import threading
import time

from qworker import reward


@reward("count_eval")
def count_eval(payload: dict) -> dict:
    """Appends one line per evaluation to payload["log"], so tests can count worker calls."""
    with open(payload["log"], "a") as f:
        f.write(f"{payload.get('i')} {os.environ.get('QWORKER_WORKER_ID')}\n")
    time.sleep(payload.get("sleep_ms", 0) / 1000.0)
    return {"score": float(payload.get("i", 0)), "worker_pid": os.getpid()}


@reward("gil_hang", timeout=1.0)
def gil_hang(payload: dict) -> float:
    """Catastrophic regex backtracking: runs in C, holding the GIL, for ~forever."""
    re.match(r"(a+)+$", "a" * 64 + "b")
    return 1.0


@reward("crash")
def crash(payload: dict) -> float:
    os._exit(3)


@reward("boom")
def boom(payload: dict) -> float:
    raise RuntimeError(f"boom on {payload.get('i')}")


@reward("not_a_score")
def not_a_score(payload: dict) -> str:
    return "high"


@reward("slow_worker_zero")
def slow_worker_zero(payload: dict) -> float:
    """10 ms normally; 100 ms on the pool's first worker slot (10x slower)."""
    slow = "/w0." in os.environ.get("QWORKER_WORKER_ID", "")
    time.sleep(0.1 if slow else 0.01)
    return 1.0


_hoard: list[bytes] = []


@reward("leak")
def leak(payload: dict) -> float:
    """Keeps 40 MB per call, so the worker's RSS grows until it is recycled."""
    _hoard.append(os.urandom(40 * 2**20))
    return 1.0


@reward("io_wait", kind="io")
def io_wait(payload: dict) -> dict:
    """Waits like an HTTP call would; io rewards run on the worker's thread pool."""
    time.sleep(payload["ms"] / 1000.0)
    return {"score": 1.0, "thread": threading.current_thread().name}


@reward("io_hang", kind="io", timeout=0.5)
def io_hang(payload: dict) -> float:
    time.sleep(60)
    return 1.0


@reward("big_extra")
def big_extra(payload: dict) -> dict:
    """Returns an ``extra`` of ``payload["bytes"]`` bytes (a blob of one repeated byte), score ``payload["i"]``."""
    return {"score": float(payload["i"]), "blob": bytes([payload["i"] % 251]) * payload["bytes"]}


@reward("admitted_call", kind="io", admission="tests.admission_policy:SlotsSource")
def admitted_call(payload: dict, *, call=None, slots: int = 1) -> dict:
    """Reports the metadata its admission policy sent (``tests.admission_policy``) back to it, and in its extra."""
    call.outcome = {"saw": call.meta, "busy": bool(payload.get("busy"))}
    return {"score": 1.0, "meta": call.meta}
