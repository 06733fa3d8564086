"""Hostile or broken values from servers (headers) and configs.

From a server: ignored, one warning per endpoint and header.  From a config: a
``ConfigError`` at start naming the key and value.  An endpoint that can never
admit fails what waits with a clear error rather than holding it for ever.
"""

from __future__ import annotations

import logging
import math

import pytest

from qworker import ConfigError
from qworker.engine.task import Pending
from qworker.judge.client.ratelimit import rate_limits, retry_after
from qworker.judge.control.endpoint import Bucket
from qworker.judge.control.gate import Gate

NOW = 1_700_000_000.0


def gate(*eps: dict, **params) -> Gate:
    return Gate({"model": "m", "endpoints": list(eps) or [{"url": "http://a"}], **params})


def task(i: int = 0) -> Pending:
    return Pending(bytes([i]) * 16, "llm_judge", {}, b"x" * 40, None, None, 0.0)


@pytest.mark.parametrize("value", ["-1", "0", "inf", "1e400", "nan", "-inf", "5e9", "lots"])
def test_an_unbelievable_rate_limit_header_is_ignored_and_named(value):
    h = {"x-ratelimit-limit-requests": value, "x-ratelimit-remaining-requests": "10", "x-ratelimit-reset-requests": "1s"}
    bad: dict = {}
    out = rate_limits(h, NOW, bad)
    assert out == {"requests": {"remaining": 10, "reset_s": 1.0}}
    assert bad == {"x-ratelimit-limit-requests": value}


@pytest.mark.parametrize("value", ["inf", "1e400", "-1", "nan", "86401s", "1e400ms"])
def test_an_unbelievable_reset_is_ignored(value):
    bad: dict = {}
    assert rate_limits({"x-ratelimit-reset-tokens": value, "x-ratelimit-remaining-tokens": "5"}, NOW, bad) == {"tokens": {"remaining": 5}}
    assert "x-ratelimit-reset-tokens" in bad
    bad = {}
    h = {"anthropic-ratelimit-requests-remaining": "inf", "anthropic-ratelimit-requests-reset": "2099-01-01T00:00:00Z"}
    assert rate_limits(h, NOW, bad) is None and set(bad) == {"anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"}


@pytest.mark.parametrize("value", ["inf", "1e400", "-5", "nan", "86401", "Wed, 21 Oct 2099 07:28:00 GMT"])
def test_an_unbelievable_retry_after_is_ignored(value):
    bad: dict = {}
    assert retry_after({"retry-after": value}, NOW, bad) is None
    assert bad == {"retry-after": value}
    if value in ("inf", "1e400", "-5", "nan"):
        bad = {}
        assert retry_after({"retry-after-ms": value, "retry-after": "2"}, NOW, bad) == 2.0  # the other one still counts
        assert bad == {"retry-after-ms": value}
    assert retry_after({"retry-after": "0"}, NOW) == 0.0


def answer(g: Gate, now: float, **outcome) -> Pending:
    g.queue.append(task(int(now * 10) % 250))
    sent, failed = g.admit(now, 10)
    assert len(sent) == 1 and not failed, (sent, failed)
    p = sent[0]
    full = {"endpoint": 0, "status": 200, "failure": "", "latency_s": 0.2, "retry_after_s": None, **outcome}
    g.settle(p, full, None if full["status"] == 200 else f"HTTP {full['status']}", now + 0.2)
    return p


def test_a_negative_announced_limit_does_not_block_the_endpoint_and_is_reported_once(caplog):
    # on the base commit: a bucket of rate -1/60; nothing was admitted again, and nothing woke the gate
    g = gate()
    with caplog.at_level(logging.WARNING, logger="qworker"):
        for i in range(20):
            # as a worker of the base commit parsed it (a worker now drops it and names the header in bad_headers)
            answer(g, 1.0 + i, ratelimit={"requests": {"limit": -1, "remaining": 0}})
            answer(g, 1.5 + i, bad_headers={"x-ratelimit-limit-requests": "-1"})
    warnings = [r.getMessage() for r in caplog.records if "not a believable value" in r.getMessage()]
    assert len(warnings) == 2 and all("http://a" in w and "-1" in w for w in warnings)
    assert "requests limit" in warnings[0] and "x-ratelimit-limit-requests" in warnings[1]
    assert g.endpoints[0].paced_requests is None


