"""A ``submit_batch`` of any size is taken, as at a ``Producer``: a request whose ``Submit`` would be over the service's
frame limit (which libzmq enforces by dropping the message unread, and the link with it) goes as several under it, its
futures one list in order, each part leaving room for CURVE's framing (which the limit counts); a payload over the limit by
itself fails as ``bad_payload`` naming its size and the limit; params over it raise ``ConfigError`` before anything is
registered; a later part that is not taken fails as results, the caller holding every future; a request over a limit
learned after it was split is never sent and fails once, naming both.  No socket: the test plays
the I/O thread (``test_client_pipelines_requests_of_a_target_the_service_took``'s harness)."""

from __future__ import annotations

import threading
import time

import msgspec
import pytest

from qworker import ConfigError, ErrorKind, ProducerClosed
from qworker.engine.result import Result
from qworker.service import client as cl
from qworker.transport import client_wire as cw
from qworker.transport import wire
from qworker.transport.sockets import CURVE_FRAME_BYTES
from tests.unit.service.stub_socket import StubSocket
from tests.unit.service.test_client_pipelines_requests_of_a_target_the_service_took import _answer, _client, _taken

LIMIT = 4096


def _body_size(req: cl._Request) -> int:
    return len(cw.encode(cw.Submit(*wire.STAMP, req.number, req.reward, req.params, req.payloads, req.timeout_s))[1])


def _resolve(c: cl.Client, req: cl._Request) -> None:
    c._resolve([cw.ResolvedRequest(req.number, list(range(len(req.indexes))),
                                   [Result(score=float(i)) for i in req.indexes])])


def test_a_submission_over_the_frame_limit_goes_in_parts_under_it_and_resolves_in_order(caller):
    c = _client()
    c._frame_limit = LIMIT
    payloads = [{"i": i} for i in range(3000)]  # about 20 kB of small payloads: parts filled to within a few bytes
    call = caller(c.submit_batch, "noop", payloads)
    first = _taken(c)
    _answer(c, first)  # the first part waits for the service; the others are pipelined behind it
    futures = call.result(5)
    parts = [first]
    while sum(len(p.indexes) for p in parts) < len(payloads):
        parts.append(_taken(c))
    assert len(parts) > 1 and all(_body_size(p) + CURVE_FRAME_BYTES <= LIMIT for p in parts), [_body_size(p) for p in parts]
    assert [i for p in parts for i in p.indexes] == list(range(len(payloads)))  # each payload once, in order
    for part in parts:
        _resolve(c, part)
    assert [f.result(0).score for f in futures] == [float(i) for i in range(len(payloads))]


def test_a_payload_over_the_frame_limit_by_itself_fails_naming_its_size_and_the_limit(caller):
    c = _client()
    c._frame_limit = LIMIT
    call = caller(c.submit_batch, "noop", [{"i": 0}, {"big": "y" * 2 * LIMIT}, {"i": 2}])
    req = _taken(c)
    _answer(c, req)
    futures = call.result(5)
    assert req.indexes == [0, 2]  # the others are sent
    big = futures[1].result(0)
    assert big.error_kind == ErrorKind.BAD_PAYLOAD and f"over the {LIMIT}-byte message limit" in big.error, big.error
    assert f"the payload is {len(cl._encode([{'big': 'y' * 2 * LIMIT}])[0][0])} bytes" in big.error, big.error


def test_a_request_over_a_limit_learned_after_it_was_split_is_never_sent_and_fails_once(caplog):
    c = _client()
    c._sock, c._next_ping = StubSocket([]), 0.0
    c._refusals_logged, c._heard = set(), time.monotonic()
    batch = c._table.register(1)
    c._table.hand_out(batch)  # a pipelined request: its caller holds its futures
    payload = cl._encode([{"big": "z" * 2 * LIMIT}])[0]
    req = cl._Request(1, "noop", None, payload, None, batch, [0], time.monotonic(), b"target")
    c._frame_limit = LIMIT  # the service restarted with a lower limit
    c._submit(req)
    assert c._sock.sent == [] and c._requests == {}  # never sent, nothing left to resend
    result = batch.futures[0].result(0)
    assert result.error_kind == ErrorKind.SERVICE_LOST
    assert f"over the {LIMIT}-byte message limit" in result.error and "this client did not send it" in result.error


