"""vLLM weight sync: each route's time per sync on several model sizes, to set ``rollout.vllm.weight_sync: auto``.

For every model size and every route, a child process builds a tiny random Qwen2 of that size
(``trainer.tiny``, head size 32 or 64: sizes vLLM's CPU attention has kernels for), starts a fresh
vLLM engine on it (``trainer.vllm_sync.measure``: one engine per process, as an in-process engine
must be), times ``--syncs`` syncs of perturbed weights, and checks that the engine's greedy output then
equals Hugging Face ``generate`` on the same weights (a route that loads nothing is caught).  The
table gives the median sync per route and each route's median over ``inprocess``'s in the same run.
Needs vLLM (``.venv/vllm``; ``make test-vllm`` builds it).

    VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 .venv/vllm/bin/python bench/weight_sync.py \
        [--sizes 64x2,256x4,512x8] [--routes inprocess,shm_file] [--syncs 5]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import table  # noqa: E402


def _heads(hidden: int) -> int:
    """Heads of 64 (32 below hidden 128): head sizes vLLM's CPU attention supports."""
    return max(2, hidden // 64) if hidden >= 128 else max(1, hidden // 32)


def _one(route: str, hidden: int, layers: int, syncs: int) -> None:
    import tempfile

    from trainer.rollout_vllm import _checkpoint_shapes
    from trainer.tiny import save_tiny_model
    from trainer.vllm_sync import measure

    with tempfile.TemporaryDirectory() as d:
        model_dir = str(save_tiny_model(d + "/model", hidden=hidden, layers=layers, heads=_heads(hidden)))
        params = sum(math.prod(shape) for shape in _checkpoint_shapes(model_dir).values())
        print("RESULT " + json.dumps({"params": params, **measure(route, model_dir, syncs)}), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64x2,256x4,512x8", help="HIDDENxLAYERS, comma-separated")
    ap.add_argument("--routes", default="inprocess,shm_file")
    ap.add_argument("--syncs", type=int, default=5)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # child: ROUTE:HIDDENxLAYERS
    a = ap.parse_args(argv)
    if a.one:
        route, size = a.one.split(":")
        hidden, layers = (int(x) for x in size.split("x"))
        _one(route, hidden, layers, a.syncs)
        return
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    rows = []
    for size in a.sizes.split(","):
        results = {}
        for route in a.routes.split(","):
            out = subprocess.run([sys.executable, __file__, "--one", f"{route}:{size}", "--syncs", str(a.syncs)],
                                 env=env, capture_output=True, text=True, timeout=900)
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                print(f"{route} {size}: failed (exit {out.returncode}): {out.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
            r = json.loads(line.removeprefix("RESULT "))
            results[route] = r
            print(json.dumps({"size": size, **r}), flush=True)
        base = results.get("inprocess", {}).get("sync_median_s")
        for route, r in results.items():
            med = float(r["sync_median_s"])
            rows.append([f"{size} ({r['params'] / 1e6:.2f} M params)", route, f"{med * 1000:.0f}",
                         " ".join(f"{x * 1000:.0f}" for x in r["sync_all_s"]),
                         f"{med / base:.2f}" if base else "-", r["engine_start_s"], r["greedy_matches_hf"]])
    print()
    print(f"vLLM weight sync per route, median of {a.syncs} syncs (fresh engine per route and size)")
    print(table(["model (hidden x layers)", "route", "sync ms", "all syncs ms", "x inprocess", "engine start s", "greedy = HF"], rows))


if __name__ == "__main__":
    from _common import recorded

    with recorded("weight_sync", unless_flag="--one"):  # the printed tables also go to docs/bench/weight_sync.md
        main()
