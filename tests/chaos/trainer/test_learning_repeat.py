"""A learning test that means something: the tiny random model learns the toy *repeat* task
(``trainer.toy``: ``"<letter>rep:D="`` -> ``D`` written ``D`` times, then EOS; answers of 1-3 tokens),
with the KL penalty on, under both loss aggregations, for three seeds each.  The assertions are on the
held-out evaluation (prompts whose letters never occur in training), not on the training reward:
mean@4 rises, pass@4 (the exact answer followed by EOS) rises from 0, and the share of samples that
run into the token limit (no EOS) falls.

Measured (2-core machine, 1 torch thread, 120 steps, lr 3e-3, rewards scored inline so that a seed's run is
reproducible on one machine and package set): held-out mean@4 0.215 before training in every run; after it
0.93 / 0.77 / 0.71 (token, seeds 0-2) and 0.87 / 0.87 / 0.91 (sequence); pass@4 0 before, after 0.75 / 0.67 /
0.38 and 0.63 / 0.63 / 0.63; truncated 91% before, 0-3% after.  Seeds 0-11 of both (24 runs): mean@4 after
0.57-0.99.  At lr 5e-3 one run in twelve collapsed (token seed 2: 0.44, pass@4 0, where an earlier environment had
given it 0.83): a seed's run is reproducible on one machine and package set, not across them, so the
thresholds leave room.  About 90 s per test (three seeds).  Marked ``learning`` (``pytest -m learning``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainer.config import config_from_dict  # noqa: E402
from trainer.loop import GRPOTrainer  # noqa: E402
from trainer.toy import write_toy_dataset  # noqa: E402

SEEDS = (0, 1, 2)
STEPS = 120


@pytest.fixture()
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)   # the other core scores rewards
    yield
    torch.set_num_threads(before)


def repeat_config(model, data, held, log_dir, aggregation: str, seed: int) -> dict:
    return {
        "model": {"path": str(model)},
        "data": {"path": str(data)},
        "eval": {"data": str(held), "k": 4},                     # before training and after it
        "rollout": {"num_generations": 16, "max_new_tokens": 5},   # the longest answer is 3 tokens + EOS
        "train": {"steps": STEPS, "prompts_per_step": 8, "micro_batch_size": 128, "lr": 3e-3, "kl_coef": 0.05,
                  "loss_aggregation": aggregation, "seed": seed,
                  "overlap": False},   # groups in a fixed order: a seed's run is reproducible (arrival order changes rounding)
        "reward": {"name": "toy_repeat", "modules": ["trainer.toy"]},
        "qworker": {"producer": {"local_workers": 1, "cache_path": None}},
        "log": {"dir": str(log_dir), "print_every": 20},
        "checkpoint": {"every": 0, "resume": False},
    }


@pytest.mark.learning
@pytest.mark.timeout(300)
@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_learns_to_repeat_and_stop_on_held_out_prompts(tiny_model, tmp_path, one_thread, aggregation):
    data = write_toy_dataset(tmp_path / "train.jsonl", n=200, seed=0, task="repeat", noise=1)
    held = write_toy_dataset(tmp_path / "held.jsonl", n=24, seed=99, task="repeat", noise=1)
    runs = []
    for seed in SEEDS:
        with GRPOTrainer(config_from_dict(repeat_config(tiny_model, data, held, tmp_path / f"run-{seed}", aggregation, seed))) as t:
            history = t.run()
            before, after = t.eval_history[0], t.eval_history[-1]
        assert history[-1]["kl"] > 0.0
        runs.append((before, after))
        print(f"{aggregation} seed {seed}: mean@4 {before['eval/mean@4']:.3f} -> {after['eval/mean@4']:.3f}, "
              f"pass@4 {before['eval/pass@4']:.3f} -> {after['eval/pass@4']:.3f}, "
              f"truncated {before['eval/truncated_frac']:.2f} -> {after['eval/truncated_frac']:.2f}")
    for before, after in runs:
        assert before["eval/mean@4"] < 0.3 and before["eval/pass@4"] == 0.0 and before["eval/truncated_frac"] > 0.8
        assert after["eval/mean@4"] > before["eval/mean@4"] + 0.25     # measured: +0.35 or more (24 runs)
        assert after["eval/truncated_frac"] < 0.5                        # it learned to stop (EOS)
    assert sum(a["eval/pass@4"] for _, a in runs) / len(runs) > 0.2      # exact answers (measured: 0.60 and 0.63)
    assert max(a["eval/pass@4"] for _, a in runs) >= 0.4
