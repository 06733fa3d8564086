"""Per-token log-probabilities of completions under a causal LM: one implementation, used by the policy
actor (old, reference and current log-probs) and by the CPU rollout actor (the sampling policy's
log-probs in ``train.off_policy`` mode), so both compute them with the same batching and numerics.

A sequence is ``(prompt_ids, completion_ids)``.  Batches are laid out left-padded prompt then
right-padded completion, with explicit position ids, so every completion starts at the same column.
Log-probs are in nats, of the distribution at the sampling ``temperature`` (logits / temperature).
"""

from __future__ import annotations

import torch

__all__ = ["Seq", "batch_sequences", "token_logprobs", "sequence_logprobs"]

Seq = tuple[list[int], list[int]]


def batch_sequences(seqs: list[Seq], pad_id: int, device: str) -> dict[str, torch.Tensor]:
    """Pad ``seqs`` into one batch: ``ids``, ``attn``, ``pos`` (``[n, p_max + c_max]``), ``mask``
    (``[n, c_max]``, 1.0 on completion tokens), and the widths ``p_max`` and ``c_max`` (0-d tensors)."""
    p_max = max(len(p) for p, _ in seqs)
    c_max = max(max(len(c) for _, c in seqs), 1)
    ids = torch.full((len(seqs), p_max + c_max), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    comp_mask = torch.zeros((len(seqs), c_max), dtype=torch.float32)
    for i, (p, c) in enumerate(seqs):
        ids[i, p_max - len(p) : p_max] = torch.tensor(p, dtype=torch.long)
        ids[i, p_max : p_max + len(c)] = torch.tensor(c, dtype=torch.long)
        attn[i, p_max - len(p) : p_max + len(c)] = 1
        comp_mask[i, : len(c)] = 1.0
    pos = (attn.cumsum(dim=1) - 1).clamp(min=0)
    return {"ids": ids.to(device), "attn": attn.to(device), "pos": pos.to(device),
            "mask": comp_mask.to(device), "p_max": torch.tensor(p_max), "c_max": torch.tensor(c_max)}


def token_logprobs(model: torch.nn.Module, b: dict[str, torch.Tensor], temperature: float) -> torch.Tensor:
    """``[sequences, c_max]`` log-probs of the completion tokens of batch ``b`` (garbage where ``mask`` is 0)."""
    p_max, c_max = int(b["p_max"]), int(b["c_max"])
    logits = model(input_ids=b["ids"], attention_mask=b["attn"], position_ids=b["pos"]).logits
    logits = logits[:, p_max - 1 : p_max - 1 + c_max, :].float() / max(temperature, 1e-6)
    targets = b["ids"][:, p_max : p_max + c_max]
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


@torch.no_grad()
def sequence_logprobs(model: torch.nn.Module, seqs: list[Seq], pad_id: int, device: str, temperature: float,
                      micro_batch_size: int) -> list[list[float]]:
    """One list of floats per sequence: its completion tokens' log-probs, computed ``micro_batch_size``
    sequences per forward pass, without gradient."""
    out: list[list[float]] = []
    for start in range(0, len(seqs), micro_batch_size):
        chunk = seqs[start : start + micro_batch_size]
        lp = token_logprobs(model, batch_sequences(chunk, pad_id, device), temperature).cpu()
        out += [lp[i, : len(c)].tolist() for i, (_, c) in enumerate(chunk)]
    return out
