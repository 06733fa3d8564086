"""The bundled toy tasks, small enough for a tiny random model to learn in a few dozen GRPO steps on CPU.

**copy** (``make train-demo``): each prompt is ``"copy:D="`` for a digit ``D`` (0-3 by default) and
its ground truth is ``"D"``.  The reward ``toy_digit`` gives 1.0 when the response starts with the
ground truth, 0.1 when it starts with another digit, and 0.0 otherwise.  A random policy over the
tiny vocabulary scores about 0.03 on average; a trained one 1.0.

**repeat** (the learning test): each prompt is ``"<noise>rep:D="`` for a digit ``D`` in 1-3 after
``noise`` random letters, and the answer is ``D`` written ``D`` times (``"2"`` -> ``"22"``), then EOS:
1 to 3 tokens, so the policy must learn when to stop.  The reward ``toy_repeat`` is the mean of

- *content*: the share of positions that match, over the longer of response and answer, and
- *length*: ``1 - |L - len(answer)| / max_new_tokens``, ``L`` the response's length in tokens
  without its EOS (a response that hit the token limit counts all of its tokens),

so 1.0 only for the exact answer followed by EOS.  Lengths come from the payload's ``response_length``
and ``max_response_length`` (tokens): special tokens that the decoded text hides (``<pad>``) count.
A random policy scores about 0.2 (it almost never stops), one that writes the digits but never stops
about 0.55.  The noise makes a held-out file's prompts unseen in training (another ``seed``).

Rewards are registered with qworker, so pool workers score them.  This module imports only qworker
(workers import it to find the rewards), never torch.

    python -m trainer.toy --out out/toy.jsonl [--n 200 --seed 0] [--task repeat --noise 3]
"""

from __future__ import annotations

import argparse
import json
import random
import string
from pathlib import Path

from qworker import reward

__all__ = ["toy_digit", "toy_repeat", "toy_rows", "repeat_rows", "write_toy_dataset"]


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


@reward("toy_repeat")
def toy_repeat(payload: dict) -> dict:
    """The mean of content and length scores of ``payload["response"]`` against ``payload["ground_truth"]``
    (1.0 only for the exact answer then EOS; see the module docstring)."""
    response, gold = payload.get("response"), payload.get("ground_truth")
    if not isinstance(response, str) or gold is None:
        raise ValueError("toy_repeat needs 'response' (str) and 'ground_truth'")
    gold, response = str(gold), response.strip()
    tokens = int(payload.get("response_length") or len(response) + 1)
    limit = int(payload.get("max_response_length") or tokens + 1)
    length = tokens if tokens >= limit else tokens - 1   # at the limit: no EOS to discount
    content = sum(a == b for a, b in zip(response, gold, strict=False)) / max(len(response), length, len(gold), 1)
    length_score = max(0.0, 1.0 - abs(length - len(gold)) / max(limit, len(gold)))
    return {"score": (content + length_score) / 2, "content": content, "length": length_score}


def repeat_rows(n: int, seed: int = 0, noise: int = 3) -> list[dict]:
    """``n`` rows of the repeat task: ``{"prompt": "<noise letters>rep:D=", "ground_truth": D * D}``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        d = rng.choice("123")
        prefix = "".join(rng.choice(string.ascii_lowercase) for _ in range(noise))
        rows.append({"prompt": f"{prefix}rep:{d}=", "ground_truth": d * int(d)})
    return rows


def toy_rows(n: int, seed: int = 0, digits: str = "0123") -> list[dict]:
    """``n`` toy rows ``{"prompt": "copy:D=", "ground_truth": "D"}`` with digits drawn from ``digits``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        d = rng.choice(digits)
        rows.append({"prompt": f"copy:{d}=", "ground_truth": d})
    return rows


def write_toy_dataset(path: str | Path, n: int = 200, seed: int = 0, digits: str = "0123", task: str = "copy",
                      noise: int = 3) -> Path:
    """Write ``toy_rows(n, seed, digits)`` (``task="copy"``) or ``repeat_rows(n, seed, noise)`` (``"repeat"``)
    as JSONL to ``path``; returns the path."""
    if task not in ("copy", "repeat"):
        raise ValueError(f"task: {task!r} is not one of ['copy', 'repeat']")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = toy_rows(n, seed, digits) if task == "copy" else repeat_rows(n, seed, noise)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="write a toy dataset (copy a digit, or repeat a digit D times)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--digits", default="0123", help="copy: the digits drawn")
    ap.add_argument("--task", default="copy", choices=["copy", "repeat"])
    ap.add_argument("--noise", type=int, default=3, help="repeat: random letters before each prompt")
    a = ap.parse_args(argv)
    print(write_toy_dataset(a.out, a.n, a.seed, a.digits, a.task, a.noise))


if __name__ == "__main__":
    main()
