"""The limiter's estimators one at a time (``qworker.judge.control.estimators``); simulated time (no clock)."""

from __future__ import annotations

import math
import random

from qworker.judge.control.estimators import (
    LOAD_FRESH_S,
    CapacityMemory,
    Latency,
    LimitConfig,
    RefusalKind,
    Refusals,
    ServerLoad,
    Throughput,
)
from qworker.judge.control.limiter import AdaptiveLimit

CFG = LimitConfig()


def test_refusals_tell_echoes_lone_refusals_and_bursts_apart():
    r = Refusals(CFG)
    assert r.on_refusal(65, 5.0, 4.99, 0.3).kind is RefusalKind.LONE
    echo = r.on_refusal(64, 5.01, 4.98, 0.3)  # sent before the reaction to the first
    assert echo.kind is RefusalKind.ECHO and echo.level == 64
    kinds = [r.on_refusal(60, 5.02 + k * 0.001, 5.0195 + k * 0.001, 0.3).kind for k in range(CFG.burst_drops + 1)]
    assert kinds[0] is RefusalKind.REPEAT and kinds[-1] is RefusalKind.BURST
    assert r.on_refusal(40, 9.0, 8.99, 0.3, timeout=True).kind is RefusalKind.TIMEOUT


def test_two_lone_refusals_at_one_level_say_a_concurrency_cap():
    r = Refusals(CFG)
    r.on_refusal(65, 5.0, 4.99, 0.3)
    r.on_refusal(64, 5.01, 5.0, 0.3)  # an answer between ends the run; a round trip later another lone one
    r.on_answer(5.5, 5.2, 0.3)
    again = r.on_refusal(65, 6.0, 5.99, 0.3)
    assert again.kind is RefusalKind.LONE and again.same_level
    assert not r.on_refusal(30, 7.0, 6.99, 0.3).same_level


def test_an_outage_is_every_request_refused_for_a_round_trip_and_ends_with_an_answer_sent_after():
    r = Refusals(CFG)
    for k in range(20):
        r.on_refusal(64 - k, 10.0 + 0.05 * k, 10.0 + 0.05 * k - 0.01, 0.3)
    assert r.in_outage(11.0, 0.3)
    assert not r.on_answer(11.1, 9.9, 0.3)  # sent before the refusals began: says nothing
    assert r.in_outage(11.1, 0.3)
    assert r.on_answer(11.5, 11.2, 0.3) and r.outages == 1
    assert r.on_refusal(5, 11.6, 10.9, 0.3).kind is RefusalKind.STALE  # sent during the outage


def test_refusals_interleaved_with_answers_are_not_an_outage():
    r = Refusals(CFG)
    for k in range(20):
        r.on_refusal(64, 10.0 + 0.05 * k, 10.0 + 0.05 * k - 0.01, 0.3)
        if k % 3 == 0:
            assert not r.on_answer(10.0 + 0.05 * k + 0.01, 10.0 + 0.05 * k, 0.3)
    assert r.outages == 0


def test_latency_reads_queueing_as_the_ratio_of_recent_to_base_latency():
    lat = Latency(CFG)
    for _ in range(300):
        lat.on_answer(0.1, 40, None)
    got = None
    for _ in range(300):
        got = lat.on_answer(0.2, 100, None) or got  # twice the knee's latency at 100: a knee near 50
    assert got is not None and got.queueing and 45 <= got.knee <= 55


def test_a_latency_base_is_relearnt_when_the_capacity_moves():
    # A base learnt while the server was held by another (slow answers at low levels) would read the
    # limiter's own full load later as queueing; relearnt, the same answers read as no queue.
    lat = Latency(CFG)
    rng = random.Random(2)
    for _ in range(400):
        lat.on_answer(0.3 * math.exp(0.3 * rng.gauss(0, 1)), 32, None)
    lat.relearn()
    assert lat.base() is None
    readings = [lat.on_answer(0.45 * math.exp(0.3 * rng.gauss(0, 1)), 64, None) for _ in range(600)]
    assert not any(r.queueing for r in readings if r is not None)


def test_latency_is_judged_per_output_token_only_where_reply_lengths_explain_it():
    # A server that decodes: its time is its reply's length times a per-token time; divided by the length, the
    # spread left is the per-token time's.  A server whose replies report lengths drawn apart from their time:
    # divided by them, the spread would grow by the lengths' own, so latency itself is the measure.
    rng = random.Random(3)
    decoding, apart = Latency(CFG), Latency(CFG)
    for _ in range(200):
        n = rng.randrange(8, 400)
        decoding.on_answer(0.02 * n * math.exp(0.2 * rng.gauss(0, 1)), 32, n)
        apart.on_answer(0.3 * math.exp(0.6 * rng.gauss(0, 1)), 32, rng.randrange(8, 25))
    assert decoding.base() is not None and 0.015 <= decoding.base() <= 0.025  # seconds per token
    assert apart.base() is not None and 0.25 <= apart.base() <= 0.4  # seconds


def test_server_load_cuts_to_what_keeps_a_batch_queued():
    load = ServerLoad(CFG)
    q = load.reading(running=64, waiting=96, in_flight=160, now=1.0)
    assert q.queueing and q.knee == 128  # 160 x (64 + 64) / 160
    assert not load.reading(running=64, waiting=4, in_flight=68, now=1.5).queueing
    assert load.fresh(2.0) and not load.fresh(10.0)


