"""Statistics of a batch of rollouts for the step log, and the unbiased pass@k estimator.

Pure functions on plain lists (no torch, no I/O):

- ``batch_stats``: response lengths (tokens: mean, min, max, p50, p90), the truncation rate (the
  share of completions that hit the token limit instead of ending with EOS), the share of groups
  whose rewards are all equal (their GRPO advantages are 0: they teach nothing), and each
  component's mean score when the reward is a composite.
- ``component_scores``: a composite ``Result.extra["components"]``'s scores, by component name
  (unweighted; a failed component, score None, is left out).
- ``pass_at_k(n, c, k)``: the probability that at least one of ``k`` samples drawn without
  replacement from ``n``, ``c`` of them correct, is correct: ``1 - C(n-c, k) / C(n, k)`` (Chen et
  al. 2021, "Evaluating Large Language Models Trained on Code"); unbiased for the model's pass@k.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

__all__ = ["pass_at_k", "percentile", "length_stats", "component_scores", "batch_stats"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct; needs ``1 <= k <= n`` and ``0 <= c <= n``."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=0}^{k-1} (n-c-i) / (n-i), without big binomials
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile ``p`` (0-100] of an ascending, non-empty sequence."""
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return float(sorted_values[rank - 1])


def length_stats(lengths: Iterable[int], prefix: str = "response_len") -> dict[str, float]:
    """``{prefix}_mean``, ``_min``, ``_max``, ``_p50``, ``_p90`` of ``lengths`` (tokens); all 0 when empty."""
    xs = sorted(float(x) for x in lengths)
    if not xs:
        return {f"{prefix}_{k}": 0.0 for k in ("mean", "min", "max", "p50", "p90")}
    return {f"{prefix}_mean": sum(xs) / len(xs), f"{prefix}_min": xs[0], f"{prefix}_max": xs[-1],
            f"{prefix}_p50": percentile(xs, 50), f"{prefix}_p90": percentile(xs, 90)}


def component_scores(extras: Iterable[dict[str, Any]]) -> dict[str, list[float]]:
    """Scores of each component of composite rewards, from their ``Result.extra`` mappings."""
    out: dict[str, list[float]] = {}
    for extra in extras:
        comps = (extra or {}).get("components")
        if not isinstance(comps, dict):
            continue
        for name, d in comps.items():
            score = d.get("score") if isinstance(d, dict) else None
            if isinstance(score, (int, float)) and not isinstance(score, bool):
                out.setdefault(str(name), []).append(float(score))
    return out


def batch_stats(groups: Sequence[Sequence[dict[str, Any]]], rewards: Sequence[Sequence[float]],
                components: dict[str, list[float]] | None = None) -> dict[str, float]:
    """The step log's rollout statistics (see the module docstring).  ``groups``: each group's
    completions (dicts with ``completion_ids`` and ``finish``); ``rewards``: each group's scores."""
    flat = [c for g in groups for c in g]
    out = length_stats(len(c["completion_ids"]) for c in flat)
    out["truncated_frac"] = sum(c.get("finish") == "length" for c in flat) / len(flat) if flat else 0.0
    scored = [r for r in rewards if r]
    out["zero_var_group_frac"] = sum(all(x == r[0] for x in r) for r in scored) / len(scored) if scored else 0.0
    for name, scores in sorted((components or {}).items()):
        if scores:
            out[f"reward/{name}"] = sum(scores) / len(scores)
    return out
