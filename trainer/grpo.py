"""GRPO's arithmetic: group advantages, the clipped policy loss, the KL penalty, and loss aggregation.

Pure functions on tensors, no model and no I/O, so each can be checked against hand-computed values.

Conventions (shapes; units are nats for log-probabilities):
- ``rewards``: ``[groups, num_generations]``, the scores of the samples drawn for each prompt.
- per-token tensors: ``[sequences, tokens]`` over the completion tokens only, with a 0/1 float ``mask``
  marking real tokens (1) and padding (0).
- advantages are per sequence, ``[sequences]``, broadcast over that sequence's tokens.

Aggregation is split into a numerator and a denominator so that a batch can be processed in
micro-batches whose membership is decided late (the trainer consumes groups in the order their
rewards arrive): the numerators of the micro-batches are summed, their denominators are summed, and
the gradient is divided once at the end.  ``token`` mode: sum of token losses / number of tokens.
``sequence`` mode: sum over sequences of (mean token loss of the sequence) / number of sequences.
``dr_grpo`` mode (Dr. GRPO, Liu et al. 2025, "Understanding R1-Zero-Like Training"; TRL's
``loss_type="dr_grpo"``): sum of token losses / (number of sequences * ``max_tokens``), a constant
per sequence, so neither a sequence's length nor the batch's token count rescales its tokens' weight.
Dr. GRPO is that loss *and* the ``grpo_no_std`` advantage (no division by the group's std).
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["ADVANTAGE_MODES", "AGGREGATIONS", "AdvantageMode", "Aggregation", "STD_EPS", "group_advantages", "clipped_policy_loss", "kl_k3", "aggregate"]

AdvantageMode = Literal["raw", "grpo", "grpo_no_std"]
Aggregation = Literal["token", "sequence", "dr_grpo"]
ADVANTAGE_MODES = ("raw", "grpo", "grpo_no_std")
AGGREGATIONS = ("token", "sequence", "dr_grpo")
STD_EPS = 1e-6  # added to the group's standard deviation in "grpo" mode


def group_advantages(rewards: torch.Tensor, mode: AdvantageMode) -> torch.Tensor:
    """Advantages for ``rewards`` of shape ``[groups, n]``; returns the same shape.

    - ``raw``: the reward itself.
    - ``grpo``: ``(r - mean) / (std + STD_EPS)`` within each group, with the sample (n - 1) standard
      deviation; a group whose rewards are all equal gets advantage exactly 0 (whatever the value:
      computed in float64 and zeroed, not left to rounding).  Needs ``n >= 2``.
    - ``grpo_no_std``: ``r - mean`` within each group: Dr. GRPO's advantage (it also drops the
      per-sequence length normalisation: ``loss_aggregation`` ``dr_grpo``).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [groups, n], got shape {tuple(rewards.shape)}")
    if mode == "raw":
        return rewards.to(torch.float32).clone()
    if mode == "grpo" and rewards.shape[1] < 2:
        raise ValueError("advantage mode 'grpo' needs num_generations >= 2")
    # float64, and an exact 0 for a group whose rewards are all equal: in float32 the mean of eight
    # 0.7s is not 0.7, and (r - mean) / (std + eps) turned that rounding into +0.056 on every sample
    r = rewards.to(torch.float64)
    constant = (r == r[:, :1]).all(dim=1, keepdim=True)
    centred = torch.where(constant, torch.zeros_like(r), r - r.mean(dim=1, keepdim=True))
    if mode == "grpo_no_std":
        return centred.to(torch.float32)
    if mode == "grpo":
        return (centred / (r.std(dim=1, keepdim=True, unbiased=True) + STD_EPS)).to(torch.float32)
    raise ValueError(f"unknown advantage mode {mode!r}; expected one of {ADVANTAGE_MODES}")


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_range_left: float,
    clip_range_right: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate per token, with an asymmetric trust region.

    ``ratio = exp(logp - old_logp)``; ``loss = -min(ratio * A, clamp(ratio, 1 - left, 1 + right) * A)``.
    ``logp``/``old_logp`` are ``[sequences, tokens]``; ``advantages`` is ``[sequences]``.
    Returns ``(loss, clipped)``, both ``[sequences, tokens]``: ``clipped`` is 1.0 where the clipped
    term was the one taken (its gradient is then 0).
    """
    if clip_range_left < 0 or clip_range_left >= 1 or clip_range_right < 0:
        raise ValueError(f"need 0 <= clip_range_left < 1 and clip_range_right >= 0, got {clip_range_left}, {clip_range_right}")
    adv = advantages.to(logp.dtype).unsqueeze(1)
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_range_left, 1.0 + clip_range_right) * adv
    loss = -torch.minimum(unclipped, clipped)
    return loss, (clipped < unclipped).to(logp.dtype)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate ``exp(ref - logp) - (ref - logp) - 1`` (Schulman's k3; >= 0).

    With ``mask``, the difference is zeroed where ``mask`` is 0 *before* the exponential, so padding
    gives 0 and no gradient: ``exp`` of a pad slot's difference can overflow to inf, and inf * 0 is NaN."""
    d = ref_logp - logp
    if mask is not None:
        d = torch.where(mask > 0, d, torch.zeros_like(d))
    return torch.exp(d) - d - 1.0


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: Aggregation, max_tokens: int | None = None) -> tuple[torch.Tensor, float]:
    """``(numerator, denominator)`` of the aggregated loss of one micro-batch (see the module docstring).

    The aggregated loss of a whole mini-batch is ``sum(numerators) / sum(denominators)``.  A sequence
    with no tokens contributes nothing in ``sequence`` mode (it is not counted).  ``dr_grpo`` needs
    ``max_tokens``, the generation budget (``rollout.max_new_tokens``); every sequence counts.
    """
    mask = mask.to(per_token.dtype)
    if mode == "token":
        return (per_token * mask).sum(), float(mask.sum().item())
    if mode == "sequence":
        lengths = mask.sum(dim=1)
        present = lengths > 0
        per_seq = (per_token * mask).sum(dim=1)[present] / lengths[present]
        return per_seq.sum(), float(present.sum().item())
    if mode == "dr_grpo":
        if not max_tokens or max_tokens < 1:
            raise ValueError("loss aggregation 'dr_grpo' needs max_tokens >= 1 (rollout.max_new_tokens)")
        return (per_token * mask).sum(), float(per_token.shape[0] * max_tokens)
    raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {AGGREGATIONS}")
