"""``BatchKnee``: a queueing server's batch from latency against the level each request was sent at."""

from __future__ import annotations

import math
import random
from typing import Optional

from qworker.judge.control.batch import BatchKnee


def feed(knee: BatchKnee, latency, levels: range, rounds: int = 4, seed: int = 1) -> list[Optional[float]]:
    """Answers sent at each of ``levels``, ``rounds`` times, with lognormal noise (sigma 0.6) around ``latency(level)``."""
    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        for level in levels:
            out.append(knee.on_answer(latency(level) * math.exp(0.6 * rng.gauss(0, 1) - 0.18), float(level), now=10.0 * len(out)))
    return out


def test_latency_rising_in_proportion_past_a_batch_gives_the_batch():
    knee = BatchKnee(below=32)
    found = [b for b in feed(knee, lambda lv: 0.5 * max(1.0, lv / 8), range(1, 41)) if b is not None]
    assert found and all(5 <= b <= 11 for b in found), found


def test_flat_latency_or_latency_rising_slower_than_the_load_gives_nothing():
    for latency in (lambda lv: 0.5, lambda lv: 0.5 * (1 + 0.2 * lv / 40)):  # a cap that refuses; a server slowing under load
        for seed in (1, 2, 3):
            assert not any(feed(BatchKnee(below=32), latency, range(1, 41), rounds=12, seed=seed))


def test_a_batch_above_the_starting_limit_is_left_to_the_latency_gradient():
    assert not any(feed(BatchKnee(below=32), lambda lv: 0.5 * max(1.0, lv / 40), range(1, 121)))


def test_answers_with_none_sent_to_an_idle_server_give_nothing():
    # a latecomer above another producer's load: its levels start at 20
    assert not any(feed(BatchKnee(below=32), lambda lv: 0.5 * max(1.0, lv / 24), range(20, 60), rounds=8))
