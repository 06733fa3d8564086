"""Parsing what providers say about their rate limits."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from qworker.judge.client.ratelimit import duration_s, rate_limits, retry_after

NOW = 1_700_000_000.0


@pytest.mark.parametrize(("text", "seconds"), [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.5", 0.5), ("soon", None)])
def test_go_durations(text, seconds):
    assert duration_s(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_retry_after_forms():
    assert retry_after({"retry-after-ms": "250", "retry-after": "1"}, NOW) == 0.25  # the precise one wins
    assert retry_after({"retry-after": "1"}, NOW) == 1.0
    assert retry_after({"retry-after": "2.5"}, NOW) == 2.5
    assert retry_after({"retry-after": formatdate(NOW + 30, usegmt=True)}, NOW) == pytest.approx(30, abs=1)
    assert retry_after({"retry-after": formatdate(NOW - 30, usegmt=True)}, NOW) == 0.0
    assert retry_after({"retry-after": "whenever"}, NOW) is None
    assert retry_after({}, NOW) is None


def test_openai_headers():
    h = {"x-ratelimit-limit-requests": "9000", "x-ratelimit-remaining-requests": "8999", "x-ratelimit-reset-requests": "6m0s",
         "x-ratelimit-limit-tokens": "2000000", "x-ratelimit-remaining-tokens": "1999000", "x-ratelimit-reset-tokens": "20ms"}
    assert rate_limits(h, NOW) == {"requests": {"limit": 9000, "remaining": 8999, "reset_s": 360.0},
                                   "tokens": {"limit": 2000000, "remaining": 1999000, "reset_s": pytest.approx(0.02)}}


def test_anthropic_headers():
    h = {"anthropic-ratelimit-requests-limit": "4000", "anthropic-ratelimit-requests-remaining": "3999",
         "anthropic-ratelimit-requests-reset": "2023-11-14T22:13:50Z",
         "anthropic-ratelimit-input-tokens-limit": "400000", "anthropic-ratelimit-input-tokens-remaining": "100",
         "anthropic-ratelimit-input-tokens-reset": "2023-11-14T22:14:20.500Z",
         "anthropic-ratelimit-output-tokens-limit": "80000", "anthropic-ratelimit-output-tokens-remaining": "79000"}
    out = rate_limits(h, NOW)  # NOW is 2023-11-14T22:13:20Z
    assert out["requests"] == {"limit": 4000, "remaining": 3999, "reset_s": pytest.approx(30.0)}
    assert out["tokens"]["remaining"] == 100 and out["tokens"]["reset_s"] == pytest.approx(60.5)  # the tighter family
    assert rate_limits({"anthropic-ratelimit-tokens-remaining": "5"}, NOW) == {"tokens": {"remaining": 5}}


def test_no_headers():
    assert rate_limits({"content-type": "application/json"}, NOW) is None
