"""The limit trace (QWORKER_LIMIT_TRACE) writes one JSON line per change of a limit, and a trace that cannot be
written turns itself off with one warning, never raising into the limiter's caller."""

from __future__ import annotations

import json
import logging

import pytest

from qworker.judge.control import limit_trace
from qworker.judge.control.limiter import AdaptiveLimit


@pytest.fixture
def traced(monkeypatch):
    def make(path: str) -> type[AdaptiveLimit]:
        monkeypatch.setenv(limit_trace.ENV, path)
        monkeypatch.setattr(limit_trace, "_out", None)
        monkeypatch.setattr(limit_trace, "_failed", False)
        cls = type("TracedLimit", (AdaptiveLimit,), {})  # wrapped here, not AdaptiveLimit itself
        limit_trace.install(cls)
        return cls

    yield make
    if limit_trace._out is not None:
        limit_trace._out.close()


def refuse(lim: AdaptiveLimit, now: float) -> None:
    before = lim.limit
    lim.on_drop(lim.limit, now, now - 0.5)
    assert lim.limit < before  # a refusal from slow start cuts the limit: a traced change


def test_each_change_of_a_limit_is_one_json_line_with_its_entry_point(traced, tmp_path):
    path = tmp_path / "trace.jsonl"
    refuse(traced(str(path))(), 1.0)
    [line] = [json.loads(x) for x in path.read_text().splitlines()]
    assert line["call"] == "on_drop" and line["to"] < line["from"]


def test_a_trace_that_cannot_be_written_is_turned_off_with_one_warning_and_the_limiter_goes_on(traced, tmp_path, caplog):
    cls = traced(str(tmp_path / "no-such-dir" / "trace.jsonl"))
    with caplog.at_level(logging.WARNING, logger="qworker"):
        refuse(cls(), 1.0)
        refuse(cls(), 2.0)
    assert [r.getMessage().count("the limit trace is off") for r in caplog.records] == [1]
