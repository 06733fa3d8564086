"""What the limiter takes for capacity that came back (``qworker.judge.control.limiter``), in simulated time (no clock).

A refusal level sits under the capacity that refused: a limit held there without a refusal says only that
the capacity is still where it was.  Capacity that came back shows as the server answering more at once than
where it last refused, for a request sent after that refusal.
"""

from __future__ import annotations

from types import SimpleNamespace

from qworker.judge.control.limiter import AdaptiveLimit, Mode
from qworker.judge.control.peers import MemoryBoard, Note, Peers, endpoint_key

RTT = 0.3  # seconds


def steady_below_a_capacity_seen(limit: float, *, high: float) -> AdaptiveLimit:
    lim = AdaptiveLimit(initial=limit)
    lim.mode = Mode.STEADY
    lim.rtt = RTT
    lim.memory.saw(high)
    return lim


def serve(lim: AdaptiveLimit, capacity: int, start: float, end: float) -> int:
    """A server holding ``capacity`` at once, from ``start`` to ``end`` seconds: each step the limit's whole
    requests are at it; one sent beyond the capacity is refused 0.1 s after it was sent.  Returns the refusals."""
    t, refused = start, 0
    while t < end:
        n = max(1, int(lim.limit))
        if n > capacity:
            lim.on_drop(n, t, sent_at=t - 0.1)
            refused += 1
        else:
            lim.on_success(RTT, n, t, level=n)
        t += RTT / n
    return refused


def test_a_limit_held_at_a_refusal_level_that_echoes_put_under_the_capacity_does_not_climb_back():
    # 64 seen; the capacity drops to 16 while 64 are at the server.  What we send as they drain is refused
    # (fresh refusals down to 19 at the server), then echoes put the refusal level at 14, under the 16.  The
    # limit held at 14-16 without a refusal says only that 16 still holds: it probes above, each crossing one
    # refusal, and does not climb back to 64 (a climb that would cost a burst of refusals).
    lim = steady_below_a_capacity_seen(64, high=64)
    for k, level in enumerate((65, 55, 40, 19)):  # each sent after the reaction to the one before: fresh
        lim.on_drop(level, 0.05 * k, sent_at=0.05 * k - 0.04)
    for k in range(5):  # sent before the last reaction: echoes
        lim.on_drop(18 - k, 0.2 + 0.01 * k, sent_at=0.12)
    assert lim.memory.refusal_level <= 14.5 and lim.limit <= 14
    refused = serve(lim, 16, 0.5, 6.0)
    assert lim.regains == 0 and lim.limit < 18, (lim.regains, lim.limit)
    assert 1 <= refused <= 5.5 / (2 * RTT)  # a probe every two round trips at most, each one refusal
    # and when the capacity comes back, the probe finds it within 2 s
    serve(lim, 64, 6.0, 8.0)
    assert lim.regains == 1 and lim.limit >= 60


def test_answers_to_requests_sent_before_the_last_refusal_are_no_evidence_that_the_capacity_came_back():
    # A tenant takes slots as ours drain: refused with 46 at the server at t=1, then (a round trip on, the limit
    # no longer holding) slow answers to requests sent before it with 50 at the server arrive: they say nothing
    # of the refusal, and the limit does not climb back
    lim = steady_below_a_capacity_seen(46, high=64)
    lim.on_drop(46, 1.0, sent_at=0.95)
    for k in range(100):
        t = 1.35 + k * 0.004
        lim.on_success(0.5, 44, t, level=50 if t - 0.5 < 1.0 else 44)
    assert lim.regains == 0 and lim.mode is not Mode.RECOVERING


def refused_probe_then_held(lim: AdaptiveLimit) -> float:
    """A probe at 17 (16 held) refused 0.2 s after it was sent, at t=1; then a round trip of answers at 16, the limit
    held there.  Returns the time after them."""
    lim.on_send(17, 0.8)
    lim.on_drop(17, 1.0, sent_at=0.8)
    t = 1.0
    while t < 1.0 + 1.5 * RTT:
        t += RTT / 16
        lim.on_send(16, t - RTT)
        lim.on_success(RTT, 16, t, level=16, sent_at=t - RTT)
    assert lim.mode is Mode.STEADY and lim.regains == 0 and lim.memory.refused_level == 17
    return t


