"""``llm_judge`` making real HTTP calls to the mock judge (the provider is the only mock)."""

from __future__ import annotations

import socket
import time

import pytest

from qworker._exceptions import CallFailed
from qworker.registry.registry import EndpointCall
from qworker.rewards.llm_judge import llm_judge, parse_score, render
from qworker.testing import MockJudge, expected_score

ROW = {"prompt": "What is 2+2?", "response": "4", "ground_truth": "4"}


@pytest.fixture
def judge():
    m = MockJudge(capacity=16, latency_s=0.01).start()
    yield m
    m.stop()


def call(m: MockJudge, **params):
    """One routed call to endpoint 0; the reward's result, with the outcome the worker would send the gate."""
    routed = EndpointCall({"endpoint": 0})
    out = llm_judge(ROW, model="m", endpoints=[{"url": m.url, **params.pop("endpoint", {})}], call=routed, **params)
    return {**out, "outcome": routed.outcome}


def test_scores_and_keeps_the_reply(judge):
    out = call(judge, prompt_template="Q: {prompt} A: {response} Ref: {ground_truth} {{not a placeholder}}")
    assert out["score"] == expected_score("Q: What is 2+2? A: 4 Ref: 4 {{not a placeholder}}") / 10
    assert "Score:" in out["reply"] and out["outcome"]["status"] == 200


def test_keep_alive_reuses_one_connection(judge):
    for _ in range(20):
        call(judge)
    assert judge.stats["connections"] == 1 and judge.stats["served"] == 20


def test_a_hung_server_hits_the_wall_clock_deadline(judge):
    judge.fault = "hang"
    t0 = time.monotonic()
    with pytest.raises(CallFailed, match="deadline|no answer") as e:
        call(judge, timeout_s=1.0)
    assert 0.9 < time.monotonic() - t0 < 3.0
    assert e.value.outcome["failure"] == "timeout"


def test_401_fails_with_the_servers_message_and_never_the_key(judge, monkeypatch):
    judge.api_key = "sk-right"
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", "sk-wrong-secret-7781")
    with pytest.raises(CallFailed) as e:
        call(judge, endpoint={"api_key_env": "JUDGE_KEY_FOR_TEST"})
    msg = str(e.value)
    assert "HTTP 401" in msg and "Incorrect API key" in msg
    assert "sk-wrong-secret-7781" not in msg and "***" in msg  # the server echoed it; we removed it
    assert e.value.outcome["status"] == 401


def test_the_right_key_is_sent(judge, monkeypatch):
    judge.api_key = "sk-right"
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", "sk-right")
    assert call(judge, endpoint={"api_key_env": "JUDGE_KEY_FOR_TEST"})["outcome"]["status"] == 200


