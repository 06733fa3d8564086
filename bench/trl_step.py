"""TRL benchmark: a GRPO step on CPU with a slow LLM-judge reward, TRL's own async reward vs qworker's overlapped path.

A real ``trl.GRPOTrainer`` (the recipe of ``tests/contract/integrations/tiny.py``: a Qwen2 built from a config, a
word-level tokenizer built locally, ``use_cpu=True``, ``HF_HUB_OFFLINE=1``, nothing downloaded) trains
with ``beta`` > 0, so each step runs generation, the reference model's forward pass, the reward, then
the loss's forward and backward.  The reward is a judge: ``qworker mock-judge`` in its own process,
answering each request after ``--latency`` seconds (0.5), with room for every request at once
(capacity 256).  The same steps run with:

  no judge                     a reward that returns at once: the step's own work, the floor
  TRL async reward (aiohttp)   what a user writes today: an ``async def`` reward that posts every
                               completion to the judge at once (aiohttp, one request each, the same
                               prompt as qworker's ``llm_judge`` sends) and gathers them
  qworker inline               ``GRPOTrainer`` with ``QworkerReward("llm_judge")`` (the synchronous form)
  qworker overlapped           ``QworkerGRPOTrainer`` with the same reward: it submits the judge requests as
                               soon as the completions are decoded, so they run during the reference
                               model's forward pass, and TRL's reward call only gathers

qworker runs an embedded ``Producer`` (``--workers`` 2, result cache off, so every step asks the judge).
Step time is from the trainer's ``on_step_begin`` to ``on_step_end``; "reward wait" is the time the step
spent inside the reward call; "ref fwd" the reference model's forward pass (the window the overlap can
hide the judge in).  Medians over ``--steps`` steps after ``--warmup``.  Each ``--models`` size
(HIDDENxLAYERS) runs every row: a bigger model has a longer reference forward pass.  Torch gets ``--threads`` (1)
threads, which leaves the second core to the judge and the workers, as a GPU host would.

    python bench/trl_step.py                    # 6 steps (1 warm-up), judge 0.5 s, models 256x4 and 384x6
    python bench/trl_step.py --quick            # 3 steps, a smaller model: a smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Server, free_port, table  # noqa: E402
from tests.contract.integrations.tiny import WORDS, tokenizer  # noqa: E402


def save_model(path: Path, hidden: int, layers: int, tok: Any) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=len(WORDS), hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=max(2, hidden // 32), num_key_value_heads=1, max_position_embeddings=256,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None, tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(str(path))


# -- the reward functions -------------------------------------------------------
class Timer:
    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = {}

    def add(self, key: str, seconds: float) -> None:
        self.current[key] = self.current.get(key, 0.0) + seconds


def instant_reward(timer: Timer):
    def no_judge(prompts, completions, **kw):
        return [float(len(c) % 3) for c in completions]

    return no_judge


def aiohttp_reward(timer: Timer, url: str, max_tokens: int):
    """The async reward a TRL user writes for an LLM judge: every completion posted at once."""
    import aiohttp

    from qworker.rewards.llm_judge import DEFAULT_TEMPLATE, render

    pattern = re.compile(r"Score:\s*([-+]?\d+(?:\.\d+)?)")

    async def judge(prompts, completions, ground_truth=None, **kw):
        t0 = time.perf_counter()
        truths = ground_truth or [""] * len(completions)

        async def one(session, prompt, completion, truth):
            content = render(DEFAULT_TEMPLATE, {"prompt": prompt, "response": completion, "ground_truth": truth}, "")
            body = {"model": "mock-judge", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
            async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=60)) as r:
                r.raise_for_status()
                reply = (await r.json())["choices"][0]["message"]["content"]
            return float(pattern.findall(reply)[-1]) / 10.0

        async with aiohttp.ClientSession() as session:
            scores = await asyncio.gather(*(one(session, p, c, t) for p, c, t in zip(prompts, completions, truths, strict=True)))
        timer.add("reward_wait", time.perf_counter() - t0)
        return list(scores)

    return judge


def qworker_reward(timer: Timer, params: dict):
    from qworker.integrations.trl import QworkerReward

    class TimedQworkerReward(QworkerReward):
        def __call__(self, *a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return super().__call__(*a, **kw)
            finally:
                timer.add("reward_wait", time.perf_counter() - t0)

    return TimedQworkerReward("llm_judge", params=params, name="judge")


# -- one run ----------------------------------------------------------------------
def run(mode: str, model_dir: Path, out: Path, reward: Any, timer: Timer, a: argparse.Namespace) -> list[dict[str, float]]:
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from qworker.integrations.trl import QworkerGRPOTrainer

    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            timer.current = {"t0": time.perf_counter()}

        def on_step_end(self, args, state, control, **kw):
            cur = timer.current
            cur["step"] = time.perf_counter() - cur.pop("t0")
            timer.steps.append(cur)

    base = QworkerGRPOTrainer if mode == "overlapped" else GRPOTrainer

    class Timed(base):  # type: ignore[valid-type, misc]
        def _generate(self, prompts):
            t0 = time.perf_counter()
            try:
                return super()._generate(prompts)
            finally:
                timer.add("generate", time.perf_counter() - t0)

        def _get_per_token_logps_and_entropies(self, model, *args, **kw):
            t0 = time.perf_counter()
            try:
                return super()._get_per_token_logps_and_entropies(model, *args, **kw)
            finally:
                if not torch.is_grad_enabled():
                    timer.add("ref_fwd", time.perf_counter() - t0)

    tok = tokenizer()
    rows = [("what is 2+2 ?", "4"), ("what is 3+3 ?", "6")] * (a.steps * a.batch)
    data = Dataset.from_list([{"prompt": q, "ground_truth": t} for q, t in rows])
    cfg = GRPOConfig(
        output_dir=str(out), use_cpu=True, bf16=False, report_to="none", use_vllm=False, max_steps=a.steps, logging_steps=1,
        per_device_train_batch_size=a.batch, num_generations=a.gens, max_completion_length=a.max_new_tokens, beta=a.beta,
        save_strategy="no", dataloader_num_workers=0, seed=0, learning_rate=1e-4, disable_tqdm=True,
    )
    timer.steps = []
    trainer = Timed(model=str(model_dir), reward_funcs=[reward], args=cfg, train_dataset=data, processing_class=tok, callbacks=[Steps()])
    trainer.remove_callback(PrinterCallback)  # TRL's per-step log dicts
    trainer.remove_callback(ProgressCallback)
    trainer.train()
    if mode == "overlapped":
        assert reward.prefetch_hits == a.steps, f"prefetched {reward.prefetch_hits} of {a.steps} steps"
    return timer.steps[a.warmup:]


def med(steps: list[dict[str, float]], key: str) -> float:
    return statistics.median(s.get(key, 0.0) for s in steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per judge answer")
    ap.add_argument("--steps", type=int, default=6, help="training steps per run, warm-up included")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--models", default="256x4,384x6", help="model sizes, HIDDENxLAYERS, comma-separated")
    ap.add_argument("--batch", type=int, default=32, help="completions per step (per_device_train_batch_size)")
    ap.add_argument("--gens", type=int, default=8, help="num_generations")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--beta", type=float, default=0.04, help="KL coefficient: > 0 makes TRL run the reference model")
    ap.add_argument("--workers", type=int, default=2, help="qworker local workers")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--skip", action="append", default=[], help="skip a row: none, async, inline, overlapped")
    ap.add_argument("--quick", action="store_true", help="3 steps, one model of hidden 64 and 2 layers, 16 completions of 16 tokens")
    a = ap.parse_args()
    if a.quick:
        a.steps, a.models, a.batch, a.max_new_tokens = 3, "64x2", 16, 16
    import logging

    import torch
    import trl

    from qworker import Producer
    from qworker.integrations import use_client

    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.set_num_threads(a.threads)
    work = Path(tempfile.mkdtemp(prefix="qworker-bench-trl-"))
    models = [tuple(int(x) for x in m.split("x")) for m in a.models.split(",")]
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    params = {"model": "mock-judge", "endpoints": [{"url": url}], "timeout_s": 30, "initial_concurrency": 64, "request": {"max_tokens": 16}}
    print(f"TRL {trl.__version__} GRPO steps on CPU ({a.threads} torch thread(s)), load average {os.getloadavg()[0]:.2f} at start", flush=True)

    plan = [
        ("none", "no judge (instant reward)", "plain", instant_reward),
        ("async", "TRL async reward (aiohttp)", "plain", lambda t: aiohttp_reward(t, url, 16)),
        ("inline", "qworker inline (QworkerReward)", "plain", lambda t: qworker_reward(t, params)),
        ("overlapped", "qworker overlapped (QworkerGRPOTrainer)", "overlapped", lambda t: qworker_reward(t, params)),
    ]
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    requests: dict[tuple[str, str], int] = {}
    judge = Server(port, "--capacity", "256", "--latency", str(a.latency))
    try:
        with Producer(local_workers=a.workers, cache_max_entries=0) as p:
            use_client(p)
            try:
                p.wait_for_workers(a.workers, timeout=60)
                for hidden, layers in models:
                    model = f"{hidden}x{layers}"
                    model_dir = work / f"model-{model}"
                    save_model(model_dir, hidden, layers, tokenizer())
                    for key, label, mode, make in plan:
                        if key in a.skip:
                            continue
                        timer = Timer()
                        before = judge.stats()["served"]
                        t0 = time.perf_counter()
                        steps = results[model, label] = run(mode, model_dir, work / f"{model}-{key}", make(timer), timer, a)
                        requests[model, label] = judge.stats()["served"] - before
                        shown = ", ".join(f"{s['step']:.2f}" for s in steps)
                        print(f"  {model:<7} {label:<40} step {med(steps, 'step'):.2f} s   ({time.perf_counter() - t0:.0f} s for the run; "
                              f"steps counted: {shown})", flush=True)
            finally:
                use_client(None)
    finally:
        judge.stop()

    print(f"\nTRL {trl.__version__} GRPO steps on CPU ({a.threads} torch thread(s)): tiny Qwen2 (HIDDENxLAYERS), {a.batch} completions a step "
          f"({a.batch // a.gens} prompts x {a.gens}), up to {a.max_new_tokens} new tokens, beta {a.beta}; judge: qworker mock-judge at "
          f"{a.latency} s per answer; medians of {a.steps - a.warmup} steps after {a.warmup} warm-up")
    rows = []
    for (model, label), steps in results.items():
        base, floor = results.get((model, plan[1][1])), results.get((model, plan[0][1]))
        step = med(steps, "step")
        judged = key_of(plan, label) != "none"
        rows.append([
            label, model, f"{step:.2f}", f"{med(steps, 'generate'):.2f}", f"{med(steps, 'ref_fwd'):.2f}",
            f"{med(steps, 'reward_wait'):.2f}" if judged else "-",
            f"{step - med(floor, 'step'):+.2f}" if floor else "-",
            f"{med(base, 'step') / step:.2f}x" if base and judged else "-",
            f"{requests[model, label] / a.steps:.0f}" if judged else "-",
        ])
    print(table(["reward", "model", "step s", "generate s", "ref fwd s", "reward wait s", "step - no judge s", "speed-up vs TRL async",
                 "judge requests / step"], rows))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def key_of(plan: list, label: str) -> str:
    return next(k for k, lab, *_ in plan if lab == label)


if __name__ == "__main__":
    from bench._common import recorded

    with recorded("trl_step"):  # the printed tables also go to docs/bench/trl_step.md
        main()