def test_a_probe_out_alone_that_the_server_holds_where_it_refused_is_evidence_that_the_capacity_came_back():
    # Refused at 17 with 64 seen before.  A request sent at 17 with no other out above the refusal level for
    # longer than a refusal takes to come back (0.2 s): none of the 16 counted with it was a refusal on its way
    # back (counted in flight, holding no slot), so the server held 17 at once where it refused 17 before.
    lim = steady_below_a_capacity_seen(16, high=64)
    t = refused_probe_then_held(lim)
    lim.on_send(17, t)
    lim.on_success(RTT, 17, t + RTT, level=17, sent_at=t)
    assert lim.regains == 1 and lim.mode is Mode.RECOVERING


def test_a_probe_sent_while_another_may_still_be_refused_is_no_evidence_at_the_level_that_refused():
    # The same answer at 17, but another request went out above the refusal level 0.1 s before it: its refusal
    # may still have been on its way back (up to 0.2 s), so the 17 counted may have been 16 at the server.
    lim = steady_below_a_capacity_seen(16, high=64)
    t = refused_probe_then_held(lim)
    lim.on_send(17, t - 0.1)
    lim.on_send(17, t)
    lim.on_success(RTT, 17, t + RTT, level=17, sent_at=t)
    assert lim.regains == 0 and lim.mode is Mode.STEADY
    # one more than the refusal found is evidence, out alone or not
    lim.on_send(18, t + 0.05)
    lim.on_success(RTT, 18, t + 0.05 + RTT, level=18, sent_at=t + 0.05)
    assert lim.regains == 1


def test_a_probe_is_judged_alone_by_its_neighbours_at_its_send_however_late_its_answer_is_read() -> None:
    """A probe whose neighbour went out within a refusal's way back before it is not alone, even when its answer is
    read seconds later, after more probes went out (the neighbour is not forgotten); and the record is bounded."""
    from qworker.judge.control.estimators import PROBES_KEPT, Probes

    probes = Probes()
    probes.refused(0.3)
    probes.sent(9.8)  # the neighbour
    probes.sent(10.0)  # the probe
    assert not probes.alone(10.0)
    for i in range(1, 40):
        probes.sent(10.0 + 0.05 * i)  # more probes, while the probe's answer is on its way (an LLM judge: seconds)
    assert not probes.alone(10.0)
    probes.sent(20.0)
    assert probes.alone(20.0)  # nothing within 0.3 s before it
    for i in range(3 * PROBES_KEPT):
        probes.sent(100.0 + i)
    assert len(probes._sent) <= PROBES_KEPT and probes.alone(100.0 + 3 * PROBES_KEPT - 1)


def test_a_limit_that_echoes_left_a_few_under_a_concurrency_cap_seen_probes_back_to_it_within_a_few_round_trips():
    # Two lone refusals at 65 showed a cap of 64 (the refusal level 2% under the 65).  Then a climb back overshoots
    # while another client's requests still drain: refused at 65 with six of those counted refused too (echoes), the
    # refusal level goes to 59, 7% under the cap seen (within the 10% that ``regain`` allows before climbing back).
    # The server holds 64 again a moment later: the probe above the refusal level doubles each round trip without
    # a refusal, as under any capacity seen, rather than creeping 0.15 a round trip (15 round trips to 61.4), up to
    # where a fresh refusal at the cap would leave the refusal level (2% under it), less one.
    lim = steady_below_a_capacity_seen(64, high=0)
    lim.on_drop(65, 1.0, sent_at=0.9)
    serve(lim, 64, 1.0, 2.0)
    lim.on_drop(65, 2.0, sent_at=1.9)
    assert lim.high > 63 and lim.mode is Mode.HOLDING
    serve(lim, 64, 2.0, 3.0)
    lim.on_drop(65, 3.0, sent_at=2.95)  # fresh
    for k in range(6):  # sent before that reaction: echoes
        lim.on_drop(64 - k, 3.01 + 0.01 * k, sent_at=2.9)
    assert lim.memory.refusal_level <= 59.5 and lim.limit <= 59 and lim.regains == 0
    refused = serve(lim, 64, 3.1, 3.1 + 8 * RTT)
    assert lim.limit >= 0.98 * lim.high - 1 and refused == 0, (lim.limit, refused)


