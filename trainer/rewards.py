"""The trainer's side of qworker: one ``Producer``, rollouts turned into reward payloads, scores back.

Uses qworker's public API only.  The ``qworker:`` section of the trainer's config is handed to
``Producer(config=...)`` as a mapping (its ``producer:`` and ``rewards:`` sections: pool settings and
named/composite rewards); ``reward.modules`` are imported by the workers; ``reward.name`` is a reward
of qworker's catalog (built-in, registered, ``pkg.module:fn``, or named in ``qworker.rewards``).

Payloads follow qworker's convention: ``prompt``, ``response``, ``ground_truth``, ``response_length``
(tokens), ``max_response_length`` (tokens), and the row's ``data_source`` / ``extra_info`` if present.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from qworker import Producer, Result, ResultFuture

__all__ = ["RewardClient", "build_payloads"]

log = logging.getLogger("trainer.rewards")


def build_payloads(row: dict[str, Any], completions: list[dict[str, Any]], max_new_tokens: int) -> list[dict[str, Any]]:
    """One payload per completion of ``row``'s group (see the module docstring)."""
    out = []
    for c in completions:
        p = {
            "prompt": row["prompt"],
            "response": c["text"],
            "ground_truth": row["ground_truth"],
            "response_length": len(c["completion_ids"]),
            "max_response_length": max_new_tokens,
        }
        for key in ("data_source", "extra_info"):
            if key in row:
                p[key] = row[key]
        out.append(p)
    return out


class RewardClient:
    """Submits groups to a ``Producer`` and reads their scores; ``close()`` stops the pool."""

    def __init__(self, name: str, params: Optional[dict[str, Any]] = None, modules: Optional[list[str]] = None,
                 qworker_config: Optional[dict[str, Any]] = None, gather_timeout_s: float = 600.0) -> None:
        self.name, self.params, self.gather_timeout_s = name, dict(params or {}), gather_timeout_s
        self.producer = Producer(config=dict(qworker_config or {}), reward_modules=list(modules or []) or None)
        self.failures = 0

    def submit(self, payloads: list[dict[str, Any]]) -> list[ResultFuture]:
        """Returns at once: one future per payload, in order."""
        return self.producer.submit_batch(self.name, payloads, params=self.params or None)

    def scores(self, futures: list[ResultFuture]) -> tuple[list[float], list[Result]]:
        """Block until ``futures`` resolve; returns ``(scores, results)``.  A failed task scores the
        producer's ``fallback_score`` (its ``Result.error`` is logged once per failure and counted)."""
        results = self.producer.gather(futures, timeout=self.gather_timeout_s)
        for r in results:
            if not r.ok:
                self.failures += 1
                log.warning("reward %s failed: %s", self.name, r.error)
        return [float(r.score) for r in results], results

    def close(self) -> None:
        self.producer.close()
