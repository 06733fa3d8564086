"""A metrics URL steers the limit to a queue that keeps the server's batch full (simulated time, ``judgesim``).

The server is vLLM-like: a batch of 16, replies of 16 tokens (equal service times), and a
scheduler that starts waiting requests only at its steps, a few per step (``step_s``,
``admit_per_step``), so its metrics show slots free while requests wait.  Against it: the
producer's gate reading the metrics URL, and hand-set semaphores of 8, 16, 32 and 64 on the
same server model.
"""

from __future__ import annotations

import math

from qworker.judge.control.estimators import LimitConfig, ServerLoad
from qworker.judge.control.limiter import AdaptiveLimit
from tests.contract.judge import judgesim
from tests.contract.judge.judgesim import Client, SemaphoreClient, Server, Sim

TASKS = 4000


def paced(seed: int) -> Server:
    return Server(mode="queue", capacity=16, latency=0.008, tokens_per_reply=lambda rng: 16, step_s=0.02, admit_per_step=4, seed=seed)


def _rate(done_at: list[float]) -> float:
    return judgesim.throughput(done_at, 2.0, max(done_at))  # past the first 2 s (the climb from the initial limit)


def test_a_server_that_fills_its_batch_at_its_own_pace_is_served_as_fast_as_by_the_best_semaphore():
    for seed in (1, 2):
        sim, server = Sim(), paced(seed)
        client = Client(sim, server, TASKS, metrics=True)
        sim.run([client])
        assert not client.failed
        best = 0.0
        for k in (8, 16, 32, 64):
            sim, other = Sim(), paced(seed)
            sem = SemaphoreClient(sim, other, TASKS, k)
            sim.run([sem])
            best = max(best, _rate(sem.done_at))
        assert _rate(client.done_at) >= 0.95 * best, (seed, _rate(client.done_at), best)
        # the queue it holds for that is bounded: at most ``standing_queue_max`` batches waiting, on average
        queued = server.stats["queued_s"] / server.stats["served"]
        service = server.stats["service_s"] / server.stats["served"]
        assert queued <= (LimitConfig().standing_queue_max + 0.5) * service, (queued, service)


def test_slots_free_while_requests_wait_deepen_the_queue_wanted_and_a_full_batch_brings_it_back():
    cfg = LimitConfig()
    load = ServerLoad(cfg)
    assert load.reading(running=16, waiting=8, in_flight=24, now=0.0).queueing  # a full batch: a tenth of it is enough
    assert not load.reading(running=20, waiting=8, in_flight=28, now=0.2).queueing  # a batch still filling:
    assert not load.reading(running=24, waiting=8, in_flight=32, now=0.3).queueing  # a new most twice, requests waiting
    load.batch = 16  # (back to a batch of 16)
    for i in range(12):  # the batch not full while requests wait: the server fills it at its own pace
        assert not load.reading(running=11, waiting=14, in_flight=25, now=0.5 * (i + 1)).queueing
    assert math.isclose(load.wanted, cfg.standing_queue_max)
    assert not load.reading(running=11, waiting=16, in_flight=27, now=7.0).queueing  # within a batch
    over = load.reading(running=11, waiting=40, in_flight=51, now=7.5)  # past a batch even with slots free
    assert over.queueing and math.isclose(over.knee, 51 * (11 + 16) / 51)
    for i in range(200):  # a full batch, reading after reading: back to a tenth
        load.reading(running=16, waiting=1, in_flight=17, now=8.0 + 0.5 * i)
    assert math.isclose(load.wanted, cfg.standing_queue)


def test_after_a_cut_slots_free_while_requests_wait_lift_the_limit_to_the_queue_the_server_needs_within_seconds():
    lim = AdaptiveLimit(initial=32)
    lim.on_server_load(16, 0, 16, now=0.0)  # the batch, seen
    lim.on_server_load(16, 10, 26, now=0.5)  # a full batch and a queue over a tenth of it: cut
    assert lim.limit < 18
    for i in range(6):  # then 3 s of readings with slots free while requests wait (all of ours at the server)
        n = math.floor(lim.limit)
        lim.on_server_load(11, n - 11, n, now=1.0 + 0.5 * i)
    assert lim.limit >= 26  # 11 running and a batch waiting: 27 (not +1 per reading: 23)
