"""``BatchKnee`` on a server whose batch shares its compute (vLLM on CPU): slower as it serves more, yet no queue."""

from __future__ import annotations

import math
import random
from typing import Callable, Optional

from qworker.judge.control.batch import BatchKnee


def feed_levels(knee: BatchKnee, latency: Callable[[float], float], levels: list[int], sigma: float, seed: int) -> list[Optional[float]]:
    """Answers sent at each of ``levels`` in turn, lognormal noise ``sigma`` around ``latency(level)``."""
    rng = random.Random(seed)
    out = []
    for level in levels:
        noisy = latency(level) * math.exp(sigma * rng.gauss(0, 1) - sigma**2 / 2)
        out.append(knee.on_answer(noisy, float(level), sent_at=10.0 * len(out)))
    return out


def test_answers_sent_above_the_starting_limit_while_slow_start_raises_the_load_show_no_batch():
    # A server whose batch shares its compute: the first burst (levels 1 to the starting 32) answered in the same
    # 0.5 s; then requests sent while slow start raises the load, each slowed by those that join after it: latency
    # rising from 28 on (+1/40 per level), as vLLM on CPU answered at --max-num-seqs 64 (fixed-length replies:
    # sigma 0.1).  Levels past 32 are not the server's curve but the ramp's
    levels = [*range(1, 33), *list(range(20, 45)) * 3, *list(range(25, 62)) * 3]
    for seed in range(1, 11):
        found = feed_levels(BatchKnee(below=32), lambda lv: 0.5 * (1 + max(0, lv - 28) / 40), levels, sigma=0.1, seed=seed)
        assert not any(found), (seed, [b for b in found if b])


def test_a_burst_taken_in_one_by_one_and_served_all_at_once_shows_no_batch():
    # A front end that takes the burst in one request every 5 ms (tokenising each in turn), then a server that
    # serves them all at once for the same 0.3 s (+-5%: replies of a fixed length): answered in the order of the
    # levels, each within the intake's spread of the first; no request waited for a slot
    for seed in range(1, 21):
        rng = random.Random(seed)
        knee = BatchKnee(below=64)
        for level in range(1, 33):
            knee.on_send(float(level), 0.0)
        answers = sorted((0.005 * (level - 1) + 0.3 * rng.uniform(0.95, 1.05), level) for level in range(1, 33))
        assert not any(knee.on_answer(t, float(level), 0.0) for t, level in answers), seed
