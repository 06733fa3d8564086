"""The step log's rollout statistics and the unbiased pass@k estimator, against hand-computed values and
brute-force enumeration; the policy's entropy against a direct softmax."""

from __future__ import annotations

import itertools
import math

import pytest

from trainer.stats import batch_stats, component_scores, length_stats, pass_at_k, percentile


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n, c, k", [(n, c, k) for n in range(1, 8) for c in range(n + 1) for k in range(1, n + 1)])
def test_pass_at_k_is_the_probability_over_subsets(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_hand_values_and_checks():
    assert pass_at_k(5, 1, 2) == pytest.approx(1 - math.comb(4, 2) / math.comb(5, 2))   # 0.4
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(200, 1, 100) == pytest.approx(0.5)   # no overflow at large n
    for bad in [(4, 1, 5), (4, 5, 1), (4, 1, 0)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_length_stats_and_percentiles():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0 and percentile([1.0, 2.0, 3.0, 4.0], 90) == 4.0
    s = length_stats([3, 1, 2, 10, 4, 5, 6, 7, 8, 9])
    assert s == {"response_len_mean": 5.5, "response_len_min": 1.0, "response_len_max": 10.0,
                 "response_len_p50": 5.0, "response_len_p90": 9.0}
    assert length_stats([])["response_len_mean"] == 0.0


def test_batch_stats_truncation_zero_variance_and_components():
    groups = [
        [{"completion_ids": [1, 2], "finish": "stop"}, {"completion_ids": [1, 2, 3, 4], "finish": "length"}],
        [{"completion_ids": [1], "finish": "stop"}, {"completion_ids": [5, 6, 7, 8], "finish": "length"}],
        [{"completion_ids": [1, 2, 3], "finish": "stop"}, {"completion_ids": [9], "finish": "stop"}],
    ]
    extras = [{"correct": 1.0, "format": 0.0, "components": {"correct": {"score": 1.0, "weight": 1.0},
                                                             "format": {"score": 0.0, "weight": 0.1}}},
              {"correct": None, "components": {"correct": {"score": None}, "format": {"score": 1.0}}},
              {"head": "1"}]   # not a composite: no components
    s = batch_stats(groups, [[0.7, 0.7], [1.0, 0.0], [0.1, 0.1]], component_scores(extras))
    assert s["truncated_frac"] == pytest.approx(2 / 6)
    assert s["zero_var_group_frac"] == pytest.approx(2 / 3)       # 0.7, 0.7 and 0.1, 0.1: no signal
    assert s["response_len_max"] == 4.0 and s["response_len_min"] == 1.0 and s["response_len_mean"] == pytest.approx(15 / 6)
    assert s["reward/correct"] == 1.0 and s["reward/format"] == 0.5   # the failed component (None) is left out


def test_entropy_matches_a_direct_softmax(tiny_model):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from trainer.logprobs import batch_sequences, token_logprobs

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    seqs = [([5, 6, 7], [8, 9, 1]), ([5, 6], [10])]
    b = batch_sequences(seqs, 0, "cpu")
    ent: list = []
    with torch.no_grad():
        token_logprobs(model, b, 0.7, chunk_tokens=1, entropy=ent)
        logits = model(input_ids=b["ids"], attention_mask=b["attn"], position_ids=b["pos"]).logits[:, -4:-1] / 0.7
    p = torch.softmax(logits.double(), dim=-1)
    direct = -(p * p.log()).sum(-1)
    assert ent[0].shape == (2, 3)
    assert torch.allclose(ent[0].double()[0], direct[0], atol=1e-5)
    assert torch.allclose(ent[0].double()[1, :1], direct[1, :1], atol=1e-5)   # row 2 has one completion token
