"""A training step's timeline: where its wall time went, and how much reward time the GPU work hid.

Phases (seconds of wall time, measured in the driver):

- ``generate``: the rollout actor sampling completions.
- ``logprobs``: old (and reference) log-probabilities on the policy.
- ``reward_wait``: the driver blocked on rewards (``inline``: the whole scoring; ``overlap``: only
  the part that the GPU work did not cover).
- ``update``: forward/backward passes and optimizer steps.
- ``weight_sync``: the policy's weights copied into the rollout engine.

Rewards: ``reward_span`` is from the first group's submission to the last result, i.e. the reward
work's wall time as the pool ran it; ``reward_hidden = max(0, reward_span - reward_wait)`` is the part
of it that ran while the trainer did something else; ``reward_hidden_frac`` is that over ``reward_span``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

__all__ = ["PHASES", "StepTimeline"]

PHASES = ("generate", "logprobs", "reward_wait", "update", "weight_sync")


class StepTimeline:
    """Accumulates phase durations and reward start/finish times for one step (``time.monotonic`` seconds)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.phases = {name: 0.0 for name in PHASES}
        self._lock = threading.Lock()
        self.first_submit: float | None = None
        self.last_result: float | None = None

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in self.phases:
            raise KeyError(f"unknown phase {name!r}; expected one of {PHASES}")
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] += time.monotonic() - t0

    def mark_submit(self) -> None:
        """Call when a group's rewards are submitted."""
        now = time.monotonic()
        if self.first_submit is None:
            self.first_submit = now

    def mark_result(self, _future: object = None) -> None:
        """A done-callback for reward futures (runs on qworker's thread): records the latest result time."""
        now = time.monotonic()
        with self._lock:
            if self.last_result is None or now > self.last_result:
                self.last_result = now

    def summary(self) -> dict[str, float]:
        """``step_s``, each phase in seconds, ``gpu_s`` (every phase but ``reward_wait``), and the reward figures."""
        step = time.monotonic() - self.start
        out = {"step_s": step, **{f"{k}_s": v for k, v in self.phases.items()}}
        out["gpu_s"] = sum(v for k, v in self.phases.items() if k != "reward_wait")
        span = 0.0
        if self.first_submit is not None and self.last_result is not None:
            span = max(0.0, self.last_result - self.first_submit)
        out["reward_span_s"] = span
        out["reward_hidden_s"] = max(0.0, span - self.phases["reward_wait"])
        out["reward_hidden_frac"] = out["reward_hidden_s"] / span if span > 0 else 0.0
        return out
