"""Per-token log-probabilities of completions under a causal LM: one implementation, used by the policy
actor (old, reference and current log-probs) and by the CPU rollout actor (the sampling policy's
log-probs in ``train.off_policy`` mode), so both compute them with the same batching and numerics.

A sequence is ``(prompt_ids, completion_ids)``.  Batches are laid out left-padded prompt then
right-padded completion, with explicit position ids, so every completion starts at the same column.
Log-probs are in nats, of the distribution at the sampling ``temperature`` (logits / temperature).

Memory: the model is asked for the logits of the last ``c_max + 1`` positions only (``logits_to_keep``,
where its ``forward`` takes it; every current Hugging Face causal LM does), not the prompt's, and the
float32 log-softmax over the vocabulary is taken ``CHUNK_TOKENS`` completion positions at a time.
With gradient each chunk is recomputed in the backward pass (``torch.utils.checkpoint``), so what is
kept is the model-dtype logits of the completion, never a float32 ``[n, tokens, vocab]`` copy: at a
152k vocabulary, 8 sequences of 2k tokens, that copy alone was ~10 GB (plus the prompt's share).
"""

from __future__ import annotations

import inspect

import torch
from torch.utils.checkpoint import checkpoint

__all__ = ["CHUNK_TOKENS", "Seq", "batch_sequences", "token_logprobs", "sequence_logprobs"]

CHUNK_TOKENS = 256  # completion positions per float32 log-softmax

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


def _takes_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether the transformers model (under a peft wrapper, which passes keywords on) takes ``logits_to_keep``."""
    get = getattr(model, "get_base_model", None)
    base = get() if callable(get) else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def _chunk_logp(logits: torch.Tensor, targets: torch.Tensor, inv_temperature: float) -> torch.Tensor:
    x = logits.float() * inv_temperature
    return x.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)


@torch.no_grad()
def _chunk_entropy(logits: torch.Tensor, inv_temperature: float) -> torch.Tensor:
    logp = torch.log_softmax(logits.float() * inv_temperature, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def token_logprobs(model: torch.nn.Module, b: dict[str, torch.Tensor], temperature: float,
                   chunk_tokens: int = CHUNK_TOKENS, entropy: list[torch.Tensor] | None = None) -> torch.Tensor:
    """``[sequences, c_max]`` log-probs of the completion tokens of batch ``b`` (garbage where ``mask`` is 0).

    The logits of position ``j`` predict token ``j + 1``: the completion's tokens, the last ``c_max``
    columns, are predicted by the ``c_max`` columns before the last one.  With ``entropy`` (a list),
    the entropy (nats, at ``temperature``, no gradient) of the policy's distribution at each of those
    positions is appended to it, ``[sequences, c_max]``, computed chunk by chunk like the log-probs."""
    p_max, c_max = int(b["p_max"]), int(b["c_max"])
    kwargs = {"logits_to_keep": c_max + 1} if _takes_logits_to_keep(model) else {}
    logits = model(input_ids=b["ids"], attention_mask=b["attn"], position_ids=b["pos"], **kwargs).logits
    logits = logits[:, -(c_max + 1) : -1, :]
    targets = b["ids"][:, p_max : p_max + c_max]
    inv_t = 1.0 / max(temperature, 1e-6)
    parts: list[torch.Tensor] = []
    ent: list[torch.Tensor] = []
    for s in range(0, c_max, max(1, chunk_tokens)):
        e = min(c_max, s + max(1, chunk_tokens))
        if logits.requires_grad:
            parts.append(checkpoint(_chunk_logp, logits[:, s:e], targets[:, s:e], inv_t, use_reentrant=False))
        else:
            parts.append(_chunk_logp(logits[:, s:e], targets[:, s:e], inv_t))
        if entropy is not None:
            ent.append(_chunk_entropy(logits[:, s:e].detach(), inv_t))
    if entropy is not None:
        entropy.append(torch.cat(ent, dim=1))
    return torch.cat(parts, dim=1)


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
