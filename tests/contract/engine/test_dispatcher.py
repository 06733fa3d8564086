"""The producer's dispatcher thread: calls from other threads, and a loop that outlives a failing step."""

from __future__ import annotations

import pytest

from qworker import Producer


def test_a_call_that_raises_on_the_dispatcher_thread_raises_in_the_caller_and_the_dispatcher_goes_on():
    with Producer(local_workers=0) as p:
        with pytest.raises(ZeroDivisionError):
            p._dispatcher.call(lambda: 1 / 0, timeout=30)  # raised here at once, not a timeout after 30 s
        assert p._dispatcher.call(lambda: "still serving", timeout=30) == "still serving"
        assert p.status()["producer"]["pending"] == 0
