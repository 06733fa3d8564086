"""A producer whose socket cannot be bound raises ``ConfigError`` and leaves nothing running: a caller that catches it
and tries again does not collect a disk cache's writer thread (and its open file) per try."""

from __future__ import annotations

import socket
import threading

import pytest

from qworker import ConfigError, Producer


def _writers() -> int:
    return sum(t.name == "qworker-diskcache" for t in threading.enumerate())


def test_a_producer_that_cannot_bind_its_port_leaves_no_cache_writer_behind(tmp_path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    before = _writers()
    try:
        for _ in range(3):
            with pytest.raises(ConfigError, match=f"cannot bind tcp://127.0.0.1:{port}"):
                Producer(bind=f"tcp://127.0.0.1:{port}", local_workers=0, cache_path=str(tmp_path / "cache.sqlite"))
        assert _writers() == before
    finally:
        holder.close()


def test_a_producer_whose_metrics_port_is_taken_leaves_its_own_port_free_for_a_retry(tmp_path) -> None:
    pytest.importorskip("prometheus_client")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    before = _writers()
    try:
        with pytest.raises(OSError):
            Producer(bind=f"tcp://127.0.0.1:{port}", local_workers=0, metrics_port=busy.getsockname()[1],
                     cache_path=str(tmp_path / "cache.sqlite"))
        assert _writers() == before
        with Producer(bind=f"tcp://127.0.0.1:{port}", local_workers=0) as p:  # the failed one holds nothing
            assert p.endpoint == f"tcp://127.0.0.1:{port}"
    finally:
        busy.close()
