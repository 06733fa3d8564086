"""Time the vLLM rollout's weight-sync routes on the tiny model: engine start, then syncs, per route.

Each route gets a fresh engine (one at a time); after the timed syncs the engine's greedy output is
checked against Hugging Face ``generate`` on the same (perturbed) weights, so a route that "syncs"
without loading anything is caught.  Needs vLLM (``.venv/vllm``, ``make test-vllm`` builds it).

    VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 python -m trainer.vllm_sync [--routes inprocess,rpc_bytes,shm_file]

``bench/weight_sync.py`` runs ``measure`` over several model sizes, one engine per process, and
prints the table that ``weight_sync: auto``'s size rule comes from.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch

from trainer.rollout_vllm import ROUTES, VllmRollout
from trainer.tiny import save_tiny_model

PROMPTS = ["copy:1=", "copy:2=", "12+3=", "abc"]


def _perturbed(model_dir: str, scale: float, seed: int) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()}


def _hf_greedy(model_dir: str, state: dict[str, torch.Tensor], max_new: int) -> list[list[int]]:
    from trainer.rollout_hf import HFRollout

    hf = HFRollout(model_dir, dtype="float32")
    hf.load_weights(state)
    return [g[0]["completion_ids"] for g in hf.generate(PROMPTS, 1, max_new, temperature=0.0)]


def measure(route: str, model_dir: str, syncs: int = 5) -> dict[str, object]:
    t0 = time.perf_counter()
    rollout = VllmRollout(model_dir, dtype="float32", max_model_len=256, weight_sync=route)
    start_s = time.perf_counter() - t0
    times = []
    state: dict[str, torch.Tensor] = {}
    for i in range(syncs):
        state = _perturbed(model_dir, 0.05, seed=i)
        t = time.perf_counter()
        rollout.load_weights(state)
        times.append(time.perf_counter() - t)
    got = [g[0]["completion_ids"] for g in rollout.generate(PROMPTS, 1, 12, temperature=0.0)]
    same = got == _hf_greedy(model_dir, state, 12)
    del rollout
    return {"route": route, "engine_start_s": round(start_s, 1), "sync_median_s": round(statistics.median(times), 4),
            "sync_all_s": [round(x, 4) for x in times], "greedy_matches_hf": same}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routes", default=",".join(ROUTES))
    ap.add_argument("--syncs", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2, help="vLLM's CPU attention has no kernel for head_dim 16 in float32")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        model_dir = str(save_tiny_model(d + "/model", hidden=a.hidden, layers=a.layers, heads=a.heads))
        for route in a.routes.split(","):
            print(json.dumps(measure(route, model_dir, a.syncs)), flush=True)


if __name__ == "__main__":
    main()
