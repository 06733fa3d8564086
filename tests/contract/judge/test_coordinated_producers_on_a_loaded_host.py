"""Two producers on one host that share a token-bucket judge use what it allows, on a loaded host (simulated time).

Target: coordinated producers together get >= 95% of what the server allows, with <= 1% 429s on a token
bucket, with a CPU burner beside them.  A loaded host is a transit of its own between the gate and the
server (dispatch, the worker's queue, the return: 20 ms each way, +-50%), so the gate's count of requests
at the server carries a margin (``Endpoint.at_server``) and the bucket's refusals come seldom: after the
first producer's start-up burst the limit they share is found again by its probe.  The second starts 5 s
after the first, as in ``bench/_judge_fair.py`` (FAIR), and both are measured from 2 to 20 s after it.
"""

from __future__ import annotations

import heapq

import pytest

from qworker.judge.control.peers import MemoryBoard
from tests.contract.judge import judgesim
from tests.contract.judge.judgesim import Server, Sim

LATE = 5.0
RATE = 150.0  # the bucket's requests/s
LOADED = {"transit": (0.02, 0.02), "transit_jitter": 0.5}


def two_producers(seed: int, until: float) -> list[judgesim.Client]:
    sim = Sim()
    server = Server(rate=RATE, latency=0.3, sigma=0.6, seed=seed, retry_after="s")
    board = MemoryBoard(clock=lambda: sim.t)
    clients: list[judgesim.Client] = []
    for i, at in enumerate((0.0, LATE)):
        sim.at(at, lambda t, i=i: clients.append(judgesim.Client(sim, server, 60000, name=f"c{i}-", board=board, **LOADED)))
    while sim.events and sim.events[0][0] <= until:
        t, _, fn = heapq.heappop(sim.events)
        sim.t = t
        fn(t)
    return clients


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_two_coordinated_producers_on_a_loaded_host_get_what_a_token_bucket_allows(seed):
    lo, hi = LATE + 2.0, LATE + 20.0
    clients = two_producers(seed, hi)
    served = sum(1 for c in clients for x in c.done_at if lo <= x < hi)
    refused = sum(1 for c in clients for x in c.refused_at if lo <= x < hi)
    assert served / (hi - lo) >= 0.95 * RATE, (served / (hi - lo), [round(c.gate.endpoints[0].limit.limit, 1) for c in clients])
    assert refused / (served + refused) <= 0.01, refused
