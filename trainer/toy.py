"""The bundled toy task: copy a digit.  A tiny random model can learn it in a few dozen GRPO steps on CPU.

Each prompt is ``"copy:D="`` for a digit ``D`` (0-3 by default) and its ground truth is ``"D"``.
The reward ``toy_digit`` (registered with qworker, so pool workers score it) gives 1.0 when the
response starts with the ground truth, 0.1 when it starts with another digit, and 0.0 otherwise.  A
random policy over the tiny vocabulary scores about 0.03 on average; a trained one 1.0.

This module imports only qworker (workers import it to find the reward), never torch.

    python -m trainer.toy --out out/toy.jsonl [--n 200 --seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from qworker import reward

__all__ = ["toy_digit", "toy_rows", "write_toy_dataset"]


@reward("toy_digit")
def toy_digit(payload: dict, other_digit: float = 0.1) -> dict:
    """1.0 if ``payload["response"]`` starts with ``payload["ground_truth"]``, ``other_digit`` if with another digit, else 0."""
    response, gold = payload.get("response"), payload.get("ground_truth")
    if not isinstance(response, str) or gold is None:
        raise ValueError("toy_digit needs 'response' (str) and 'ground_truth'")
    gold = str(gold)
    head = response.lstrip()[:1]
    score = 1.0 if head == gold else (other_digit if head.isdigit() else 0.0)
    return {"score": score, "head": head}


def toy_rows(n: int, seed: int = 0, digits: str = "0123") -> list[dict]:
    """``n`` toy rows ``{"prompt": "copy:D=", "ground_truth": "D"}`` with digits drawn from ``digits``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        d = rng.choice(digits)
        rows.append({"prompt": f"copy:{d}=", "ground_truth": d})
    return rows


def write_toy_dataset(path: str | Path, n: int = 200, seed: int = 0, digits: str = "0123") -> Path:
    """Write ``toy_rows(n, seed, digits)`` as JSONL to ``path``; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in toy_rows(n, seed, digits):
            f.write(json.dumps(row) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="write the copy-a-digit toy dataset")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--digits", default="0123")
    a = ap.parse_args(argv)
    print(write_toy_dataset(a.out, a.n, a.seed, a.digits))


if __name__ == "__main__":
    main()
