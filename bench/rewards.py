"""Reward-library benchmark: math scoring inline, on 1 and 2 local workers, and
through ``multiprocessing.Pool.map``.

The workload is N distinct ``math`` tasks (so no run is answered from the
cache or shared between duplicates), in GRPO groups of 8 samples per problem:
GSM8K- and MATH-style responses of a few hundred characters with a boxed
answer (integers, fractions, decimals against fractions, LaTeX expressions,
intervals, sets), about half of them correct.
Every system scores the same payloads with the same function,
``qworker.rewards.math_answer.score_math`` (math-verify), on its process's main
thread.  Each system is warmed up first (worker start-up and math-verify's
import are not timed), then timed over ``--repeats`` runs of fresh payloads;
the median is reported.  It also checks that every system gave the same scores.

    python bench/rewards.py                  # 10,000 tasks per run, 3 runs each
    python bench/rewards.py --tasks 2000 --repeats 1
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import table  # noqa: E402

from qworker import Producer  # noqa: E402
from qworker.rewards.math_answer import _parse_gold, score_math  # noqa: E402

FILLER = ("First we set up the quantities. Then we simplify step by step, checking each line. "
          "Substituting back confirms the value. ")


def make_payloads(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 8 == 0:  # a new problem; its group of 8 samples shares the ground truth
            a, b = rng.randint(2, 999), rng.choice([2, 3, 4, 5, 8, 10])
            kind = (i // 8) % 6
        if kind == 0:
            gold, right, wrong = str(a * b), str(a * b), str(a * b + 1)
        elif kind == 1:
            gold, right, wrong = rf"\frac{{{a}}}{{{b}}}", rf"\dfrac{{{a}}}{{{b}}}", rf"\frac{{{a + 1}}}{{{b}}}"
        elif kind == 2:
            gold, right, wrong = rf"\frac{{{a}}}{{{b if b in (2, 4, 5, 8, 10) else 2}}}", f"{a / (b if b in (2, 4, 5, 8, 10) else 2):g}", f"{a + 0.5:g}"
        elif kind == 3:
            gold, right, wrong = rf"{a}\sqrt{{{b}}}", rf"\sqrt{{{a * a * b}}}", rf"{a}\sqrt{{{b + 1}}}"
        elif kind == 4:
            gold, right, wrong = rf"[{a}, {a + b})", rf"[{a},{a + b})", rf"({a}, {a + b})"
        else:
            gold, right, wrong = rf"\{{{a}, {b}\}}", rf"\{{{b}, {a}\}}", rf"\{{{a}, {b + 1}\}}"
        answer = right if rng.random() < 0.5 else wrong
        text = FILLER * rng.randint(1, 4) + f"So the answer is $\\boxed{{{answer}}}$. (sample {seed}-{i})"
        out.append({"response": text, "ground_truth": gold})
    return out


def score_one(payload: dict) -> float:
    return score_math(payload)["score"]


def run_inline(payloads: list[dict]) -> list[float]:
    return [score_one(p) for p in payloads]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n, repeats = args.tasks, args.repeats
    print(f"reward benchmark: {n} math scorings per run, {repeats} runs per system, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    batches = {r: make_payloads(n, seed=r) for r in range(repeats)}
    warm = make_payloads(200, seed=10_000)
    rates: dict[str, list[float]] = {}
    scores: dict[str, list[float]] = {}

    def timed(system: str, run) -> None:
        for r in range(repeats):
            t0 = time.perf_counter()
            got = run(batches[r])
            rates.setdefault(system, []).append(n / (time.perf_counter() - t0))
            if r == 0:
                scores[system] = got
        runs = ", ".join(f"{x:,.0f}" for x in rates[system])
        print(f"  {system:<22} {statistics.median(rates[system]):>8,.0f} tasks/s   runs: {runs}", flush=True)

    run_inline(warm)
    timed("inline (1 process)", run_inline)
    for workers in (1, 2):
        with Producer(local_workers=workers, cache_max_entries=1) as p:
            p.map("math", warm, timeout=600)

            def through(payloads: list[dict], p: Producer = p) -> list[float]:
                results = p.map("math", payloads, timeout=600)
                assert all(x.ok for x in results), next(x.error for x in results if not x.ok)
                return [x.score for x in results]

            timed(f"qworker, {workers} worker{'s' if workers > 1 else ''}", through)
    _parse_gold.cache_clear()  # forked children must not inherit the inline runs' parsed ground truths
    with mp.get_context("fork").Pool(2) as pool:
        pool.map(score_one, warm)
        timed("mp.Pool(2).map", lambda payloads: pool.map(score_one, payloads, chunksize=64))

    reference = scores["inline (1 process)"]
    for system, got in scores.items():
        assert got == reference, f"{system} disagrees with inline scoring"
    med = {s: statistics.median(r) for s, r in rates.items()}
    base = med["qworker, 1 worker"]
    print(f"\nmath scoring, tasks/s (median of {repeats}); every system gave the same {n} scores ({sum(reference) / n:.0%} correct)")
    print(table(
        ["system", "tasks/s", "vs inline", "vs qworker 1 worker"],
        [[s, f"{m:,.0f}", f"{m / med['inline (1 process)']:.2f}x", f"{m / base:.2f}x"] for s, m in med.items()],
    ))


if __name__ == "__main__":
    from _common import recorded

    with recorded("rewards"):  # the printed tables also go to docs/bench/rewards.md
        main()