def test_params_over_the_frame_limit_raise_a_config_error_and_register_nothing():
    c = _client()
    c._frame_limit = LIMIT
    with pytest.raises(ConfigError, match=f"reward, params and framing encode to .* over the {LIMIT}-byte message limit"):
        c.submit_batch("noop", [{"i": 0}], params={"blob": "p" * LIMIT})
    assert len(c._table) == 0 and not c._outbox


def test_a_later_part_that_is_not_taken_fails_as_results_and_the_caller_gets_every_future(caller):
    c = _client()
    c._frame_limit = LIMIT
    params = {1: "a", "b": 2}  # a target the client cannot key: every part waits for its own answer
    payloads = [{"text": "x" * 100, "i": i} for i in range(100)]
    call = caller(c.submit_batch, "noop", payloads, params=params)
    first = _taken(c)
    _answer(c, first)
    second = _taken(c)
    _answer(c, second, error="the service stopped taking requests of this reward", error_type="ServiceUnavailable")
    futures = call.result(5)  # the first part is being scored: its futures are the caller's, not lost to a raise
    assert len(futures) == len(payloads) and not any(f.done() for f in futures[: len(first.indexes)])
    rest = [futures[i].result(0) for i in range(len(first.indexes), len(payloads))]
    assert all(r.error_kind == ErrorKind.SERVICE_LOST and "the service stopped taking requests" in r.error for r in rest), rest
    assert "part 2 of 3 of its submission" in rest[-1].error  # the parts after it were never sent, and say which failed


def test_a_pong_of_a_newer_service_with_more_fields_still_tells_the_frame_limit():
    kind, body = cw.encode(cw.Pong("instance", 2, [], LIMIT))
    longer = msgspec.msgpack.encode([*msgspec.msgpack.decode(body), "a field of a later protocol"])
    msg = cw.CLIENT.decode(kind, longer, max_bytes=LIMIT)
    assert isinstance(msg, cw.Pong) and msg.max_message_bytes == LIMIT


def test_params_that_cannot_be_encoded_raise_a_config_error_and_register_nothing():
    c = _client()
    with pytest.raises(ConfigError, match="params cannot be sent"):
        c.submit_batch("noop", [{"i": 0}], params={"x": object()})
    assert len(c._table) == 0 and not c._outbox


def test_a_client_closed_while_a_later_part_is_sent_raises_producer_closed(caller, monkeypatch):
    c = _client()
    c._frame_limit = LIMIT
    send = c._send_request
    calls = []

    def closing_on_the_second(req, deadline):
        calls.append(req.number)
        if len(calls) == 2:
            raise ProducerClosed("the Client closed while submitting")
        return send(req, deadline)

    monkeypatch.setattr(c, "_send_request", closing_on_the_second)
    call = caller(c.submit_batch, "noop", [{"text": "x" * 100, "i": i} for i in range(100)])
    _answer(c, _taken(c))
    with pytest.raises(ProducerClosed):
        call.result(5)


def test_a_client_no_service_answered_pings_ever_more_seldom_and_each_second_once_a_request_is_out(monkeypatch):
    c = _client()
    for watch in ("_resend_untaken", "_check_link", "_check_silence"):  # the link's watch is another test's
        monkeypatch.setattr(c, watch, lambda now: None)
    c._sock, c._next_ping, c._ping_every, c._heard = StubSocket([]), 0.0, cl.PING_EVERY_S, 120.0
    c._answered = threading.Event()
    for t in range(120):  # two idle minutes with nobody there: each ping queues in the socket until a service comes
        c._keep_in_touch(float(t))
    idle_pings = len(c._sock.sent)
    assert idle_pings <= 8, idle_pings  # 1, 2, 4, 8, 16, 30, 30, ... s apart (it was one a second: 120)
    batch = c._table.register(1)
    c._submit(cl._Request(1, "noop", None, cl._encode([{"i": 0}])[0], None, batch, [0], 120.0))
    c._sock.sent.clear()
    for t in range(121, 126):
        c._keep_in_touch(float(t))
    assert sum(1 for frames in c._sock.sent if frames[0] == cw.PING) == 5  # waiting on a request: a ping each second


def test_a_submits_envelope_is_read_off_its_target_key_at_the_length_it_encodes_to():
    for params, timeout_s in ((None, None), ({"b": 1, "a": [1.5, "x" * 70_000]}, 30.0), ({"n": {"deep": [None, True]}}, 0.5)):
        target = cl._target_key("reward_name", params, timeout_s)
        assert cl._envelope("reward_name", params, timeout_s, target) == cl._envelope("reward_name", params, timeout_s, None)
