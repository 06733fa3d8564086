"""The policy actor: gradient accumulation over micro-batches equals one big batch, and weights sync."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainer.policy import PolicyActor  # noqa: E402
from trainer.rollout_hf import HFRollout  # noqa: E402


def _items(policy: PolicyActor) -> list[dict]:
    seqs = [([5, 6, 7], [8, 9, 1]), ([5, 6], [10]), ([7, 7, 7, 7], [11, 12]), ([6], [13, 14, 15, 1])]
    lp = policy.logprobs(seqs)["old"]
    return [{"prompt_ids": p, "completion_ids": c, "advantage": a, "old_logp": o}
            for (p, c), a, o in zip(seqs, [1.0, -0.5, 0.25, -1.0], lp, strict=True)]


@pytest.mark.parametrize("aggregation", ["token", "sequence", "dr_grpo"])
def test_micro_batches_give_the_full_batch_gradient(tiny_model, aggregation):
    def grads(micro: int) -> list:
        policy = PolicyActor(str(tiny_model), loss_aggregation=aggregation, micro_batch_size=micro, max_grad_norm=0.0, max_new_tokens=5)
        items = _items(policy)
        denom = 0.0
        for i in range(0, len(items), micro):
            denom += policy.accumulate(items[i : i + micro])["denominator"]
        return [p.grad.clone() / denom for p in policy.model.parameters()], denom

    full, d_full = grads(4)
    split, d_split = grads(1)
    assert d_full == d_split == {"token": 10.0, "sequence": 4.0, "dr_grpo": 4 * 5.0}[aggregation]
    for a, b in zip(full, split, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_step_changes_weights_and_sync_copies_them(tiny_model):
    policy = PolicyActor(str(tiny_model), lr=1e-2, max_grad_norm=1.0)
    rollout = HFRollout(str(tiny_model))
    before = {k: v.clone() for k, v in rollout.model.state_dict().items()}
    s = policy.accumulate(_items(policy))
    out = policy.optimizer_step(s["denominator"], lr=1e-2)
    assert out["grad_norm"] > 0
    rollout.load_weights(policy.get_weights())
    after = rollout.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(torch.equal(after[k], v) for k, v in policy.model.state_dict().items())
