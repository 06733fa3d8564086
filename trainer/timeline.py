"""A training step's timeline: where its wall time went, and how much reward time the GPU work hid.

Phases (seconds of wall time, measured in the driver):

- ``generate``: the rollout actor sampling completions.
- ``logprobs``: old (and reference) log-probabilities on the policy.
- ``reward_wait``: the driver blocked on rewards (``inline``: the whole scoring; ``overlap``: only
  the part that the GPU work did not cover).
- ``update``: forward/backward passes and optimizer steps.
- ``weight_sync``: the policy's weights copied into the rollout engine.
- ``rollout_wait`` (``train.off_policy`` only): the driver blocked on the next step's rollout, which
  a background thread generates while this step trains, before it may sync the weights.

In off-policy mode ``generate`` (and the rollout's log-probs, counted in ``logprobs``) ran on the
background thread, at the same time as the driver's phases: the phases then add up to more than
``step_s``.  ``generate_under_reward_wait_s`` and ``generate_under_update_s`` are the seconds of
generation that ran while the driver was in ``reward_wait`` or in ``update`` (0 on-policy).

Rewards (a ``RewardClock``, one per batch of samples; off-policy, a step's batch was submitted during
the step before): ``reward_span`` is from the first group's submission to the last result, i.e. the
reward work's wall time as the pool ran it; ``reward_hidden = max(0, reward_span - reward_wait)`` is
the part of it that ran while the trainer did something else; ``reward_hidden_frac`` is that over
``reward_span``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

__all__ = ["PHASES", "RewardClock", "StepTimeline", "overlap_s"]

PHASES = ("generate", "logprobs", "reward_wait", "update", "weight_sync", "rollout_wait")
WAITS = ("reward_wait", "rollout_wait")  # the driver blocked: not GPU work


def overlap_s(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Seconds during which an interval of ``a`` and one of ``b`` were both open (each list's
    intervals are disjoint, as the phases of one thread are)."""
    return sum(max(0.0, min(a1, b1) - max(a0, b0)) for a0, a1 in a for b0, b1 in b)


class RewardClock:
    """When a batch's rewards were first submitted and last resolved (``time.monotonic`` seconds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.first_submit: float | None = None
        self.last_result: float | None = None

    def mark_submit(self) -> None:
        """Call when a group's rewards are submitted."""
        now = time.monotonic()
        with self._lock:
            if self.first_submit is None:
                self.first_submit = now

    def mark_result(self, _future: object = None) -> None:
        """A done-callback for reward futures (runs on qworker's thread): records the latest result time."""
        now = time.monotonic()
        with self._lock:
            if self.last_result is None or now > self.last_result:
                self.last_result = now

    def span(self) -> float:
        """Seconds from the first submission to the last result; 0 before both exist."""
        if self.first_submit is None or self.last_result is None:
            return 0.0
        return max(0.0, self.last_result - self.first_submit)


class StepTimeline:
    """Accumulates phase durations (from any thread) and, in ``rewards``, the reward clock of the
    batch this step trains on (``time.monotonic`` seconds)."""

    def __init__(self, rewards: RewardClock | None = None) -> None:
        self.start = time.monotonic()
        self.phases = {name: 0.0 for name in PHASES}
        self.intervals: dict[str, list[tuple[float, float]]] = {name: [] for name in PHASES}
        self._lock = threading.Lock()
        self.rewards = rewards or RewardClock()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in self.phases:
            raise KeyError(f"unknown phase {name!r}; expected one of {PHASES}")
        t0 = time.monotonic()
        try:
            yield
        finally:
            t1 = time.monotonic()
            with self._lock:
                self.phases[name] += t1 - t0
                self.intervals[name].append((t0, t1))

    def summary(self) -> dict[str, float]:
        """``step_s``, each phase in seconds, ``gpu_s`` (every phase but the waits), the generation run
        under the driver's reward wait and update, and the reward figures."""
        step = time.monotonic() - self.start
        out = {"step_s": step, **{f"{k}_s": v for k, v in self.phases.items()}}
        out["gpu_s"] = sum(v for k, v in self.phases.items() if k not in WAITS)
        gen = self.intervals["generate"]
        out["generate_under_reward_wait_s"] = overlap_s(gen, self.intervals["reward_wait"])
        out["generate_under_update_s"] = overlap_s(gen, self.intervals["update"])
        span = self.rewards.span()
        out["reward_span_s"] = span
        out["reward_hidden_s"] = max(0.0, span - self.phases["reward_wait"])
        out["reward_hidden_frac"] = out["reward_hidden_s"] / span if span > 0 else 0.0
        return out
