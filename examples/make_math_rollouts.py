"""Writes examples/math_rollouts.jsonl: reasoning-style GSM8K rollouts in GRPO groups.

24 word problems x 8 sampled responses, in the ``<think>...</think><answer>...</answer>``
layout an R1-style model is trained towards, with the slips such a model
makes: answers boxed outside the tags, wrong answers, no answer marker at all,
decimals where the ground truth is a fraction, thinking that runs into the
overlong buffer, and exact duplicates within a group.

Each row carries ``response_length`` (whitespace-separated words, standing in
for tokens) and ``max_response_length`` (512), and ``extra_info.expected``: the
score of the ``math_shaped`` composite in ``configs/rewards.yaml``, worked out
here from how each response was built (not by running the rewards)::

    math (1 or 0) + 0.1 * format (1 or 0) + overlong penalty (DAPO, buffer 128)

Deterministic: ``python examples/make_math_rollouts.py`` rewrites the same file.
"""

import json
import random
from fractions import Fraction
from pathlib import Path

MAX_LEN, BUFFER = 512, 128
NAMES = ["Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana"]
TEMPLATES = [
    ("{name} has {a} marbles and wins {b} more. How many marbles does {name} have?", lambda a, b: Fraction(a + b)),
    ("A crate holds {a} oranges. How many oranges are in {b} crates?", lambda a, b: Fraction(a * b)),
    ("{name} pours {a} liters of juice equally into {b} bottles. How many liters are in each bottle?", lambda a, b: Fraction(a, b)),
]
STYLES = ["tags", "tags", "tags_decimal", "boxed_only", "wrong", "unmarked", "overlong", "overlong_wrong"]


def latex(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"\\frac{{{x.numerator}}}{{{x.denominator}}}"


def decimal(x: Fraction) -> str:
    return f"{x.numerator / x.denominator:g}"


def overlong_penalty(words: int) -> float:
    exceed = words - (MAX_LEN - BUFFER)
    return -min(max(exceed / BUFFER, 0.0), 1.0)


def build(rng: random.Random, steps: str, ans: Fraction, style: str) -> tuple[str, float, float]:
    """(response, math score, format score) for one sampled response."""
    wrong = ans + rng.choice([-3, -1, 1, 2])
    if style == "tags":
        return f"<think>\n{steps}\n</think>\n<answer>The answer is $\\boxed{{{latex(ans)}}}$.</answer>", 1.0, 1.0
    if style == "tags_decimal":  # 7/4 written as 1.75: math-verify knows they are equal
        return f"<think>\n{steps}\n</think>\n<answer>\\boxed{{{decimal(ans)}}}</answer>", 1.0, 1.0
    if style == "boxed_only":  # right answer, but the layout is missing
        return f"{steps}\nSo the answer is $\\boxed{{{latex(ans)}}}$.", 1.0, 0.0
    if style == "wrong":
        return f"<think>\n{steps}\nHmm, I think I mis-added.\n</think>\n<answer>\\boxed{{{latex(wrong)}}}</answer>", 0.0, 1.0
    if style == "unmarked":  # no marker: the math reward falls back to the last number of the text
        return f"{steps}\nThe answer is {decimal(ans)}", 1.0, 0.0
    if style in ("overlong", "overlong_wrong"):
        filler = " ".join(rng.choice(["let", "me", "check", "that", "again", "carefully", "once", "more"]) for _ in range(rng.randint(330, 500)))
        final = ans if style == "overlong" else wrong
        return f"<think>\n{steps}\n{filler}\n</think>\n<answer>\\boxed{{{latex(final)}}}</answer>", float(style == "overlong"), 1.0
    raise ValueError(style)


def main() -> None:
    rng = random.Random(1122)
    rows = []
    for pid in range(24):
        template, fn = TEMPLATES[pid % len(TEMPLATES)]
        a, b = rng.randint(12, 99), rng.choice([2, 4, 5, 8])
        if fn(a, b).denominator == 1 and pid % 3 == 2:
            a += 1  # the sharing problems should have fractional answers
        ans = fn(a, b)
        question = template.format(name=NAMES[pid % len(NAMES)], a=a, b=b)
        steps = f"The numbers are {a} and {b}. Working it out step by step gives {latex(ans)}."
        group = []
        for k, style in enumerate(rng.sample(STYLES, len(STYLES))):
            if k > 0 and rng.random() < 0.2:  # an identical sample, as GRPO groups often have
                group.append(group[-1])
                continue
            text, math_score, format_score = build(rng, steps, ans, style)
            words = len(text.split())
            expected = math_score + 0.1 * format_score + overlong_penalty(words)
            group.append({
                "prompt": question, "response": text, "ground_truth": latex(ans), "data_source": "openai/gsm8k",
                "response_length": words, "max_response_length": MAX_LEN,
                "extra_info": {"problem": pid, "style": style, "expected": round(expected, 6)},
            })
        rows += group
    out = Path(__file__).with_name("math_rollouts.jsonl")
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} rollouts to {out}")


if __name__ == "__main__":
    main()
