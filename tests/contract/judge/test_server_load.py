"""A metrics URL's running and waiting counts steer the limit (``estimators.ServerLoad``), in simulated time."""

from __future__ import annotations

import pytest

from tests.contract.judge import judgesim


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_metrics_url_keeps_a_queueing_servers_batch_full_across_the_clients_transit(seed: int) -> None:
    """A slot the batch frees is refilled from the server's queue while the replacement is on its way (30 ms to the
    server and 30 ms back on 0.1 s calls, +-90%): a queue that covers the requests on their way keeps the 16 slots busy,
    where one of a tenth of the batch leaves them empty a tenth of the time."""
    sim = judgesim.Sim()
    server = judgesim.Server(mode="queue", capacity=16, latency=0.1, sigma=0.3, seed=seed)
    client = judgesim.Client(sim, server, 3000, metrics=True, transit=(0.03, 0.03), transit_jitter=0.9)
    end = sim.run([client])
    assert len(client.done_at) == 3000 and not client.failed
    busy = server.stats["service_s"] / (16 * end)  # the share of slot-seconds serving, from the first request to the last answer
    assert busy >= 0.97, f"the batch was busy {busy:.3f} of the time"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_metrics_url_keeps_the_next_batch_waiting_at_a_queueing_server(seed: int) -> None:
    """Replies of one length (0.1 s +-5%) end a batch's slots together: the next batch waits at the server, whatever few
    requests are on their way (5 ms each way here), so a request queues there about one batch's service (0.1 s), no
    more than one and a half."""
    sim = judgesim.Sim()
    server = judgesim.Server(mode="queue", capacity=16, latency=0.1, seed=seed)
    client = judgesim.Client(sim, server, 3000, metrics=True, transit=(0.005, 0.005))
    sim.run([client])
    assert len(client.done_at) == 3000 and not client.failed
    queued = [w for t, w in server.waits if t >= 2.0]  # after the start-up's readings
    mean = sum(queued) / len(queued)
    assert 0.06 <= mean <= 0.15, f"a request queued {mean * 1000:.0f} ms on average"
