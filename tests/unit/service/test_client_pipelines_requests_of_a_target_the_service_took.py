"""A Client pipelines the requests of a target (reward, params, timeout) once the service has taken one: the first
request of a target waits for the service's answer (a bad name or params raise there), later ones return their futures
at once, at most ``PIPELINE_WINDOW`` of them unanswered; a pipelined request the service refuses resolves its futures
with the refusal and the target waits again; a restarted service is asked again.  No socket: the test plays the I/O
thread (it takes requests from the outbox and answers them as the service would)."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Optional

import pytest

from qworker import ErrorKind, RewardError, ServiceUnavailable
from qworker._recent import RecentKeys
from qworker.engine.futures import FutureTable
from qworker.engine.result import Result
from qworker.service import client as cl
from qworker.transport import client_wire as cw

INSTANCE = "instance-1"


def _client() -> cl.Client:
    """A Client with no I/O thread and no socket: its requests wait in ``_outbox`` for the test to take them."""
    c = cl.Client.__new__(cl.Client)
    c.endpoint = "tcp://127.0.0.1:1"
    c.connect_timeout_s = 5.0
    c.fallback_score = 0.0
    c._closed = False
    c._numbers = itertools.count(1)
    c._table = FutureTable(fallback_score=0.0)
    c._requests = {}
    c._outbox = deque()
    c._known = RecentKeys(cl.KNOWN_TARGETS)
    c._refusals_logged = set()
    c._window_lock = threading.Lock()
    c._unanswered = deque()
    c._instance = INSTANCE
    c._frame_limit = cl.DEFAULT_MAX_MESSAGE_BYTES
    c._answered = threading.Event()
    c._answered.set()  # the service stated its frame limit
    c._wake = lambda: None
    return c


def _taken(c: cl.Client, within_s: float = 5.0) -> cl._Request:
    """The next request handed to the I/O thread, now held by it (as ``_submit`` holds it)."""
    deadline = time.monotonic() + within_s
    while not c._outbox:
        assert time.monotonic() < deadline, "no request reached the I/O thread"
        time.sleep(0.001)
    req = c._outbox.popleft()
    c._requests[req.number] = req
    return req


def _answer(c: cl.Client, req: cl._Request, error: Optional[str] = None, error_type: str = "",
            instance: str = INSTANCE) -> None:
    c._see(instance)
    c._on_accepted(cw.Accepted(req.number, instance, error, error_type))


def _first(c: cl.Client, caller: Callable[..., Future], reward: str = "noop", **kw: Any) -> list:
    """A first request of a target, answered as taken: its futures."""
    call = caller(c.submit_batch, reward, [{"i": 0}], **kw)
    _answer(c, _taken(c))
    return call.result(5)


def test_the_first_request_of_a_target_waits_for_the_service_and_later_ones_return_at_once(caller):
    c = _client()
    call = caller(c.submit_batch, "noop", [{"i": 0}])
    req = _taken(c)
    assert not call.done()  # waits for the service's answer
    _answer(c, req)
    assert len(call.result(5)) == 1
    futures = c.submit_batch("noop", [{"i": 1}, {"i": 2}])  # on this thread: it returns before any answer
    assert len(futures) == 2 and not any(f.done() for f in futures)
    later = _taken(c, within_s=0)
    assert later.target == req.target and later.answered is None


def test_a_first_bad_reward_raises_at_its_submission_and_again_at_the_next(caller):
    c = _client()
    for _ in range(2):
        call = caller(c.submit_batch, "nope", [{"i": 0}])
        _answer(c, _taken(c), "unknown reward 'nope'", "RewardError")
        with pytest.raises(RewardError, match="unknown reward"):
            call.result(5)


def test_a_pipelined_request_the_service_refuses_resolves_its_futures_with_the_refusal_once_logged(caller, caplog):
    c = _client()
    _first(c, caller)
    first = c.submit_batch("noop", [{"i": 1}, {"i": 2}])
    second = c.submit_batch("noop", [{"i": 3}])
    refusal = "the reward service has no workers (none connected for 12 s)"
    with caplog.at_level(logging.ERROR, logger="qworker"):
        _answer(c, _taken(c), refusal, "ServiceUnavailable")
        _answer(c, _taken(c), refusal, "ServiceUnavailable")
    for fut in [*first, *second]:
        result = fut.result(0)
        assert result.error_kind == ErrorKind.SERVICE_LOST and refusal in result.error
    assert sum(refusal in r.getMessage() for r in caplog.records) == 1
    # the target needs the service's answer again: the next request waits for it, and raises with the refusal
    call = caller(c.submit_batch, "noop", [{"i": 4}])
    _answer(c, _taken(c), refusal, "ServiceUnavailable")
    with pytest.raises(ServiceUnavailable, match="no workers"):
        call.result(5)


def _full_window(c: cl.Client, caller: Callable[..., Future]) -> tuple[list[list], list[cl._Request]]:
    """A target taken, then a window of its requests sent and unanswered (their futures, the requests);
    ``connect_timeout_s`` short, for a caller the window makes wait."""
    _first(c, caller)
    c.connect_timeout_s = 0.05
    window = [c.submit_batch("noop", [{"i": i}]) for i in range(cl.PIPELINE_WINDOW)]
    return window, [_taken(c, within_s=0) for _ in window]


def test_the_window_bounds_the_pipelined_requests_unanswered(caller):
    c = _client()
    window, held = _full_window(c, caller)
    # one more, with the oldest unanswered: the caller waits for it, up to connect_timeout_s, then raises; the
    # request is neither sent nor handed out
    with pytest.raises(ServiceUnavailable, match="still unanswered"):
        c.submit_batch("noop", [{"i": 99}])
    assert not c._outbox
    _answer(c, held[0])  # the oldest answered: there is room for one more
    assert len(c.submit_batch("noop", [{"i": 100}])) == 1
    with pytest.raises(ServiceUnavailable):
        c.submit_batch("noop", [{"i": 101}])


@pytest.mark.parametrize("news", ["restarted", "stopping", "silent"])
def test_a_service_that_restarted_stopped_or_went_silent_is_asked_again_before_pipelining(caller, news):
    c = _client()
    _first(c, caller)
    c._requests.clear()  # (its results came)
    if news == "restarted":
        c._see("instance-2")  # a reply from a new instance
    elif news == "stopping":
        c._on_closing("the reward service stopped")
    else:
        c.service_timeout_s, c._heard = 1.0, time.monotonic() - 2.0
        c._check_silence(time.monotonic())
    c.connect_timeout_s = 0.05
    with pytest.raises(ServiceUnavailable):  # the target is not known to it: the request waits for an answer
        c.submit_batch("noop", [{"i": 5}])


def test_a_target_is_its_reward_params_and_timeout_whatever_the_params_order(caller):
    c = _client()
    _first(c, caller, "spin", params={"ms": 1, "n": 2})
    c.connect_timeout_s = 0.05
    assert len(c.submit_batch("spin", [{"i": 1}], params={"n": 2, "ms": 1})) == 1  # the same target: pipelined
    for other in ({"params": {"ms": 2, "n": 2}}, {"params": {"ms": 1, "n": 2}, "timeout_s": 5.0}, {}):
        with pytest.raises(ServiceUnavailable):  # another target: it waits for the service's answer
            c.submit_batch("spin", [{"i": 2}], **other)


def _results_of(req: cl._Request) -> list[cw.ResolvedRequest]:
    return [cw.ResolvedRequest(req.number, list(range(len(req.indexes))), [Result(score=1.0) for _ in req.indexes])]


def test_a_request_whose_results_come_before_its_answer_frees_its_place_in_the_window(caller):
    c = _client()
    window, held = _full_window(c, caller)
    c._resolve(_results_of(held[0]))  # its Accepted was lost; a Ping's poke resent its results, and it is done
    assert held[0].number not in c._requests and window[0][0].result(0).ok
    for req in held[1:]:
        _answer(c, req)
    for i in range(3 * cl.PIPELINE_WINDOW):  # every later request is answered at once: the window never stays full
        c.submit_batch("noop", [{"i": 100 + i}])
        _answer(c, _taken(c, within_s=0))


def test_a_first_request_whose_results_come_before_its_answer_hands_its_futures_out(caller):
    c = _client()
    call = caller(c.submit_batch, "noop", [{"i": 0}, {"i": 1}])
    req = _taken(c)
    c._see(INSTANCE)
    c._resolve(_results_of(req))
    assert [f.result(0).ok for f in call.result(5)] == [True, True]


def test_a_refusal_after_the_service_restarted_is_logged(caller, caplog):
    c = _client()
    _first(c, caller)
    c._requests.clear()  # (its results came)
    pipelined = c.submit_batch("noop", [{"i": 1}])
    refusal = "unknown reward 'noop' (the service restarted with another config)"
    with caplog.at_level(logging.ERROR, logger="qworker"):
        _answer(c, _taken(c), refusal, "RewardError", instance="instance-2")
    assert pipelined[0].result(0).error_kind == ErrorKind.SERVICE_LOST
    assert sum(refusal in r.getMessage() for r in caplog.records) == 1


def test_params_of_a_subclass_of_a_number_or_string_name_a_target():
    class Float(float):  # numpy's float64 is one
        pass

    class Text(str):
        pass

    key = cl._target_key("spin", {"ms": Float(1.5), "tag": Text("a")}, Float(5.0))
    assert key is not None and key == cl._target_key("spin", {"tag": "a", "ms": 1.5}, 5.0)


def test_a_full_window_that_times_out_says_the_requests_are_unanswered_and_kept(caller):
    c = _client()
    _first(c, caller)
    c.connect_timeout_s = 0.05
    for i in range(cl.PIPELINE_WINDOW):
        c.submit_batch("noop", [{"i": i}])
    with pytest.raises(ServiceUnavailable, match=f"{cl.PIPELINE_WINDOW} requests sent to the reward service .* still "
                                                  "unanswered .* they are kept and resent, this one was not sent"):
        c.submit_batch("noop", [{"i": 99}])


def test_a_first_submission_waiting_on_a_service_that_goes_silent_raises_service_unavailable(caller):
    c = _client()
    call = caller(c.submit_batch, "noop", [{"i": 0}])
    _taken(c)
    c.service_timeout_s, c._heard = 1.0, time.monotonic() - 2.0
    c._check_silence(time.monotonic())
    with pytest.raises(ServiceUnavailable, match="did not answer for"):
        call.result(5)
