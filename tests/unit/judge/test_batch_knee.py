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
            out.append(knee.on_answer(latency(level) * math.exp(0.6 * rng.gauss(0, 1) - 0.18), float(level), sent_at=10.0 * len(out)))
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


def fifo_burst(batch: int, levels: int, seed: int) -> list[tuple[float, int]]:
    """(answer time, level) of a burst of ``levels`` requests sent at once at t = 0 to a FIFO server serving ``batch``
    at once (lognormal service, mean 0.5 s, sigma 0.6), in the order the answers come back."""
    rng = random.Random(seed)
    free = [0.0] * batch
    answers = []
    for level in range(1, levels + 1):  # FIFO: each starts when the first slot frees
        free.sort()
        start = free[0]
        free[0] = start + 0.5 * math.exp(0.6 * rng.gauss(0, 1) - 0.18)
        answers.append((free[0], level))
    return sorted(answers)


def test_a_burst_answered_in_the_order_of_its_levels_shows_the_batch_before_the_levels_past_twice_it_are_answered():
    for seed in range(1, 21):
        knee = BatchKnee(below=32)
        for level in range(1, 33):
            knee.on_send(float(level), 0.0)
        found, answered = None, []
        for t, level in fifo_burst(8, 32, seed):
            answered.append(level)
            found = knee.on_answer(t, float(level), 0.0)
            if found is not None:
                break
        assert found is not None and 6 <= found <= 20, (seed, found, answered)
        assert sum(lv > 16 for lv in answered) <= 2, (seed, answered)  # before the latencies past the batch are known


def test_a_burst_answered_in_an_order_unrelated_to_its_levels_gives_nothing():
    for seed in range(1, 41):  # a server serving the whole burst at once (batch 64): lognormal latencies, any order
        knee = BatchKnee(below=64)
        for level in range(1, 49):
            knee.on_send(float(level), 0.0)
        assert not any(knee.on_answer(t, float(level), 0.0) for t, level in fifo_burst(64, 48, seed)), seed


def test_requests_sent_one_after_another_to_a_server_that_serves_them_all_at_once_show_no_batch():
    # rewards streamed as rollouts finish: a request every 10 ms from idle, each answered after its own lognormal
    # service (mean 0.3 s) with nothing queued; the earlier sent (at a lower level) come back earlier
    for seed in range(1, 21):
        rng = random.Random(seed)
        knee = BatchKnee(below=64)
        sends = [(0.01 * i, float(i + 1)) for i in range(48)]
        answers = sorted((t + 0.3 * math.exp(0.3 * rng.gauss(0, 1) - 0.045), t, level) for t, level in sends)
        events = sorted([(t, 0, level, t) for t, level in sends] + [(a, 1, level, t) for a, t, level in answers])
        found = []
        for now, kind, level, sent_at in events:
            if kind == 0:
                knee.on_send(level, now)
            else:
                found.append(knee.burst.on_answer(level, sent_at, now - sent_at))
        assert not any(found), (seed, [b for b in found if b])


def test_a_refusal_ends_the_burst_refused_requests_being_no_queue():
    knee = BatchKnee(below=32)
    for level in range(1, 33):
        knee.on_send(float(level), 0.0)
    knee.refused()
    assert not any(knee.on_answer(t, float(level), 0.0) for t, level in fifo_burst(8, 32, 1)[:24])


def test_the_fit_stops_listening_once_no_answer_sent_to_an_idle_server_is_in_its_window_and_listens_again_at_one():
    knee = BatchKnee(below=32)
    feed(knee, lambda lv: 0.5 * max(1.0, lv / 8), range(1, 41))
    assert knee.listening
    feed(knee, lambda lv: 0.5, range(20, 40), rounds=26)  # 520 answers, none sent at level 2 or under
    assert not knee.listening and not knee._answers  # nothing kept, each answer a comparison
    knee.on_answer(0.5, 1.0, sent_at=1e6)
    assert knee.listening and len(knee._answers) == 1
