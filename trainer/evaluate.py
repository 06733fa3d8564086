"""Held-out evaluation: ``eval.k`` samples (or ``eval.n``) per prompt of ``eval.data``, scored with the
training reward on the same qworker pool, summarised as mean@k and pass@k.

``Evaluator.run()`` generates with the rollout actor's *current* weights (the ones the policy last
synced), at ``eval.temperature`` / ``eval.top_p`` and the same ``eval.seed`` every time, so two
evaluations differ only by the weights.  Each group's rewards are submitted as soon as its batch is
generated (``train.prompts_per_step`` prompts per call), so scoring overlaps the next batch's generation.

Metrics (keys of the step log; ``k`` is ``eval.k``):

- ``eval/mean@k``: the mean reward of a sample, averaged over prompts (each prompt's mean over its n
  samples estimates the mean of k samples without bias);
- ``eval/pass@k``: the share of prompts where at least one of k samples passes (reward >=
  ``eval.pass_threshold``), with the unbiased estimator over n >= k samples (``stats.pass_at_k``);
  ``eval/pass@1`` likewise;
- ``eval/response_len_mean``, ``eval/truncated_frac``, ``eval/reward/<component>`` (a composite's
  components), ``eval/prompts``, ``eval/samples``, ``eval/s`` (wall seconds), ``eval/updates``
  (the training steps whose updates the evaluated weights hold).

When: before the first step, before every step ``s`` with ``s % eval.every_n_steps == 0`` (when > 0),
and after the last step (``due``).
"""

from __future__ import annotations

import time
from typing import Any

from trainer.config import EvalConfig
from trainer.rewards import RewardClient, build_payloads
from trainer.stats import component_scores, pass_at_k

__all__ = ["Evaluator"]


class Evaluator:
    """Runs the held-out evaluation of ``rows`` with ``rollout`` (an actor handle) and ``rewards``."""

    def __init__(self, *, cfg: EvalConfig, rows: list[dict[str, Any]], rollout: Any, rewards: RewardClient,
                 max_new_tokens: int, batch_prompts: int) -> None:
        self.cfg, self.rollout, self.rewards = cfg, rollout, rewards
        self.rows = rows[: cfg.max_prompts] if cfg.max_prompts else rows
        self.max_new_tokens = cfg.max_new_tokens or max_new_tokens
        self.batch_prompts = max(1, batch_prompts)
        self.n = cfg.n or cfg.k

    def due(self, step: int, first_step: int) -> bool:
        """Whether to evaluate before training step ``step`` (``first_step``: the run's first)."""
        every = self.cfg.every_n_steps
        return step == first_step or (every > 0 and step % every == 0)

    def run(self, updates: int) -> dict[str, float]:
        """Evaluate now; ``updates`` (training steps done) is recorded as ``eval/updates``."""
        e, k, n = self.cfg, self.cfg.k, self.n
        t0 = time.monotonic()
        submitted = []
        for start in range(0, len(self.rows), self.batch_prompts):
            chunk = self.rows[start : start + self.batch_prompts]
            outs = self.rollout.call("generate", [r["prompt"] for r in chunk], n, self.max_new_tokens,
                                     e.temperature, e.top_p, seed=e.seed + start)
            for row, group in zip(chunk, outs, strict=True):
                submitted.append((group, self.rewards.submit(build_payloads(row, group, self.max_new_tokens))))
        means, pass_k, pass_1, lengths, truncated, extras = [], [], [], [], 0, []
        for group, futures in submitted:
            scores, results = self.rewards.scores(futures)
            correct = sum(s >= e.pass_threshold for s in scores)
            means.append(sum(scores) / n)
            pass_k.append(pass_at_k(n, correct, k))
            pass_1.append(pass_at_k(n, correct, 1))
            lengths += [len(c["completion_ids"]) for c in group]
            truncated += sum(c.get("finish") == "length" for c in group)
            extras += [r.extra for r in results]
        out = {
            f"eval/mean@{k}": sum(means) / len(means),
            f"eval/pass@{k}": sum(pass_k) / len(pass_k),
            "eval/pass@1": sum(pass_1) / len(pass_1),
            "eval/response_len_mean": sum(lengths) / len(lengths),
            "eval/truncated_frac": truncated / len(lengths),
            "eval/prompts": float(len(means)),
            "eval/samples": float(n),
            "eval/updates": float(updates),
        }
        for name, scores in sorted(component_scores(extras).items()):
            out[f"eval/reward/{name}"] = sum(scores) / len(scores)
        out["eval/s"] = time.monotonic() - t0
        return out
