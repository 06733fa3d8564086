"""The pooled HTTP client: a refused connection is one ConnectFailed, with no urllib3 warning per retry."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from qworker.judge.client import http


def test_a_refused_connection_raises_once_without_urllib3_retry_warnings(caplog):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    caplog.set_level(logging.DEBUG, logger="urllib3")
    with pytest.raises(http.ConnectFailed) as exc:
        http.post(f"http://127.0.0.1:{port}/v1/chat/completions", b"{}", {}, deadline=time.monotonic() + 5)
    assert exc.value.kind == "connect"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("urllib3")]
    assert any(r.levelno == logging.DEBUG and r.name.startswith("urllib3") for r in caplog.records)  # DEBUG still passes


def test_a_body_over_the_cap_is_too_large_not_a_reset():
    import json

    from qworker.testing import MockJudge

    m = MockJudge(capacity=8, latency_s=0.001).start()
    try:
        m.giant(1, http.MAX_BODY_BYTES + 1000)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "q"}]}).encode()
        with pytest.raises(http.TooLarge) as exc:
            http.post(m.url, body, {"Content-Type": "application/json"}, deadline=time.monotonic() + 30)
        assert exc.value.kind == "too_large" and str(http.MAX_BODY_BYTES) in str(exc.value)
        reply = http.post(m.url, body, {"Content-Type": "application/json"}, deadline=time.monotonic() + 30)
        assert reply.status == 200  # the pool is intact: the next call works
    finally:
        m.stop()


def test_a_pool_the_manager_closed_is_replaced_and_the_call_goes_through():
    # The url's pool is kept between calls; one closed meanwhile (by whatever holds the manager) is replaced by a
    # new one on the next call to that url instead of failing it
    import json

    from qworker.testing import MockJudge

    m = MockJudge(capacity=8, latency_s=0.001).start()
    try:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "q"}]}).encode()
        assert http.post(m.url, body, {"Content-Type": "application/json"}, deadline=time.monotonic() + 30).status == 200
        http.pool(m.url)[0].close()
        assert http.post(m.url, body, {"Content-Type": "application/json"}, deadline=time.monotonic() + 30).status == 200
        assert m.stats["served"] == 2
    finally:
        m.stop()
