"""The judge's gate speaks (kind, detail) at the admission-policy seam: its failures are ``judge_error`` faults and
the worker's fault keeps its kind through the gate's account of the calls."""

from __future__ import annotations

from qworker._errors import ErrorKind
from qworker.judge.control.gate import AUTH_FAILED_ERROR
from qworker.transport.wire import Fault
from tests.unit.judge.test_gate import gate, outcome, send_one, task


def test_tasks_the_gate_fails_carry_the_judge_error_kind_and_a_detail_without_it():
    g = gate({"url": "http://a"}, dead_after_s=10)
    refused = Fault(ErrorKind.JUDGE_ERROR, "endpoint 0 (http://a): ConnectionRefusedError: [Errno 111]")
    assert g.on_result(send_one(g), outcome(0, "connect"), refused, 0.1).retry
    g.queue.extend(task(i) for i in range(1, 5))
    failed, t = [], 0.1
    while not failed and t < 30:  # every endpoint stays unreachable: past dead_after_s the waiting tasks fail
        t = g.next_wake(t) or t + 0.25
        sent, failed = g.admit(t, 100)
        for q in sent:  # probes, refused again
            g.on_result(q, outcome(0, "connect"), refused, t + 0.001)
    assert failed and {why.kind for _, why in failed} == {ErrorKind.JUDGE_ERROR}
    detail = failed[0][1].detail  # made of the workers' details: neither the gate's kind nor theirs in its text
    assert "ConnectionRefusedError: [Errno 111]" in detail and "judge_error" not in detail, detail

    g = gate()
    g.on_result(send_one(g), outcome(401), Fault(ErrorKind.JUDGE_ERROR, "endpoint 0 (http://a): HTTP 401: bad key"), 1.0)
    g.queue.extend([task(1), task(2)])
    sent, failed = g.admit(1.1, 10)
    assert sent == [] and [why for _, why in failed] == [AUTH_FAILED_ERROR] * 2


def test_a_failure_after_retries_keeps_the_workers_kind_and_adds_the_count_of_calls_to_its_detail():
    g = gate(max_attempts=2)
    p = send_one(g)
    first = g.on_result(p, outcome(500), Fault(ErrorKind.JUDGE_ERROR, "endpoint 0 (http://a): HTTP 500: oops"), 1.0)
    assert first.retry
    assert g.endpoints[0].health.last_error == "endpoint 0 (http://a): HTTP 500: oops"  # the detail: no kind to strip off
    sent, _ = g.admit(1.1, 10)
    last = g.on_result(sent[0], outcome(200), Fault(ErrorKind.BAD_RESULT, "judge reply has no score"), 1.3)
    assert not last.retry and last.error == Fault(ErrorKind.BAD_RESULT, "judge reply has no score (after 2 calls)")
