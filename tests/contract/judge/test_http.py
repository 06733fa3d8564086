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


def test_a_url_of_another_scheme_is_refused_before_anything_is_sent():
    # urllib3 makes a plain-http pool for any scheme but https: a mistyped 'htps://' would carry the request (and its
    # Authorization header) in clear to port 80
    with pytest.raises(http.ConnectFailed) as exc:
        http.post("htps://127.0.0.1:9/v1/chat/completions", b"{}", {"Authorization": "Bearer x"}, deadline=time.monotonic() + 5)
    assert "htps" in str(exc.value)


def test_a_call_waiting_for_a_free_connection_ends_at_its_deadline():
    import json
    import threading

    from qworker.testing import MockJudge

    m = MockJudge(capacity=8, latency_s=1.0).start()
    try:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "q"}]}).encode()
        url = m.url  # (a port of its own: its pool, of one connection, is this test's)
        first = threading.Thread(target=http.post, args=(url, body, {}), kwargs={"deadline": time.monotonic() + 30, "connections_per_host": 1})
        first.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        with pytest.raises(http.Deadline):
            http.post(url, body, {}, deadline=t0 + 0.3, connections_per_host=1)
        assert time.monotonic() - t0 < 0.8
        first.join()
    finally:
        m.stop()
