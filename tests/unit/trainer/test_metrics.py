from __future__ import annotations

from trainer.metrics import format_eval, format_line


def _metrics(**over: float) -> dict[str, float]:
    m = {"reward_mean": 0.606, "loss": 0.0005, "lr": 1e-2, "step_s": 0.07, "generate_s": 0.02, "logprobs_s": 0.02,
         "reward_wait_s": 0.0, "update_s": 0.03, "weight_sync_s": 0.0, "rollout_wait_s": 0.0,
         "reward_span_s": 0.01, "reward_hidden_s": 0.008, "reward_hidden_frac": 0.8,
         "entropy": 1.234, "response_len_mean": 3.42, "response_len_max": 8.0, "truncated_frac": 0.25}
    return {**m, **over}


def test_on_policy_line_has_no_rollout_wait():
    assert format_line(40, _metrics()) == (
        "step   40  reward 0.606  loss +0.0005  ent 1.23  len 3.4 (max 8, trunc 25%)  lr 1.00e-02 | step 0.07s = gen 0.02 + logp 0.02 + reward wait 0.00 "
        "+ update 0.03 + sync 0.00 | reward 0.01s, hidden 0.01s (80%)"
    )
    m = _metrics()
    del m["rollout_wait_s"]
    assert "rollout wait" not in format_line(40, m)


def test_off_policy_line_shows_the_rollout_wait_before_the_sync():
    line = format_line(7, _metrics(rollout_wait_s=0.123))
    assert "+ update 0.03 + rollout wait 0.12 + sync 0.00 |" in line


def test_eval_line():
    m = {"eval/mean@4": 0.5625, "eval/pass@4": 0.75, "eval/pass@1": 0.5, "eval/reward/correct": 0.5, "eval/prompts": 32.0,
         "eval/samples": 4.0, "eval/response_len_mean": 3.25, "eval/truncated_frac": 0.125, "eval/s": 0.5, "eval/updates": 20.0}
    assert format_eval(m) == ("eval after 20 steps: mean@4 0.562  pass@4 0.750  pass@1 0.500  correct 0.500 | 32 held-out prompts "
                              "x 4 samples, len 3.2, truncated 12%, 0.50s")
