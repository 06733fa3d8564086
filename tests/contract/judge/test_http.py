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


def test_a_request_head_and_body_leave_in_one_write(monkeypatch):
    # urllib3 writes a request's head and its body in two calls: two TCP segments (TCP_NODELAY), so a judge asleep
    # when the first arrives wakes twice per request.  The pool's connections send both in one write, and a kept-alive
    # connection does so on every request
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    body = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"q" * 300 + b'"}]}'
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(10)
            for _ in range(2):
                got = b""
                while not got.endswith(body):
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    got += chunk
                received.append(got)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    threading.Thread(target=serve, daemon=True).start()
    writes: list[int] = []
    sendall = socket.socket.sendall

    def recording(sock: socket.socket, data: bytes, *args: object) -> None:
        if sock.getpeername()[1] == port:  # the client's side
            writes.append(len(data))
        sendall(sock, data, *args)

    monkeypatch.setattr(socket.socket, "sendall", recording)
    try:
        for _ in range(2):
            reply = http.post(f"http://127.0.0.1:{port}/v1/chat/completions", body, {"Content-Type": "application/json"},
                              deadline=time.monotonic() + 10)
            assert (reply.status, reply.body) == (200, b"ok")
    finally:
        server.close()
    assert [r.split(b"\r\n", 1)[0] for r in received] == [b"POST /v1/chat/completions HTTP/1.1"] * 2
    for r in received:  # each the head once, then the body it announces
        head, rest = r.split(b"\r\n\r\n", 1)
        assert r.count(b"POST ") == 1 and rest == body and f"content-length: {len(body)}".encode() in head.lower()
    assert writes == [len(received[0]), len(received[1])]  # one write per request: head and body together


def test_a_held_head_is_sent_when_no_body_write_follows():
    # The head waits for the body's write; a connection class that writes none (as urllib3 might for another kind of
    # body) still sends the head when the request returns, rather than leaving the request unsent
    import threading

    import urllib3

    class HeadOnly(urllib3.connection.HTTPConnection):
        def request(self, method, url, body=None, headers=None, **kwargs):  # type: ignore[no-untyped-def]
            self.putrequest(method, url)
            self.putheader("Content-Length", "0")
            self.endheaders()

    class Held(http._HeadWithBody, HeadOnly):
        pass

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(5)
            data = b""
            while not data.endswith(b"\r\n\r\n"):
                data += conn.recv(65536)
            got.append(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    conn = Held("127.0.0.1", server.getsockname()[1])
    try:
        conn.request("POST", "/x", body=b"not written by this class")
        t.join(5)
    finally:
        conn.close()
        server.close()
    assert got and got[0].startswith(b"POST /x HTTP/1.1\r\n")


def test_urls_on_one_host_share_its_pool_and_the_hosts_made_last_are_kept():
    # One pool per (scheme, host, port), whatever the path; past POOLS_MAX hosts the oldest is dropped, and a URL on it
    # gets a new pool (nothing is connected here: a pool connects on its first request)
    urls = [f"http://127.0.0.1:{41000 + i}/v1/chat/completions" for i in range(http.POOLS_MAX + 1)]
    made = [http.pool(u)[0] for u in urls]
    assert http.pool(urls[-1].replace("/v1/chat/completions", "/metrics")) == (made[-1], "/metrics")
    assert all(http.pool(u)[0] is p for u, p in zip(urls[1:], made[1:], strict=True))
    assert http.pool(urls[0])[0] is not made[0]
