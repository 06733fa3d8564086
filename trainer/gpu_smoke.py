"""GPU smoke test of the trainer: a tiny random model saved locally, 2-3 GRPO steps, the step timeline.

Needs a CUDA GPU and the train extra; the default ``--rollout vllm`` needs vLLM too, ``--rollout hf``
samples with ``transformers`` on the same GPU instead.  Nothing is downloaded (``HF_HUB_OFFLINE=1`` is set):

    python -m trainer.gpu_smoke [--steps 3] [--rollout vllm|hf] [--ray] [--weight-sync auto|inprocess|rpc_bytes|shm_file] [--out DIR]

It saves a tiny Qwen2 (hidden 128, 2 heads of 64: a head size vLLM's attention kernels support) and
the character-level tokenizer with ``save_pretrained``, writes the toy dataset, then trains with
``rollout.backend: vllm`` on ``cuda``: vLLM samples, the policy trains in PyTorch on the same GPU,
and the weights go into vLLM after every step.  Each step prints its timeline line; the last lines
say which weight-sync route ran and whether vLLM's samples changed after the weight updates.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="vLLM smoke test on a tiny random model")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ray", action="store_true", help="place the actors with Ray (colocated on one GPU)")
    ap.add_argument("--weight-sync", default="auto", choices=["auto", "inprocess", "rpc_bytes", "shm_file"])
    ap.add_argument("--rollout", default="vllm", choices=["vllm", "hf"],
                    help="who samples: vLLM (default) or transformers' generate on the same device")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu runs the same steps without a GPU (with --rollout hf), to check the script itself")
    ap.add_argument("--out", default=None, help="working directory (default: a temporary one)")
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        print("gpu_smoke: no CUDA device; this script is for a GPU machine (--device cpu --rollout hf checks it on CPU)",
              file=sys.stderr)
        return 2
    if a.rollout == "vllm":
        if a.device == "cpu":
            print("gpu_smoke: --device cpu needs --rollout hf", file=sys.stderr)
            return 2
        try:
            import vllm  # noqa: F401
        except ImportError:
            print("gpu_smoke: vLLM is not installed here; install it, or run with --rollout hf", file=sys.stderr)
            return 2
    from trainer.config import config_from_dict
    from trainer.loop import GRPOTrainer
    from trainer.tiny import save_tiny_model
    from trainer.toy import write_toy_dataset

    out = a.out or tempfile.mkdtemp(prefix="qworker-gpu-smoke-")
    model = save_tiny_model(os.path.join(out, "tiny-model"), hidden=128, layers=2, heads=2)
    data = write_toy_dataset(os.path.join(out, "toy.jsonl"), n=64)
    cfg = config_from_dict({
        "model": {"path": str(model), "dtype": "bfloat16"},
        "data": {"path": str(data)},
        "rollout": {"backend": a.rollout, "num_generations": 8, "max_new_tokens": 8,
                    "vllm": {"gpu_memory_utilization": 0.2, "enforce_eager": True, "max_model_len": 256, "weight_sync": a.weight_sync}},
        "train": {"steps": a.steps, "prompts_per_step": 8, "micro_batch_size": 64, "lr": 1e-2, "device": a.device},
        "reward": {"name": "toy_digit", "modules": ["trainer.toy"]},
        "qworker": {"producer": {"local_workers": 2, "cache_path": None}},
        "placement": {"backend": "ray" if a.ray else "local"},
        "log": {"dir": os.path.join(out, "run")},
        "checkpoint": {"resume": False},
    })
    where = torch.cuda.get_device_name(0) if a.device == "cuda" else "CPU"
    print(f"gpu_smoke: {where}, torch {torch.__version__}, rollout {a.rollout}, model {model}", flush=True)
    with GRPOTrainer(cfg) as trainer:
        rollout = trainer.actors.rollout
        probe = ["copy:3="]
        before = rollout.call("generate", probe, 4, 4, 0.0, 1.0, 0)
        history = trainer.run()
        after = rollout.call("generate", probe, 4, 4, 0.0, 1.0, 0)
        route = (getattr(getattr(rollout, "obj", None), "weight_sync", "(inside a Ray actor)") if a.rollout == "vllm"
                 else "in process (load_weights)")
    print(f"gpu_smoke: {len(history)} steps; weight sync route: {route}")
    print(f"gpu_smoke: greedy sample before {[c['text'] for c in before[0]][:1]} after {[c['text'] for c in after[0]][:1]}"
          f" -> {'changed' if before != after else 'unchanged (weights may not have reached the sampler)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
