"""The limit is held against the requests at the server, as the server counts them, not the gate's count (simulated time).

The gate holds a call from its admission to its result's return; the server, from the request's
arrival to the response's departure.  Here the way between them (dispatch, the worker's queue, the
result's return) takes tens of milliseconds each way, as on a loaded host, and the servers' own
accounts say how many they held at once.
"""

from __future__ import annotations

from qworker.judge.control.gate import Gate
from qworker.judge.control.transit import Transit
from tests.contract.judge.judgesim import Client, Server, Sim


def held(server: Server, start: float, end: float) -> float:
    """The server's mean number of requests in service between ``start`` and ``end`` (its own account)."""
    busy = sum(max(0.0, min(end, a + s) - max(start, a)) for a, s in server.services)
    return busy / (end - start)


def test_a_limit_equal_to_a_servers_batch_keeps_the_batch_full_when_the_way_to_the_server_takes_time():
    # 64 slots (vLLM's --max-num-seqs), flat latency, a client told so (max_concurrency 64), 40 ms outside the
    # server per call: the server runs ~64 at once, not 64 x 0.3 / 0.34, and barely queues.
    srv = Server(mode="queue", capacity=64, latency=0.3, seed=3)
    sim = Sim()
    c = Client(sim, srv, 12000, semaphore=64, transit=(0.02, 0.02), transit_jitter=0.5)
    sim.run([c], 40.0)
    running = held(srv, 5.0, 25.0)
    assert running >= 0.93 * 64, f"the server ran {running:.1f} of 64 on average"  # (the gate's count: 56)
    assert srv.stats["queued_s"] / srv.stats["service_s"] < 0.05
    assert not c.failed


def test_a_primary_of_capacity_32_with_room_at_its_server_keeps_its_tasks_from_the_fallback():
    # 80 tasks/s at 0.3 s need 24 of the primary's 32 slots (max_concurrency 32).  With 50 ms each way outside
    # the server the gate holds ~32 calls for it: counted at the gate, the primary looks full and tasks spill.
    # The median of three runs: a lone refusal at the cap (the transit's ups and downs) spills a few dozen tasks
    # in about one run in three, whichever way the run's draws go.
    shares = []
    for seed in (5, 7, 9):
        primary, fallback = Server(capacity=32, latency=0.3, sigma=0.3, seed=seed), Server(capacity=64, latency=0.3, sigma=0.3, seed=seed + 1)
        sim = Sim()
        c = Client(sim, [primary, fallback], 2400, arrival_rate=80, endpoints=[{"priority": 0, "max_concurrency": 32}, {"priority": 1}],
                   transit=(0.05, 0.05), transit_jitter=0.5)
        sim.run([c], 600.0)
        assert not c.failed and len(c.done_at) == 2400
        warm = 2.0  # the first answers teach the gate the share of a call's time at the server
        sends = [(t, e) for t, e in c.sends if t >= warm]
        shares.append(sum(1 for _, e in sends if e == 1) / len(sends))
        assert primary.stats["refused"] / primary.stats["requests"] < 0.02
    assert sorted(shares)[1] < 0.005, f"shares sent after the first 2 s to the fallback: {shares}"  # (7%)


def test_the_share_at_the_server_is_the_servers_seconds_over_the_gates():
    t = Transit()
    assert t.share == 1.0  # before any answer: the gate's own count
    for _ in range(300):
        t.on_answer(0.4, 0.3)
    assert abs(t.share - 0.75) < 1e-9 and abs(t.transit_s - 0.1) < 1e-3
    t.on_answer(0.0, 0.3)  # no gate time: says nothing
    t.on_answer(0.2, 0.5)  # a server time over the gate's (clocks apart): clipped to the gate's
    assert 0.75 < t.share <= 1.0


def test_an_endpoint_holds_its_limit_against_the_requests_at_its_server():
    g = Gate({"model": "m", "endpoints": [{"url": "http://a", "max_concurrency": 30}], "initial_concurrency": 30})
    e = g.endpoints[0]
    for _ in range(300):
        e.transit.on_answer(0.4, 0.3)  # a quarter of each call's time outside the server
    e.in_flight = 34  # 8.5 of them expected outside the server; 8.5 - sqrt(8.5), 5 whole ones, surely so
    assert e.at_server() == 29 and e.free(0.0, 1.0) == 1
    e.in_flight = 36
    assert e.at_server() == 30 and e.free(0.0, 1.0) == 0


class StallingClient(Client):
    """Workers that take until ``stall_until`` (simulated seconds) to send what the gate admits before then (threads
    and connections being made at start-up), and ``transit`` after."""

    stall_until = 1.0

    def _transit(self, way: int) -> float:
        extra = max(0.0, self.stall_until - self.sim.t) if way == 0 else 0.0
        return extra + super()._transit(way)


def test_a_start_up_stall_of_the_workers_does_not_let_the_gate_hold_more_than_its_limit_at_the_server():
    """The first burst reaches the server a second late (the workers starting), then 20 ms outside it per 0.3 s call:
    the server never holds more than the limit (32) and a few, as the transit of the calls sent after the first
    answer says, not the stall's (read as transit, it had the gate hold about 4x its limit)."""
    server = Server(mode="queue", capacity=64, latency=0.3, sigma=0.3, seed=3)
    sim = Sim()
    load: list[int] = []

    def sample(t: float) -> None:
        load.append(server.busy + len(server.waiting))
        if t < 20.0:
            sim.at(t + 0.005, sample)

    sim.at(0.0, sample)
    c = StallingClient(sim, server, 3000, endpoints=[{"max_concurrency": 32}], initial_concurrency=32,
                       transit=(0.01, 0.01), transit_jitter=0.5)
    sim.run([c], 600.0)
    assert not c.failed and len(c.done_at) == 3000
    assert max(load) <= 36, (max(load), c.gate.endpoints[0].transit.share)