def test_an_infinite_retry_after_from_a_worker_is_ignored(caplog):
    g = gate()
    g.queue.append(task(1))
    p = g.admit(0.0, 1)[0][0]
    with caplog.at_level(logging.WARNING, logger="qworker"):
        retry = g.settle(p, {"endpoint": 0, "status": 429, "failure": "", "latency_s": 0.01, "retry_after_s": math.inf}, "HTTP 429", 0.1)
    assert retry is True  # on the base commit: OverflowError (int(inf)), and the task failed
    assert any("retry-after" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("endpoint", "params", "named"),
    [
        ({"rpm": -1}, {}, "endpoints[0].rpm = -1"),
        ({"rpm": math.inf}, {}, "endpoints[0].rpm = inf"),
        ({"tpm": 0}, {}, "endpoints[0].tpm = 0"),
        ({"max_concurrency": 0}, {}, "endpoints[0].max_concurrency = 0"),
        ({"weight": 0}, {}, "endpoints[0].weight = 0"),
        ({"weight": math.nan}, {}, "endpoints[0].weight = nan"),
        ({}, {"dead_after_s": -1}, "dead_after_s = -1"),
        ({}, {"max_attempts": 0}, "max_attempts = 0"),
        ({}, {"timeout_s": 1e400}, "timeout_s = inf"),
        ({}, {"error_budget": 2}, "error_budget = 2"),
        ({}, {"initial_concurrency": 0.5}, "initial_concurrency = 0.5"),
        ({}, {"request": {"max_tokens": -3}}, "request.max_tokens = -3"),
    ],
)
def test_an_unbelievable_config_number_is_a_config_error_naming_it(endpoint, params, named):
    with pytest.raises(ConfigError, match=named.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        gate({"url": "http://a", **endpoint}, **params)


def test_an_endpoint_that_can_never_admit_fails_what_waits_naming_it():
    g = gate({"url": "http://a"})
    g.endpoints[0].paced_requests = Bucket(-1 / 60.0, 1.0)  # what the base commit built from `x-ratelimit-limit-requests: -1`
    g.queue.extend(task(i) for i in range(3))
    sent, failed = g.admit(1.0, 10)
    assert not sent and len(failed) == 3
    assert "http://a" in failed[0][1].detail and "never" in failed[0][1].detail


def test_a_busy_or_paced_endpoint_is_not_taken_for_a_stuck_one():
    g = gate({"url": "http://a", "rpm": 60, "max_concurrency": 1})
    g.queue.extend(task(i) for i in range(3))
    sent, failed = g.admit(1.0, 10)
    assert len(sent) == 1 and not failed  # the others wait for the one in flight, and the bucket
    g.settle(sent[0], {"endpoint": 0, "status": 200, "failure": "", "latency_s": 0.1, "retry_after_s": None}, None, 1.1)
    sent, failed = g.admit(1.1, 10)
    assert not sent and not failed and g.next_wake(1.1) is not None


def test_metrics_values_that_are_not_counts_are_skipped_not_fed_to_the_limit():
    # a proxy or exporter in front of the server may print -1, +Inf or NaN: a negative count reached sqrt in
    # ServerLoad and raised on the dispatcher thread; an infinite queue cut the limit to its floor
    from qworker.judge.control.endpoint import parse_vllm_load

    text = ("vllm:num_requests_running{model=\"a\"} -1\nvllm:num_requests_waiting{model=\"a\"} +Inf\n"
            "vllm:num_requests_running{model=\"b\"} 12\nvllm:num_requests_waiting{model=\"b\"} NaN\n")
    assert parse_vllm_load(text) == (12.0, 0.0)
    assert parse_vllm_load("vllm:num_requests_running -1\n") is None
