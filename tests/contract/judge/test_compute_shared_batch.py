"""A judge whose batch shares its compute (vLLM on CPU), in simulated time (``judgesim``): not read as a queue.

The server serves up to 64 requests at once; each one is served slower the more it
serves (``load_slope``: service x (1 + busy / 64)), yet more at once still brings
more answers per second, up to its batch.  Sent as a burst from idle, its answers
come back in the order of their levels (each joins a busier server), and their
latency rises with the level, slower than in proportion.  Neither is a queue past a
batch under the starting limit: the limit is not cut there, and qworker without a
metrics URL or a capacity hint judges about as fast as a semaphore at the batch.
"""

from __future__ import annotations

from tests.contract.judge.judgesim import Client, SemaphoreClient, Server, Sim

COMPUTE_SHARED = {"mode": "queue", "capacity": 64, "latency": 0.3, "load_slope": 1.0}


def test_a_server_whose_batch_shares_its_compute_is_not_cut_to_a_batch_under_the_starting_limit():
    for seed in (1, 2, 3):
        sim = Sim()
        client = Client(sim, Server(**COMPUTE_SHARED, seed=seed), 3000, name="q-")
        end = sim.run([client])
        limiter = client.gate.endpoints[0].limit
        assert min(lim for t, lim in client.limits if t < 2.0) >= 32, seed  # (32: the starting limit)

        sim_sem = Sim()
        sem = SemaphoreClient(sim_sem, Server(**COMPUTE_SHARED, seed=seed), 3000, concurrency=64)
        end_sem = sim_sem.run([sem])
        assert end_sem / end >= 0.95, (seed, 3000 / end, 3000 / end_sem, limiter.limit)