def test_server_load_allows_a_queue_of_a_batch_however_few_are_on_their_way():
    """A batch of replies of one length frees every slot in one step: a queue of a batch refills it at once, so a
    queue up to what runs is the batch's refill, not queueing, even with few requests on their way."""
    load = ServerLoad(CFG)
    for t in range(8):  # 2 on their way at each reading
        q = load.reading(running=16, waiting=12, in_flight=28, now=0.5 * t, held=30)
    assert not q.queueing and 3.5 <= q.room <= 4.5
    assert load.reading(running=16, waiting=20, in_flight=36, now=4.0, held=38).queueing


def test_a_reading_logged_as_a_batch_ends_measures_the_queue_against_the_batch_at_its_high():
    """A server logs its counts after each step: as a batch ends, few run and the next batch is still counted waiting.
    That is a batch queued, not a queue past one; one over the batch at its high still is."""
    load = ServerLoad(CFG)
    for t in range(3):
        assert not load.reading(running=16, waiting=16, in_flight=32, now=0.5 * t).queueing
    assert not load.reading(running=1, waiting=16, in_flight=32, now=1.5).queueing  # 15 just ended, their answers on the way
    q = load.reading(running=4, waiting=24, in_flight=44, now=2.0)
    assert q.queueing and q.knee == 44 * (16 + 16) / 28  # back to a batch running and a batch waiting


def test_a_batch_read_at_its_high_is_forgotten_once_its_readings_are_older_than_a_fresh_reading():
    """The batch at its high spans readings within ``LOAD_FRESH_S`` only: a batch that shrank for good (a server given
    less memory, a replica of fewer slots) is read at its new size, so its queue past the new batch is queueing."""
    load = ServerLoad(CFG)
    assert not load.reading(running=16, waiting=0, in_flight=16, now=0.0).queueing
    assert not load.reading(running=8, waiting=12, in_flight=20, now=1.0).queueing  # within 2 s: the batch may be 16
    assert load.reading(running=8, waiting=12, in_flight=20, now=1.0 + LOAD_FRESH_S + 0.5).queueing  # only 8 runs now


def test_server_load_allows_a_queue_that_covers_the_requests_on_their_way():
    load = ServerLoad(CFG)
    # 34 in flight at the gate, 16 running and 8 waiting: 10 on their way, so a queue up to 10 + 2 sqrt(10) refills the batch
    q = load.reading(running=16, waiting=8, in_flight=24, now=1.0, held=34)
    assert not q.queueing and 8.0 <= q.room <= 8.5
    # the mean over readings: one reading with none on the way does not take the allowance back to a tenth of what runs
    assert not load.reading(running=16, waiting=12, in_flight=28, now=1.5, held=28).queueing
    assert load.reading(running=16, waiting=24, in_flight=40, now=2.0, held=40).queueing


def test_requests_the_servers_counts_miss_do_not_widen_its_queue_allowance():
    # a metrics URL of an idle (or another) server: nothing runs there, so nothing is on its way to refill a batch
    idle = ServerLoad(CFG)
    for t in range(10):
        q = idle.reading(running=0, waiting=0, in_flight=200, now=0.5 * t, held=200)
    assert not q.queueing and q.room <= 1.0
    # one replica of two: its counts miss the half the gate sends elsewhere; the allowance stays within a batch
    half = ServerLoad(CFG)
    for t in range(10):
        q = half.reading(running=16, waiting=30, in_flight=92, now=0.5 * t, held=92)
    assert q.queueing  # 30 waiting is over 16 + 2 sqrt(16)


def test_an_endpoint_back_from_down_measures_the_requests_on_their_way_afresh():
    limit = AdaptiveLimit(config=CFG)
    limit.load.reading(running=16, waiting=0, in_flight=40, now=1.0, held=40)
    assert limit.load.on_way
    limit.reset()
    assert limit.load.on_way is None


def test_remembered_capacity_expires_once_the_server_holds_more_than_where_it_last_refused():
    mem = CapacityMemory(CFG)
    mem.saw(64)
    mem.refused(33, probing=False, now=1.0)  # refused with 33 at the server: the capacity is 32
    assert not mem.outgrew(33, 1.5)  # held where it refused (or under it, where the refusal level sits): no evidence
    assert not mem.outgrew(40, 0.9)  # sent before the refusal (a drain's answers): says nothing of it
    assert mem.outgrew(34, 1.5)
    mem.outgrown(1.6, 0.3)  # worth the usual round trips in use without a refusal
    assert mem.stale(1.6, 0.3, 34)
    mem.in_use(False)  # evidence lapses while the limit is not in use
    assert not mem.stale(1.6, 0.3, 34)
    mem.regain_refused()  # a climb refused as it began: the next wants twice the round trips
    mem.refused(33, probing=False, now=2.0)
    mem.outgrown(3.0, 0.3)
    assert not mem.stale(3.0, 0.3, 34) and mem.stale(3.0 + CFG.regain_rtts * 0.3, 0.3, 34)


def test_throughput_is_littles_law_on_recent_answers():
    th = Throughput()
    t = 0.0
    for _ in range(400):
        t += 0.3 / 32  # 32 in flight at 0.3 s
        th.on_answer(t, 0.3, 0.3, 0.3)
    assert 30 <= th.sustained(t, 0.3) <= 34
