"""The judge's gate speaks (kind, detail) at the admission-policy seam: its failures are ``judge_error`` faults and
the worker's fault keeps its kind through the gate's account of the calls."""

from __future__ import annotations

from qworker._errors import ErrorKind
from qworker.transport.wire import Fault
from tests.unit.judge.test_gate import gate, outcome, send_one, task


def test_tasks_the_gate_fails_carry_the_judge_error_kind_and_a_detail_without_it():
    g = gate()
    p = send_one(g)
    g.on_result(p, outcome(401), Fault(ErrorKind.JUDGE_ERROR, "endpoint 0 (http://a): HTTP 401: bad key"), 1.0)
    g.queue.extend([task(1), task(2)])
    sent, failed = g.admit(1.1, 10)
    assert sent == [] and [why.kind for _, why in failed] == [ErrorKind.JUDGE_ERROR] * 2
    assert "credentials" in failed[0][1].detail and not failed[0][1].detail.startswith("judge_error")


def test_a_failure_after_retries_keeps_the_workers_kind_and_adds_the_count_of_calls_to_its_detail():
    g = gate(max_attempts=2)
    p = send_one(g)
    first = g.on_result(p, outcome(500), Fault(ErrorKind.JUDGE_ERROR, "endpoint 0 (http://a): HTTP 500: oops"), 1.0)
    assert first.retry
    assert g.endpoints[0].health.last_error == "endpoint 0 (http://a): HTTP 500: oops"  # the detail: no kind to strip off
    sent, _ = g.admit(1.1, 10)
    last = g.on_result(sent[0], outcome(200), Fault(ErrorKind.BAD_RESULT, "judge reply has no score"), 1.3)
    assert not last.retry and last.error == Fault(ErrorKind.BAD_RESULT, "judge reply has no score (after 2 calls)")
