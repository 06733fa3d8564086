"""A frame that is not a valid message is logged (the first ten, then one in a thousand) whatever number of frames
from peers of another wire protocol were refused before it: those count in ``dropped_frames`` but have their own
lines, and a pool refused again and again (systemd restarting it) must not hide a malformed frame's warning."""

from __future__ import annotations

import logging

import pytest

from qworker.cache.results import ResultCache
from qworker.engine.pending import PendingTable
from qworker.engine.scheduler import Scheduler
from qworker.testing import StubTransport


def test_a_bad_frame_after_many_refused_ones_is_still_logged(caplog: pytest.LogCaptureFixture) -> None:
    table = PendingTable(cache=ResultCache(max_entries=10, ttl_s=None, path=None), fallback_score=0.0)
    s = Scheduler(send=StubTransport(), table=table, max_attempts=3, heartbeat_timeout_s=3.0, max_message_bytes=1 << 20)
    for _ in range(50):  # what the dispatcher's _refuse does for each frame of a peer of another protocol
        s.stats["dropped_frames"] += 1
    with caplog.at_level(logging.WARNING, logger="qworker"):
        s.drop(b"peer", "malformed Ready")
    assert s.stats["dropped_frames"] == 51
    assert any("dropped a bad frame" in r.getMessage() for r in caplog.records), caplog.text


def test_results_from_a_worker_not_held_are_named_as_results_not_a_bad_frame(caplog: pytest.LogCaptureFixture) -> None:
    # a worker lost earlier (a failed send) whose results arrive after: they resolve nothing (its tasks went back to
    # the queue) and the line says what they are, not that the frame was malformed
    from qworker.transport import wire

    table = PendingTable(cache=ResultCache(max_entries=10, ttl_s=None, path=None), fallback_score=0.0)
    s = Scheduler(send=StubTransport(), table=table, max_attempts=3, heartbeat_timeout_s=3.0, max_message_bytes=1 << 20)
    late = wire.Results(3, 3, [wire.TaskResult(b"k" * 16, 1.0, None, None, 0.01, None, None)] * 3)
    with caplog.at_level(logging.WARNING, logger="qworker"):
        s.handle(b"pool-1/w0.1", late, 0.0)
    lines = [r.getMessage() for r in caplog.records]
    assert s.stats["dropped_results"] == 3 and s.stats["dropped_frames"] == 1
    assert any(line.startswith("qworker: dropped 3 results from") and "one lost earlier, whose tasks were redelivered" in line
               for line in lines), lines
    assert not any("bad frame" in line for line in lines), lines


def test_a_bad_frame_after_many_late_results_is_still_logged(caplog: pytest.LogCaptureFixture) -> None:
    from qworker.transport import wire

    table = PendingTable(cache=ResultCache(max_entries=10, ttl_s=None, path=None), fallback_score=0.0)
    s = Scheduler(send=StubTransport(), table=table, max_attempts=3, heartbeat_timeout_s=3.0, max_message_bytes=1 << 20)
    late = wire.Results(1, 1, [wire.TaskResult(b"k" * 16, 1.0, None, None, 0.01, None, None)])
    for _ in range(50):  # a worker lost with many messages still on their way
        s.handle(b"pool-1/w0.1", late, 0.0)
    with caplog.at_level(logging.WARNING, logger="qworker"):
        s.drop(b"peer", "malformed Ready")
    assert any("dropped a bad frame" in r.getMessage() for r in caplog.records), caplog.text
