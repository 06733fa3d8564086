"""``qworker-train --config configs/grpo.yaml [--set train.lr=1e-6 ...]``: train with the bundled GRPO trainer.

Prints one line per step (reward, loss, the step's timeline), a line per held-out evaluation (``eval:``
section) and, at the end, the mean reward of the first and last steps and the held-out evaluation
before and after training.  Exit status 0 on success, 2 for a bad config (including one the rollout
engine cannot run, found at start: a head size vLLM's CPU attention lacks, a prompt too long for its
``max_model_len``) or a missing ``train`` extra (torch, transformers, ...: one line naming
``pip install 'qworker-rl[train]'``), 130 on Ctrl-C.
"""

from __future__ import annotations

import os
import sys

from qworker import __version__
from qworker.cli.args import Parser, guard

__all__ = ["main"]


_TRAIN_EXTRA = ("torch", "transformers", "ray", "peft")  # setup.cfg's train extra


def main(argv: list[str] | None = None) -> int:
    return guard("qworker-train")(_main)(argv)


def _main(argv: list[str] | None) -> int:
    ap = Parser(prog="qworker-train", description="GRPO training with rewards on a qworker pool")
    ap.add_argument("--config", required=True, help="a YAML config (see configs/grpo.yaml)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key, e.g. --set train.steps=10 (repeatable; the value is YAML)")
    ap.add_argument("--no-resume", action="store_true", help="start from step 0 even if a checkpoint exists")
    ap.add_argument("--version", action="version", version=f"qworker-train {_version()}")
    a = ap.parse_args(argv)
    try:
        from trainer.config import ConfigurationError, load_config
        from trainer.loop import GRPOTrainer
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in _TRAIN_EXTRA:
            raise
        print(f"qworker-train: needs {exc.name}, which is not installed: pip install 'qworker-rl[train]'", file=sys.stderr)
        return 2

    try:
        cfg = load_config(a.config, a.overrides)
    except (ConfigurationError, OSError) as exc:
        print(f"qworker-train: {exc}", file=sys.stderr)
        return 2
    if a.no_resume:
        cfg.checkpoint.resume = False
    os.makedirs(cfg.log.dir, exist_ok=True)
    try:
        trainer = GRPOTrainer(cfg)
    except ConfigurationError as exc:   # found at start, before the first step: what the engine cannot run
        print(f"qworker-train: {exc}", file=sys.stderr)
        return 2
    with trainer:
        history = trainer.run()
        evals = trainer.eval_history
    if history:
        first, last = history[0], history[-1]
        hidden = sum(h["reward_hidden_s"] for h in history)
        span = sum(h["reward_span_s"] for h in history)
        print(f"mean reward: first step ({first['step']}) {first['reward_mean']:.3f}, last step ({last['step']}) {last['reward_mean']:.3f}")
        print(f"reward time hidden behind GPU work: {hidden:.2f} s of {span:.2f} s ({100 * hidden / span if span else 0:.0f}%)")
    if len(evals) >= 2:
        k = cfg.eval.k
        before, after = evals[0], evals[-1]
        print(f"held-out evaluation ({int(before['eval/prompts'])} prompts x {int(before['eval/samples'])} samples): "
              f"mean@{k} {before[f'eval/mean@{k}']:.3f} -> {after[f'eval/mean@{k}']:.3f}, pass@{k} {before[f'eval/pass@{k}']:.3f} -> {after[f'eval/pass@{k}']:.3f} "
              f"(after {int(before['eval/updates'])} and {int(after['eval/updates'])} steps)")
    return 0


def _version() -> str:
    return __version__


if __name__ == "__main__":
    sys.exit(main())
