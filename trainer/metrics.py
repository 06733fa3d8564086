"""Where step metrics go: one line on stdout, a JSONL file, and TensorBoard / Weights & Biases when installed.

``MetricsSink.log(step, metrics)`` writes every sink; a sink whose package is missing is skipped with
one notice on stderr, never an error.  The stdout line shows the reward, the policy's entropy, the
response lengths and the step's timeline; a record with held-out evaluation metrics (``eval/`` keys,
``evaluate.py``) also gets the evaluation's line, whatever ``print_every`` says.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional

__all__ = ["MetricsSink", "format_line", "format_eval"]


def format_line(step: int, m: dict[str, Any]) -> str:
    """The stdout line: step, reward, loss, then the timeline in seconds and the hidden reward share.

    ``rollout wait`` (``train.off_policy``: the driver blocked on the next batch) shows only when the
    step spent any time in it, so on-policy lines do not carry a column that is always 0."""
    rollout_wait = m.get("rollout_wait_s") or 0.0
    return (
        f"step {step:4d}  reward {m.get('reward_mean', 0.0):.3f}  loss {m.get('loss', 0.0):+.4f}  "
        f"ent {m.get('entropy', 0.0):.2f}  len {m.get('response_len_mean', 0.0):.1f} (max {m.get('response_len_max', 0.0):.0f}, "
        f"trunc {100 * m.get('truncated_frac', 0.0):.0f}%)  lr {m.get('lr', 0.0):.2e} | step {m['step_s']:.2f}s = gen {m['generate_s']:.2f} + logp {m['logprobs_s']:.2f} "
        f"+ reward wait {m['reward_wait_s']:.2f} + update {m['update_s']:.2f}"
        + (f" + rollout wait {rollout_wait:.2f}" if rollout_wait > 0 else "")
        + f" + sync {m['weight_sync_s']:.2f}"
        f" | reward {m['reward_span_s']:.2f}s, hidden {m['reward_hidden_s']:.2f}s ({100 * m['reward_hidden_frac']:.0f}%)"
    )


def format_eval(m: dict[str, Any]) -> str:
    """The stdout line of an evaluation's metrics (the ``eval/`` keys of ``m``)."""
    k = next(key.split("@")[1] for key in m if key.startswith("eval/mean@"))
    comps = "".join(f"  {key[len('eval/reward/'):]} {v:.3f}" for key, v in m.items() if key.startswith("eval/reward/"))
    return (f"eval after {int(m['eval/updates'])} steps: mean@{k} {m[f'eval/mean@{k}']:.3f}  pass@{k} {m[f'eval/pass@{k}']:.3f}  "
            f"pass@1 {m['eval/pass@1']:.3f}{comps} | {int(m['eval/prompts'])} held-out prompts x {int(m['eval/samples'])} samples, "
            f"len {m['eval/response_len_mean']:.1f}, truncated {100 * m['eval/truncated_frac']:.0f}%, {m['eval/s']:.2f}s")


class MetricsSink:
    """Writes metrics to stdout (every ``print_every`` steps), ``jsonl_path``, TensorBoard and W&B."""

    def __init__(
        self,
        jsonl_path: Optional[str] = None,
        tensorboard_dir: Optional[str] = None,
        wandb_project: Optional[str] = None,
        wandb_config: Optional[dict[str, Any]] = None,
        print_every: int = 1,
        resume: bool = False,
        wandb_run_id: Optional[str] = None,
    ) -> None:
        """``wandb_run_id``: the W&B run to continue (a resumed run passes the one its checkpoint kept);
        None starts a new run.  ``self.wandb_run_id`` is the run's id, for the checkpoint (None without W&B)."""
        self.print_every = max(1, print_every)
        self._jsonl = None
        if jsonl_path:
            os.makedirs(os.path.dirname(os.path.abspath(jsonl_path)), exist_ok=True)
            self._jsonl = open(jsonl_path, "a" if resume else "w", encoding="utf-8")
        self._tb = None
        if tensorboard_dir:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(tensorboard_dir)
            except ImportError:
                print("metrics: tensorboard is not installed; skipping it", file=sys.stderr)
        self._wandb = None
        self.wandb_run_id: Optional[str] = None
        if wandb_project:
            try:
                import wandb

                self._wandb = wandb.init(project=wandb_project, config=wandb_config or {}, id=wandb_run_id, resume="allow")
                self.wandb_run_id = self._wandb.id
            except ImportError:
                print("metrics: wandb is not installed; skipping it", file=sys.stderr)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if any(k.startswith("eval/") for k in metrics):
            print(format_eval(metrics), flush=True)
        if "step_s" in metrics and step % self.print_every == 0:
            print(format_line(step, metrics), flush=True)
        if self._jsonl:
            self._jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
            self._jsonl.flush()
        numeric = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self._tb:
            for k, v in numeric.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb:
            self._wandb.log(numeric, step=step)

    def close(self) -> None:
        if self._jsonl:
            self._jsonl.close()
        if self._tb:
            self._tb.close()
        if self._wandb:
            self._wandb.finish()
