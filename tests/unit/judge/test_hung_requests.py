"""Timeouts of requests that hung while the server answered the others fast are not its load: the limit holds
(``AdaptiveLimit.on_drop``, the mode table's hung-request row); simulated time, no clock."""

from __future__ import annotations

import dataclasses
import math
import random

from qworker.judge.control.estimators import LimitConfig
from qworker.judge.control.limiter import AdaptiveLimit, Mode

RTT = 0.02  # the answers' latency, seconds
TIMEOUT = 1.0  # a hung request's wait, seconds


CAPACITY = 64  # the server's concurrency cap, hung requests included: one over it is refused at once


def run(lim: AdaptiveLimit, seconds: float, p_hang: float, *, answers: bool = True, seed: int = 1) -> list[float]:
    """Requests at the limit for ``seconds`` on a server holding CAPACITY at once: each answered after RTT, or
    (with probability ``p_hang``) timing out TIMEOUT after its send, holding its place at the server until then,
    or refused at once when the server is full; with ``answers`` False, every request hangs.  Returns the limit
    each 0.5 s."""
    rng = random.Random(seed)
    hung: list[float] = []  # send times of requests hanging now
    t, seen, next_look = 0.0, [], 0.0
    while t < seconds:
        while hung and hung[0] + TIMEOUT <= t:
            sent = hung.pop(0)
            lim.on_drop(len(hung) + 1, t, sent_at=sent, timeout=True)
        if t >= next_look:
            seen.append(lim.limit)
            next_look += 0.5
        sent_now = max(1, int(lim.limit) - len(hung))
        served = 0
        for _ in range(sent_now):
            at_server = len(hung) + served + 1
            if at_server > CAPACITY:
                lim.on_drop(at_server, t + 0.001, sent_at=t)
            elif not answers or rng.random() < p_hang:
                hung.append(t)
            else:
                served += 1
        for _ in range(served):
            lim.on_success(RTT, served + len(hung), t + RTT, level=served + len(hung), sent_at=t)
        t += RTT
    return seen


def settled(limit: float, hang: float = LimitConfig().hang) -> AdaptiveLimit:
    lim = AdaptiveLimit(initial=limit, config=dataclasses.replace(LimitConfig(), hang=hang))
    lim.mode, lim.rtt = Mode.STEADY, RTT
    return lim


def test_random_hangs_among_fast_answers_leave_the_limit_where_it_was():
    lim = settled(48)
    seen = run(lim, 30.0, p_hang=0.02)  # 2% hang: about 50 timeouts a second at 48 in flight
    assert lim.hangs.count > 500
    assert min(seen[4:]) >= 40, seen  # near the cap, less what hangs there (about 1 in 50 of the 64 for 1 s)
    every_timeout_load = settled(48, hang=math.inf)  # each timeout read as the load (over the error budget)
    assert min(run(every_timeout_load, 30.0, p_hang=0.02)[4:]) < 8


def test_a_server_that_stops_answering_still_cuts_the_limit_at_its_timeouts():
    limits = []
    for hang in (LimitConfig().hang, math.inf):
        lim = settled(48, hang=hang)
        lim.on_success(RTT, 48, 0.0, level=48, sent_at=-RTT)  # answers so far: requests sent before it stopped
        run(lim, 3.0, p_hang=0.0, answers=False)  # from now on every request hangs: nothing sent after them answered
        assert lim.hangs.count == 0
        limits.append(lim.limit)
    assert limits[0] == limits[1] < 48  # cut (then an outage: only capped), as if no timeout were ever read as hung


def test_a_timeout_among_answers_as_slow_as_a_quarter_of_it_is_the_load():
    # A batching server under load: answers to requests sent after the timed-out one keep coming, a tenth of them
    # 20 s (long generations), the mean about 5 s; a request sent 60 s ago times out.  Its wait is 3 times the
    # longest answer: the load, not a lost request (against the mean, 12 times: it would have read as hung).
    lim = settled(48)
    for k in range(100):
        latency = 20.0 if k % 10 == 0 else 3.3
        lim.on_success(latency, 48, 100.0 + k * 0.1, level=48, sent_at=100.0 + k * 0.1 - latency)
    before = lim.limit
    lim.on_drop(49, 110.0, sent_at=50.0, timeout=True)
    assert lim.hangs.count == 0 and lim.limit < before


def test_timeouts_of_requests_out_when_a_server_stopped_are_not_hung():
    # Answers of 1-10 s until the server stops answering at 100 s: every request still out then times out 60 s after
    # its send.  Requests sent before them were answered, but none sent once they were long overdue: not hung.
    lim = settled(48)
    rng = random.Random(3)
    answered, out = [], []
    for k in range(2000):
        sent, latency = k * 0.05, rng.uniform(1.0, 10.0)
        (answered if sent + latency < 100.0 else out).append((sent + latency, sent))
    for at, sent in sorted(answered):
        lim.on_success(at - sent, 48, at, level=48, sent_at=sent)
    before = lim.limit
    for _, sent in sorted(out, key=lambda x: x[1]):
        lim.on_drop(48, sent + TIMEOUT * 60, sent_at=sent, timeout=True)
    assert out and lim.hangs.count == 0 and lim.limit < before



