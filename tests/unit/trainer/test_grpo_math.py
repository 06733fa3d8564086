"""GRPO's arithmetic against hand-computed values: advantages, clipped loss and its bounds, KL, aggregation."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from trainer.grpo import STD_EPS, aggregate, clipped_policy_loss, group_advantages, kl_k3  # noqa: E402


def rows(t):
    return [[round(x, 6) for x in r] for r in t.tolist()]


REWARDS = [[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0], [0.0, 1.0, 2.0, 3.0]]


def test_raw_advantage_is_the_reward():
    assert rows(group_advantages(torch.tensor(REWARDS), "raw")) == REWARDS


def test_grpo_advantage_uses_group_mean_and_sample_std():
    adv = group_advantages(torch.tensor(REWARDS), "grpo")
    # group 1: mean 0.5, sample std sqrt(4 * 0.25 / 3) = 0.577350 -> +-0.866025
    s1 = math.sqrt(1 / 3)
    assert adv[0].tolist() == pytest.approx([0.5 / (s1 + STD_EPS), -0.5 / (s1 + STD_EPS), -0.5 / (s1 + STD_EPS), 0.5 / (s1 + STD_EPS)])
    assert adv[0, 0].item() == pytest.approx(0.866025, abs=1e-5)
    # group 2: all equal -> 0, not NaN
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]
    # group 3: mean 1.5, sample std sqrt(5/3) = 1.290994
    assert adv[2].tolist() == pytest.approx([-1.161895, -0.387298, 0.387298, 1.161895], abs=1e-5)


def test_grpo_no_std_advantage_is_centred_only():
    assert rows(group_advantages(torch.tensor(REWARDS), "grpo_no_std")) == [
        [0.5, -0.5, -0.5, 0.5], [0.0, 0.0, 0.0, 0.0], [-1.5, -0.5, 0.5, 1.5]]


def test_grpo_needs_two_samples_and_modes_are_checked():
    with pytest.raises(ValueError, match="num_generations >= 2"):
        group_advantages(torch.tensor([[1.0]]), "grpo")
    with pytest.raises(ValueError, match="unknown advantage mode"):
        group_advantages(torch.tensor([[1.0, 0.0]]), "ppo")


def _loss(ratio: float, adv: float, left: float = 0.2, right: float = 0.28):
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, clipped = clipped_policy_loss(logp, torch.zeros(1, 1), torch.tensor([adv]), left, right)
    loss.sum().backward()
    return loss.item(), clipped.item(), logp.grad.item()


@pytest.mark.parametrize(
    "ratio, adv, loss, clipped, has_grad",
    [
        (1.5, 1.0, -1.28, 1.0, False),   # A > 0, ratio above 1 + right: capped at 1.28, no gradient
        (1.5, -1.0, 1.5, 0.0, True),     # A < 0, ratio above: the unclipped (worse) term is kept
        (0.5, 1.0, -0.5, 0.0, True),     # A > 0, ratio below 1 - left: unclipped (worse) term kept
        (0.5, -1.0, 0.8, 1.0, False),    # A < 0, ratio below 1 - left: floored at 0.8, no gradient
        (1.1, 2.0, -2.2, 0.0, True),     # inside the trust region
        (0.9, -2.0, 1.8, 0.0, True),
    ],
)
def test_clipped_loss_hand_values(ratio, adv, loss, clipped, has_grad):
    got_loss, got_clipped, grad = _loss(ratio, adv)
    assert got_loss == pytest.approx(loss, abs=1e-6)
    assert got_clipped == clipped
    assert (abs(grad) > 0) == has_grad


def test_clip_bounds_are_asymmetric():
    # A > 0: the objective never rewards ratios above 1 + right (0.28), however high
    assert [_loss(r, 1.0)[0] for r in (1.28, 1.3, 2.0, 10.0)] == pytest.approx([-1.28] * 4)
    assert _loss(1.27, 1.0)[0] == pytest.approx(-1.27)
    # A < 0: never rewards ratios below 1 - left (0.8)
    assert [_loss(r, -1.0)[0] for r in (0.8, 0.79, 0.5, 0.01)] == pytest.approx([0.8] * 4)
    assert _loss(0.81, -1.0)[0] == pytest.approx(0.81)
    # a different pair moves the bounds
    assert _loss(2.0, 1.0, left=0.1, right=0.5)[0] == pytest.approx(-1.5)
    assert _loss(0.5, -1.0, left=0.1, right=0.5)[0] == pytest.approx(0.9)
    with pytest.raises(ValueError):
        _loss(1.0, 1.0, left=1.0)


def test_kl_k3():
    lp = torch.tensor([[math.log(0.5), math.log(0.3)]])
    ref = torch.tensor([[math.log(0.25), math.log(0.3)]])
    # d = ln(0.25/0.5) = -ln 2: exp(d) - d - 1 = 0.5 + 0.693147 - 1 = 0.193147; equal log-probs: 0
    assert kl_k3(lp, ref).tolist()[0] == pytest.approx([0.193147, 0.0], abs=1e-6)


PER_TOKEN = [[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [5.0, 7.0, 0.0]]
MASK = [[1, 1, 1], [1, 0, 0], [1, 1, 0]]


def test_token_aggregation():
    num, den = aggregate(torch.tensor(PER_TOKEN), torch.tensor(MASK), "token")
    # (1 + 2 + 3 + 4 + 5 + 7) / 6 tokens
    assert (num.item(), den) == (22.0, 6.0)
    assert num.item() / den == pytest.approx(22 / 6)


def test_sequence_aggregation():
    num, den = aggregate(torch.tensor(PER_TOKEN), torch.tensor(MASK), "sequence")
    # per-sequence means 2, 4, 6 -> (2 + 4 + 6) / 3 sequences
    assert (num.item(), den) == (12.0, 3.0)


@pytest.mark.parametrize("mode", ["token", "sequence"])
def test_micro_batches_add_up_to_the_whole(mode):
    t, m = torch.tensor(PER_TOKEN), torch.tensor(MASK)
    whole_num, whole_den = aggregate(t, m, mode)
    a_num, a_den = aggregate(t[:1], m[:1], mode)
    b_num, b_den = aggregate(t[1:], m[1:], mode)
    assert (a_num + b_num).item() / (a_den + b_den) == pytest.approx(whole_num.item() / whole_den)


def test_empty_sequence_is_not_counted_and_modes_are_checked():
    num, den = aggregate(torch.tensor([[1.0, 1.0], [5.0, 5.0]]), torch.tensor([[1, 1], [0, 0]]), "sequence")
    assert (num.item(), den) == (1.0, 1.0)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate(torch.tensor(PER_TOKEN), torch.tensor(MASK), "batch")


@pytest.mark.parametrize("mode", ["grpo", "grpo_no_std"])
@pytest.mark.parametrize("value", [0.7, 0.1, 0.3, 1 / 3, 2.2, -0.9])
def test_a_group_of_equal_non_binary_rewards_has_advantage_exactly_zero(mode, value):
    # float32 rounding of the mean once gave [0.7] * 8 an advantage of +0.056 on every sample
    adv = group_advantages(torch.tensor([[value] * 8, [0.0, 1.0] * 4]), mode)
    assert adv[0].tolist() == [0.0] * 8
    assert adv[1].abs().min().item() > 0.4


def test_dr_grpo_aggregation_divides_by_a_constant_per_sequence():
    num, den = aggregate(torch.tensor(PER_TOKEN), torch.tensor(MASK), "dr_grpo", max_tokens=4)
    # (1 + 2 + 3 + 4 + 5 + 7) / (3 sequences * 4 tokens): a sequence's length does not rescale its tokens
    assert (num.item(), den) == (22.0, 12.0)
    short = aggregate(torch.tensor([[2.0, 0.0]]), torch.tensor([[1, 0]]), "dr_grpo", max_tokens=4)
    long = aggregate(torch.tensor([[2.0, 2.0]]), torch.tensor([[1, 1]]), "dr_grpo", max_tokens=4)
    assert short[0].item() / short[1] == 0.5 and long[0].item() / long[1] == 1.0   # token mode: 2.0 both
    a_num, a_den = aggregate(torch.tensor(PER_TOKEN)[:1], torch.tensor(MASK)[:1], "dr_grpo", max_tokens=4)
    b_num, b_den = aggregate(torch.tensor(PER_TOKEN)[1:], torch.tensor(MASK)[1:], "dr_grpo", max_tokens=4)
    assert (a_num + b_num).item() / (a_den + b_den) == pytest.approx(22 / 12)
    with pytest.raises(ValueError, match="max_tokens"):
        aggregate(torch.tensor(PER_TOKEN), torch.tensor(MASK), "dr_grpo")
