"""Trainer benchmark: the same GRPO steps with a slow LLM-judge reward, scored inline, overlapped, and one-step off-policy.

A tiny random Qwen2 (CPU) trains on the copy-a-digit toy prompts.  The reward is a composite: the
toy's ``toy_digit`` (weight 1, learnable) plus qworker's ``llm_judge`` (weight 0: it only costs time)
against ``qworker mock-judge`` answering each request after ``--latencies`` seconds (capacity 256, and
the judge's limit starts at 64, so a step's answers go out in one wave).  The mock judge's scores are
a hash of the request, nothing a policy could learn, so they are left out of the reward: the reward
curves show what each mode learns per step.  For each latency it runs:

- ``inline``: ReasonRL's order, every reward gathered right after generation, before the log-probs;
- ``overlap``: rewards submitted per group as soon as it is generated, log-probs and backward passes
  run while the judge answers, and the trainer blocks only when no scored group is left to train on;
- ``off-policy``: ``train.off_policy``, step t+1's samples generated (with weights one update old) and
  submitted to the judge on a background thread while step t waits for its rewards and updates.

"GPU work" (generate + log-probs + update + weight sync) and "reward work" (the inline run's wait for
its rewards, ``reward_wait_s``) are the medians measured in the inline run, where nothing overlaps.
The judge answers in a fixed time, so a step's answers come back together; a real judge's heavy
latency tail makes reward work the slowest of a step's answers.  The target for the
overlapped step is max(GPU work, reward work) + 5%.  An on-policy step cannot start scoring before
its first samples exist, and the last group's rewards (submitted when generation ends) must be in
before its backward pass: so the step is bounded below by max(GPU work, generate + reward work +
weight sync), the "on-policy floor" column.  It equals max(GPU work, reward work) + 5% only while the
reward work fits in the log-probs and the updates of the groups already scored; with
``--chunks`` > 1 early groups are scored, and trained on, while later ones are generated.
The off-policy row is not bound by that floor: its rewards are submitted a step earlier.
The first ``--warmup`` steps of each run (pool start, the judge limit's slow start) are not counted
in the times; the reward curves show every step.

Equal threads: every mode's torch work runs on the same ``--torch-cores`` CPUs (the driver thread's
affinity, set after the reward pool has started, so the pool and the judge use every core), with
``--threads`` torch threads.  Off-policy mode's generation thread inherits that affinity, so it shares
those cores with the update instead of taking a core of its own: as on a GPU host, where the rollout
and the update share the GPU.  (An earlier version gave it a free core, which inflated its speed-up.)

On a GPU host, ``--device cuda`` runs the same three modes with the policy and the sampler (``--rollout hf``:
``transformers``' generate; ``vllm`` where it is installed) on the GPU, in bfloat16; its tables go to
docs/bench/trainer_gpu.md.

    python bench/trainer.py [--steps 16] [--latencies 0.2,0.5,1.0] [--hidden 128 --layers 4] [--chunks 4] [--threads 1] [--torch-cores 1]
    python bench/trainer.py --device cuda [--rollout hf|vllm] [--hidden 1024 --layers 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Server, table  # noqa: E402
from trainer.config import config_from_dict  # noqa: E402
from trainer.loop import GRPOTrainer  # noqa: E402
from trainer.tiny import save_tiny_model  # noqa: E402
from trainer.toy import write_toy_dataset  # noqa: E402

PORT = 18611
MODES = ("inline", "overlap", "off-policy")


def pinned(cores: int):
    """A context manager: the calling thread (and the threads it starts) on the first ``cores`` CPUs it may use."""
    import contextlib

    @contextlib.contextmanager
    def cm():
        before = os.sched_getaffinity(0)   # pid 0: the calling thread
        os.sched_setaffinity(0, set(sorted(before)[: max(1, cores)]))
        try:
            yield
        finally:
            os.sched_setaffinity(0, before)

    return cm()


def run(model: Path, data: Path, out: Path, port: int, mode: str, a: argparse.Namespace) -> list[dict]:
    """Train in ``mode`` (inline, overlap or off-policy); the metrics of steps 0 to ``a.steps - 1``.
    Off-policy runs one step more, not counted: a run's last step has no next batch to generate."""
    steps = a.steps + 1 if mode == "off-policy" else a.steps
    cfg = config_from_dict({
        "model": {"path": str(model), "dtype": "bfloat16" if a.device == "cuda" else "auto"},
        "data": {"path": str(data)},
        "rollout": {"num_generations": a.gens, "max_new_tokens": a.max_new_tokens, "chunks": a.chunks, "backend": a.rollout,
                    "vllm": {"gpu_memory_utilization": 0.3, "enforce_eager": True, "max_model_len": 256}},
        "train": {"steps": steps, "prompts_per_step": a.prompts, "micro_batch_size": a.gens, "lr": a.lr, "device": a.device,
                  "overlap": mode != "inline", "off_policy": mode == "off-policy"},
        "reward": {"name": "digit_and_judge", "modules": ["trainer.toy"]},
        "qworker": {
            "producer": {"local_workers": 2, "cache_path": None},
            "rewards": {
                "judge": {"reward": "llm_judge", "params": {
                    "model": "mock-judge", "endpoints": [{"url": f"http://127.0.0.1:{port}/v1/chat/completions"}],
                    "timeout_s": 30, "initial_concurrency": 64, "request": {"max_tokens": 16}}},
                "digit_and_judge": {"components": [{"name": "digit", "reward": "toy_digit", "weight": 1.0},
                                                   {"name": "judge", "reward": "judge", "weight": 0.0}]},
            },
        },
        "log": {"dir": str(out), "print_every": 1000},
        "checkpoint": {"resume": False},
    })
    with GRPOTrainer(cfg) as t, pinned(a.torch_cores):   # the pool has started: only torch's threads are pinned
        history = t.run()
    return history[: a.steps]