def test_a_timeout_that_the_longest_reply_at_the_present_pace_explains_is_not_hung():
    # Answers of 20-80 tokens at 0.05 s + 20 ms per token (1.7 s at most) keep coming; a request sent 30 s before
    # times out.  It is overdue by 18 times the longest answer, but a reply of max_tokens (2,048) takes 41 s at
    # that pace: the load explains it.  Without max_tokens the longest reply seen (80 tokens, 1.7 s) does not.
    rng = random.Random(5)
    answers = [(k * 0.1, rng.randint(20, 80)) for k in range(200)]
    found = []
    for reply_tokens in (2048, None):
        lim = AdaptiveLimit(initial=48, reply_tokens=reply_tokens)
        lim.mode, lim.rtt = Mode.STEADY, 1.0
        for sent, tokens in answers:
            latency = 0.05 + 0.02 * tokens
            lim.on_success(latency, 48, 100.0 + sent + latency, level=48, tokens=tokens, sent_at=100.0 + sent)
        assert abs(lim.hangs.longest_reply_s() - (0.05 + 0.02 * (reply_tokens or 80))) < 1e-6
        lim.on_drop(49, 120.0, sent_at=90.0, timeout=True)
        found.append(lim.hangs.count)
    assert found == [0, 1]


def test_reply_lengths_that_do_not_explain_the_times_say_no_pace():
    lim = AdaptiveLimit(initial=48, reply_tokens=4096)
    rng = random.Random(6)
    for k in range(128):  # latencies falling as the lengths grow: not a decoding pace
        tokens = 10 + k
        lim.on_success(2.0 - 0.01 * k + rng.uniform(0.0, 0.01), 48, 10.0 + k * 0.1, level=48, tokens=tokens, sent_at=8.0 + k * 0.1)
    assert lim.hangs.longest_reply_s() == 0.0


def test_an_endpoint_back_from_down_weighs_its_timeouts_only_against_answers_since():
    lim = settled(48)
    for k in range(100):  # fast answers before it went down
        lim.on_success(RTT, 48, 1.0 + k * 0.01, level=48, sent_at=1.0 + k * 0.01 - RTT)
    lim.reset()  # back from down (a restart, perhaps slower): no answer since yet
    lim.on_drop(9, 62.0, sent_at=1.5, timeout=True)  # overdue by far against the answers before: they do not count
    assert lim.hangs.count == 0


def test_a_reply_longer_than_the_request_allowed_does_not_stretch_the_longest_reply():
    # One answer claims 10^9 tokens (a broken or hostile server): with max_tokens set it counts as that many, so
    # the pace still puts the longest reply at about 0.05 + 0.002 x 256 s, and a request overdue by 60 s among
    # answers of a fraction of a second hung; without max_tokens it stretches it only while it is among the answers read
    rng = random.Random(7)
    for reply_tokens in (256, None):
        lim = AdaptiveLimit(initial=48, reply_tokens=reply_tokens)
        lim.mode, lim.rtt = Mode.STEADY, 0.2
        for k in range(300):
            tokens = 10**9 if k == 10 else rng.randint(20, 80)
            latency = 0.05 + 0.002 * min(tokens, 80)
            lim.on_success(latency, 48, 100.0 + k * 0.1 + latency, level=48, tokens=tokens, sent_at=100.0 + k * 0.1)
        assert lim.hangs.longest_reply_s() < 1.0
        lim.on_drop(49, 130.0, sent_at=70.0, timeout=True)
        assert lim.hangs.count == 1


def test_reply_lengths_that_do_not_surely_explain_the_times_say_no_pace():
    # Latency drawn apart from length (1 to 3 tokens, 1.0 +- 0.2 s) with max_tokens 1,024: a slope from noise
    # read at 1,024 tokens would say a lost request may take minutes.  Taken two standard errors low, the slope
    # says no pace in nearly every draw; all of one length says none either (its time is not told from a request's)
    zero = 0
    for seed in range(100):
        rng = random.Random(seed)
        lim = AdaptiveLimit(initial=48, reply_tokens=1024)
        for k in range(128):
            lim.on_success(rng.uniform(0.8, 1.2), 48, 10.0 + k * 0.1, level=48, tokens=rng.randint(1, 3), sent_at=8.0 + k * 0.1)
        zero += lim.hangs.longest_reply_s() == 0.0
    assert zero >= 95
    lim = AdaptiveLimit(initial=48, reply_tokens=512)
    for k in range(128):
        lim.on_success(2.0, 48, 10.0 + k * 0.1, level=48, tokens=10, sent_at=8.0 + k * 0.1)
    assert lim.hangs.longest_reply_s() == 0.0


def test_configs_of_one_judge_weigh_timeouts_against_the_longest_reply_any_of_them_allows():
    from qworker.judge.control.gate import Gate

    base = {"model": "m", "endpoints": [{"url": "http://127.0.0.1:9"}]}
    gate = Gate({**base, "request": {"max_tokens": 64}})
    hangs = gate.endpoints[0].limit.hangs
    assert hangs.reply_tokens == 64
    gate.allow_replies({**base, "request": {"max_completion_tokens": 4096, "max_tokens": 16}})  # the server reads the first
    assert hangs.reply_tokens == 4096
    gate.allow_replies({**base, "request": {"max_tokens": 128}})
    assert hangs.reply_tokens == 4096
    gate.allow_replies(base)  # a config that sets none: replies as long as the server's own default
    assert hangs.reply_tokens is None
    gate.allow_replies({**base, "request": {"max_tokens": 128}})
    assert hangs.reply_tokens is None