def test_lone_refusals_a_few_requests_apart_are_a_capacity_seen_not_a_concurrency_cap():
    # A token bucket refuses at whatever is in flight when it runs dry: two lone refusals at 62 and 64.5 (within 5%
    # and one request, not within one) say the server held about that much, not that it refuses past one count
    lim = steady_below_a_capacity_seen(64, high=0)
    lim.on_drop(62, 1.0, sent_at=0.9)
    serve(lim, 64, 1.0, 2.0)
    lim.on_drop(64.5, 2.0, sent_at=1.9)
    assert lim.high > 60 and lim.memory.cap_seen == 0


def test_a_limit_held_under_a_cap_seen_without_echoes_does_not_probe_fast():
    # A cap seen at 64 that then drops for good to 60: fresh refusals at 61 put the refusal level 2% under them
    # with no echo below it, so the margin for a cap seen (a refusal's own) does not apply: the limit stays near
    # the new cap and probes above it as under any refusal level, not doubling each round trip into refusals
    lim = steady_below_a_capacity_seen(64, high=0)
    lim.on_drop(65, 1.0, sent_at=0.9)
    serve(lim, 64, 1.0, 2.0)
    lim.on_drop(65, 2.0, sent_at=1.9)
    assert lim.memory.cap_seen > 63
    refused = serve(lim, 60, 2.0, 2.0 + 40 * RTT)
    assert refused <= 12, refused  # a probe every few round trips, each one refusal (doubling: 15)


def _sharing(lim: AdaptiveLimit, at: float, peer_in_flight: int, mine: int = 16) -> None:
    """One note read with a peer on the endpoint that holds ``peer_in_flight`` (``Peers.tick``); this producer holds ``mine``."""
    board = MemoryBoard(clock=lambda: at)
    url = "http://judge/v1/chat/completions"
    board.publish(endpoint_key(url), Note("other", peer_in_flight, lim.limit, True, at))
    endpoint = SimpleNamespace(url=url, peers=[], limit=lim, down_reason="", turn=0, at_server=lambda: mine,
                               total_at_server=lambda: mine + sum(n.in_flight for n in endpoint.peers))
    Peers(board, [endpoint]).tick(at, True)
    assert endpoint.peers and lim.peers == 1


def test_a_probe_out_alone_is_no_evidence_while_a_peer_shares_the_endpoint_even_one_that_held_nothing_at_its_note():
    # Out alone means among this producer's probes: a peer's requests above the refusal level are not watched, so
    # with a peer on the endpoint an answer at the level that refused is no evidence, whatever the peer held at its
    # last note (holding nothing then, its load does not scale this producer's answers, and it may send the next moment)
    lim = steady_below_a_capacity_seen(16, high=64)
    t = refused_probe_then_held(lim)
    _sharing(lim, t, peer_in_flight=0)
    lim.on_send(17, t)
    lim.on_success(RTT, 17, t + RTT, level=17, sent_at=t)
    assert lim.regains == 0 and lim.mode is Mode.STEADY


def test_answers_stand_for_at_least_themselves_when_no_producer_holds_anything_at_a_note():
    # A note read when neither this producer nor its peer has a request at the server: the endpoint's load over
    # this producer's is 0 / 0; its answers still count as its own (a scale of 0 would stop every climb)
    lim = steady_below_a_capacity_seen(16, high=64)
    _sharing(lim, 1.0, peer_in_flight=0, mine=0)
    assert lim.answers_scale >= 1.0
