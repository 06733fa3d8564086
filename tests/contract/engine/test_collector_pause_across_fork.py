"""The collector's pause across ``os.fork``: the child keeps the forking thread's pauses (they end there as they would
have) and none of another thread's, and a collector the application turned off stays off."""

from __future__ import annotations

import gc
import os
from typing import Iterator

import pytest

from qworker.engine.gc_pause import paused_gc


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_a_child_forked_inside_a_pause_ends_it_and_pauses_again_as_before() -> None:
    with paused_gc():
        pid = os.fork()
        child = pid == 0
    if child:  # the forking thread's pause ended in the child as in the parent; a later pause pauses and ends
        ok = gc.isenabled()
        with paused_gc():
            ok = ok and not gc.isenabled()
        os._exit(0 if ok and gc.isenabled() else 1)
    assert os.waitpid(pid, 0)[1] == 0 and gc.isenabled()


def test_a_child_forked_without_a_pause_keeps_a_collector_the_application_turned_off() -> None:
    gc.disable()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if not gc.isenabled() else 1)
    assert os.waitpid(pid, 0)[1] == 0