def med(rows: list[dict], key: str, warmup: int = 0) -> float:
    return statistics.median(r[key] for r in rows[warmup:])


def curve(rows: list[dict], key: str) -> str:
    return " ".join(f"{r[key]:.2f}" for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--latencies", default="0.2,0.5,1.0", help="seconds per judge answer, comma-separated")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--gens", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--chunks", type=int, default=4, help="rollout.chunks: generation calls per step")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads, in every mode")
    ap.add_argument("--torch-cores", type=int, default=1, help="CPUs the trainer's torch threads may use, in every mode "
                    "(off-policy's generation thread shares them); 1 leaves the other core to the reward pool and judge")
    ap.add_argument("--lr", type=float, default=1e-2, help="the tiny model learns the toy task at 1e-2 within a few dozen steps")
    ap.add_argument("--json", default=None, help="also write the raw per-step metrics here")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the policy and the sampler run")
    ap.add_argument("--rollout", default="hf", choices=["hf", "vllm"], help="who samples (vllm: with --device cuda)")
    a = ap.parse_args()
    if a.rollout == "vllm" and a.device != "cuda":
        ap.error("--rollout vllm needs --device cuda (bench/weight_sync.py measures vLLM on CPU)")
    import importlib.util

    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device here")
    if a.rollout == "vllm" and importlib.util.find_spec("vllm") is None:
        ap.error("--rollout vllm: vLLM is not installed here; use --rollout hf")

    torch.set_num_threads(a.threads)
    work = Path(tempfile.mkdtemp(prefix="qworker-bench-trainer-"))
    model = save_tiny_model(work / "model", hidden=a.hidden, layers=a.layers, heads=4)
    data = write_toy_dataset(work / "toy.jsonl", n=256)
    rows, raw, curves = [], {}, []
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for latency in [float(x) for x in a.latencies.split(",")]:
        judge = Server(PORT, "--capacity", "256", "--latency", str(latency))
        try:
            runs = {mode: run(model, data, work / f"{mode}-{latency}", PORT, mode, a) for mode in MODES}
        finally:
            judge.stop()
        raw[latency] = runs
        inline, w = runs["inline"], a.warmup
        gpu, reward = med(inline, "gpu_s", w), med(inline, "reward_wait_s", w)
        bound = max(gpu, reward)
        floor = max(gpu, med(inline, "generate_s", w) + reward + med(inline, "weight_sync_s", w))
        tail = max(1, a.steps // 4)
        for name, h in runs.items():
            step = med(h, "step_s", w)
            rows.append([
                f"{latency:.2f}", name, f"{step:.2f}", f"{gpu:.2f}", f"{reward:.2f}", f"{bound:.2f}", f"{floor:.2f}",
                f"{step / bound:.2f}x", f"{step / floor:.2f}x", f"{med(inline, 'step_s', w) / step:.2f}x", f"{100 * med(h, 'reward_hidden_frac', w):.0f}%",
                "yes" if step <= 1.05 * bound else "no",
                f"{statistics.mean(r['reward_mean'] for r in h[-tail:]):.2f}", f"{sum(r['step_s'] for r in h):.1f}",
            ])
            curves.append(f"{latency:.2f}  {name:>10}  reward  {curve(h, 'reward_mean')}\n{'':16}  step s  {curve(h, 'step_s')}")
    print(f"\nload average before: {load_before}, after: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    where = (f"on {torch.cuda.get_device_name(0)} ({a.rollout} rollout, bfloat16)" if a.device == "cuda"
             else f"on CPU ({a.threads} torch thread(s) on {a.torch_cores} core(s) in every mode)")
    print(f"GRPO steps {where}: tiny Qwen2 (hidden {a.hidden}, {a.layers} layers), {a.prompts} prompts x "
          f"{a.gens} samples, {a.max_new_tokens} new tokens, {a.chunks} generation chunks, lr {a.lr:g}; reward toy_digit + 0 x llm_judge on the mock judge; "
          f"medians of {a.steps - a.warmup} steps after {a.warmup} warm-up; reward of the last {max(1, a.steps // 4)} steps; total s of all {a.steps}")
    print(table(["judge s/answer", "mode", "step s", "GPU work s", "reward work s", "max(GPU, reward)", "on-policy floor",
                 "step / max", "step / floor", "speed-up vs inline", "reward hidden", "<= max + 5%", "reward (last)", "total s"], rows))
    print(f"\nreward (mean of the step's samples) and step time per step, steps 0-{a.steps - 1}:")
    print("\n".join(curves))
    if a.json:
        Path(a.json).write_text(json.dumps({str(k): v for k, v in raw.items()}, indent=1))


if __name__ == "__main__":
    from bench._common import recorded

    device = argparse.ArgumentParser(add_help=False)
    device.add_argument("--device", default="cpu")
    on = device.parse_known_args()[0].device  # main() checks it; here only to name the page
    with recorded("trainer_gpu" if on == "cuda" else "trainer"):  # the printed tables also go to docs/bench/
        main()
