"""The policy's numerics: KL padding cannot produce NaN gradients, old log-probs are the dropout-free
sampling policy's, and log-probs are computed over the completion only, in chunks, with the same values."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainer.logprobs import batch_sequences, token_logprobs  # noqa: E402
from trainer.policy import PolicyActor  # noqa: E402

SEQS = [([5, 6, 7], [8, 9, 1]), ([5, 6], [10]), ([7, 7, 7, 7], [11, 12]), ([6], [13, 14, 15, 1])]


def _items(policy: PolicyActor, advantages=(1.0, -0.5, 0.25, -1.0)) -> list[dict]:
    lp = policy.logprobs(SEQS)
    return [{"prompt_ids": p, "completion_ids": c, "advantage": a, "old_logp": o, "ref_logp": r}
            for (p, c), a, o, r in zip(SEQS, advantages, lp["old"], lp["ref"] or [None] * 4, strict=True)]


def test_kl_on_padded_sequences_gives_finite_gradients(tiny_model):
    # at temperature 0.001 the pad slots' log-probs are far below -88.7, where exp(0 - logp) is inf in float32
    policy = PolicyActor(str(tiny_model), kl_coef=0.1, temperature=0.001, micro_batch_size=4, max_grad_norm=0.0)
    b = batch_sequences(SEQS, policy.pad_id, "cpu")
    with torch.no_grad():
        lp = token_logprobs(policy.model, b, 0.001)
    assert float(lp[b["mask"] == 0].min()) < -88.8   # the case that overflowed
    s = policy.accumulate(_items(policy))
    assert math.isfinite(s["loss_sum"]) and math.isfinite(s["kl_sum"])
    assert s["kl_sum"] == pytest.approx(0.0, abs=1e-6)   # policy == reference: only real tokens count
    grads = [p.grad for p in policy.model.parameters() if p.grad is not None]
    assert grads and all(bool(torch.isfinite(g).all()) for g in grads)


def test_old_logprobs_are_deterministic_and_the_rollouts_with_lora_dropout(tiny_model):
    pytest.importorskip("peft")
    from trainer.rollout_hf import HFRollout

    lora = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.5, "target_modules": ["q_proj", "v_proj"]}
    policy = PolicyActor(str(tiny_model), lora=lora, lr=5e-2, micro_batch_size=4)
    policy.optimizer_step(policy.accumulate(_items(policy))["denominator"], 5e-2)   # a non-zero adapter
    first, second = policy.logprobs(SEQS)["old"], policy.logprobs(SEQS)["old"]
    assert first == second                               # no dropout in the sampling policy's log-probs
    rollout = HFRollout(str(tiny_model))
    rollout.load_weights(policy.get_weights())            # the adapter merged, as the rollout samples with it
    for a, b in zip(rollout.logprobs(SEQS, 1.0, 4), first, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    assert policy.model.training                          # back in train mode for the update


class _LmHeadWidths:
    def __init__(self, model: torch.nn.Module) -> None:
        self.widths: list[int] = []
        model.get_output_embeddings().register_forward_hook(lambda _m, _i, out: self.widths.append(out.shape[1]))


def _reference_logprobs(model: torch.nn.Module, b: dict, temperature: float) -> torch.Tensor:
    """The plain computation over the whole sequence, as a check on the economical one."""
    p_max, c_max = int(b["p_max"]), int(b["c_max"])
    logits = model(input_ids=b["ids"], attention_mask=b["attn"], position_ids=b["pos"]).logits
    logits = logits[:, p_max - 1 : p_max - 1 + c_max, :].float() / temperature
    targets = b["ids"][:, p_max : p_max + c_max]
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def test_logprobs_cover_the_completion_only_in_chunks_with_the_same_values_and_gradients(tiny_model):
    policy = PolicyActor(str(tiny_model))
    model = policy.model
    long_prompts = [([5 + i % 20] * 40, c) for i, (_, c) in enumerate(SEQS)]   # prompts much longer than completions
    b = batch_sequences(long_prompts, policy.pad_id, "cpu")
    widths = _LmHeadWidths(model)
    lp = token_logprobs(model, b, 0.7, chunk_tokens=1)   # one position per chunk
    assert widths.widths == [int(b["c_max"]) + 1]         # the lm head ran on the completion's positions only, not 44
    ref = _reference_logprobs(model, b, 0.7)
    assert torch.allclose(lp, ref, atol=1e-5)
    mask = b["mask"]
    (lp * mask).sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (_reference_logprobs(model, b, 0.7) * mask).sum().backward()
    for g, r in zip(got, (p.grad for p in model.parameters()), strict=True):
        assert torch.allclose(g, r, atol=1e-5)