def test_a_missing_key_variable_is_named(judge, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(CallFailed, match="NO_SUCH_KEY_VAR is not set"):
        call(judge, endpoint={"api_key_env": "NO_SUCH_KEY_VAR"})


def test_connection_refused_is_a_connect_failure():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(CallFailed) as e:
        llm_judge(ROW, model="m", endpoints=[{"url": f"http://127.0.0.1:{port}/v1/chat/completions"}], call=EndpointCall({"endpoint": 0}))
    assert e.value.outcome["failure"] == "connect"


def test_429_carries_retry_after(judge):
    judge.capacity = 0
    with pytest.raises(CallFailed, match="HTTP 429") as e:
        call(judge)
    assert e.value.outcome["status"] == 429 and e.value.outcome["retry_after_s"] is not None


def test_an_unparsable_reply_is_an_error_not_a_zero(judge):
    with pytest.raises(CallFailed, match="no score matching") as e:
        call(judge, score_pattern=r"Grade=(\d)")
    assert e.value.kind == "bad_result"


def test_parse_score():
    assert parse_score("ok\nScore: 7", pattern=None, json_field=None, score_max=10) == 0.7
    assert parse_score("Score: 2 ... Score: 9", pattern=None, json_field=None, score_max=10) == 0.9  # the last wins
    assert parse_score('{"r": {"s": 3}}', pattern=None, json_field="r.s", score_max=5) == 0.6
    with pytest.raises(ValueError, match="outside"):
        parse_score("Score: 11", pattern=None, json_field=None, score_max=10)
    with pytest.raises(ValueError, match="JSON field"):
        parse_score("not json", pattern=None, json_field="s", score_max=10)


def test_render_leaves_other_braces_alone():
    assert render('{"x": {response}} {rubric} {other}', {"response": "r"}, "be strict") == '{"x": r} be strict {other}'


def test_the_key_in_a_200_reply_is_redacted_in_the_kept_reply(judge, monkeypatch):
    secret = "sk-proj/ab+cd=ef-4411"
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", secret)
    judge.api_key = secret
    orig = judge.RequestHandlerClass._send

    def echo(self, status, body, headers=None, content_type="application/json"):  # a judge that quotes the request
        if status == 200:
            body["choices"][0]["message"]["content"] = f"You sent {secret} and {secret.replace('/', chr(92) + '/')}\nScore: 3"
        return orig(self, status, body, headers, content_type)

    monkeypatch.setattr(judge.RequestHandlerClass, "_send", echo)
    out = call(judge, endpoint={"api_key_env": "JUDGE_KEY_FOR_TEST"})
    assert out["score"] == 0.3 and secret not in out["reply"] and "ab+cd" not in out["reply"] and "***" in out["reply"]


def test_a_json_escaped_key_in_a_401_body_and_a_key_straddling_the_cut_are_redacted(judge, monkeypatch):
    from qworker.rewards import llm_judge as mod

    secret = "sk-live/very/secret-9931"
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", secret)
    judge.api_key = "sk-other"  # 401, and the mock echoes the key JSON-encoded: json.dumps does not escape '/', so add it
    orig = judge.RequestHandlerClass._send

    def escaped(self, status, body, headers=None, content_type="application/json"):
        if status == 401:
            pad = "x" * (mod.MAX_SHOWN - 40)  # the key straddles the truncation point
            body = '{"error": {"message": "' + pad + " " + secret.replace("/", "\\/") + ' is not valid"}}'
        return orig(self, status, body, headers, content_type)

    monkeypatch.setattr(judge.RequestHandlerClass, "_send", escaped)
    with pytest.raises(CallFailed) as e:
        call(judge, endpoint={"api_key_env": "JUDGE_KEY_FOR_TEST"})
    msg = str(e.value)
    assert "HTTP 401" in msg and "***" in msg
    for leak in (secret, secret.replace("/", "\\/"), "sk-live", "very\\/secret", "9931"):
        assert leak not in msg


def test_usage_and_rate_limit_headers_reach_the_outcome(monkeypatch):
    m = MockJudge(capacity=8, latency_s=0.01, latency_dist="per-token", per_token_s=0.0001, rpm=6000,
                  ratelimit_headers="openai").start()
    try:
        out = call(m)["outcome"]
        assert out["completion_tokens"] >= 1 and out["ratelimit"]["requests"]["limit"] == 6000
        assert 0 <= out["ratelimit"]["requests"]["remaining"] <= 100
    finally:
        m.stop()


def test_a_reset_is_not_a_refused_connection():
    m = MockJudge(capacity=8, latency_s=0.01, p_reset=1.0).start()
    try:
        with pytest.raises(CallFailed) as e:
            call(m)
        assert e.value.outcome["failure"] == "reset"
    finally:
        m.stop()


def test_an_unrouted_call_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="routed by a producer's judge gate"):
        llm_judge(ROW, model="m", endpoints=[{"url": "http://127.0.0.1:9/v1/chat/completions"}])


def test_a_reply_that_is_not_json_names_its_content_type_and_shows_its_start():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Html(BaseHTTPRequestHandler):  # a proxy's error page, answered with 200
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b"<html><body><h1>502 Bad Gateway</h1>\n" + b"x" * 500 + b"</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"
        with pytest.raises(CallFailed) as e:
            llm_judge(ROW, model="m", endpoints=[{"url": url}], call=EndpointCall({"endpoint": 0}))
    finally:
        server.shutdown()
        server.server_close()
    msg = str(e.value)
    assert "not JSON" in msg and "Content-Type text/html; charset=utf-8" in msg and "<h1>502 Bad Gateway</h1>" in msg
    assert len(msg) < 400 and e.value.kind == "bad_result"


def test_an_unreachable_endpoint_is_named_once_and_its_error_cut_at_a_word():
    from qworker.judge.control.gate import clip

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    with pytest.raises(CallFailed) as e:
        llm_judge(ROW, model="m", endpoints=[{"url": f"http://127.0.0.1:{port}/v1/chat/completions"}], call=EndpointCall({"endpoint": 0}))
    msg = str(e.value)
    assert "Connection refused" in msg and "HTTPConnection(" not in msg and msg.count(f"127.0.0.1:{port}") == 1
    long = "judge_error: endpoint 0 (http://a-very-long-host-name.example/v1/chat/completions): " + "refused connection " * 30
    cut = clip(long, 120)
    assert len(cut) <= 120 and cut.endswith("...") and cut[:-3].split()[-1] in long.split()
    assert clip("short", 120) == "short"
