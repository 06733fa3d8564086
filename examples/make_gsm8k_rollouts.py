"""Writes examples/gsm8k_rollouts.jsonl: GSM8K-style rollouts in GRPO groups.

32 word problems x 8 sampled responses.  Responses are correct, wrong,
unformatted (no ``####``), formatted with a thousands comma or a dollar sign,
or exact copies of a sibling (as happens in a GRPO group), so scoring exercises
every branch of the ``gsm8k`` reward and the producer's deduplication.
``extra_info.expected`` is the score verl's strict GSM8K rule gives.
Deterministic: ``python examples/make_gsm8k_rollouts.py`` rewrites the same file.
"""

import json
import random
from pathlib import Path

TEMPLATES = [
    ("{name} has {a} apples and buys {b} more. How many apples does {name} have now?", lambda a, b: a + b),
    ("A box holds {a} pencils. How many pencils are in {b} boxes?", lambda a, b: a * b),
    ("{name} earned ${a} on Monday and spent ${b}. How many dollars are left?", lambda a, b: a - b),
    ("A train travels {a} km every hour for {b} hours. How far does it go in km?", lambda a, b: a * b),
]
NAMES = ["Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana"]


def response(rng: random.Random, steps: str, answer: int, style: str) -> tuple[str, float]:
    if style == "correct":
        return f"{steps} So the answer is {answer}.\n#### {answer}", 1.0
    if style == "comma":
        return f"{steps}\n#### {answer:,}", 1.0
    if style == "dollar":
        return f"{steps}\n#### ${answer}", 0.0  # the regex needs a digit right after '#### '
    if style == "wrong":
        return f"{steps} So the answer is {answer + rng.choice([-2, -1, 1, 3])}.\n#### {answer + rng.choice([-2, -1, 1, 3])}", 0.0
    if style == "unformatted":
        return f"{steps} The answer is {answer}.", 0.0
    if style == "two_answers":  # the last '####' counts
        return f"#### {answer + 1}\nWait, let me recheck. {steps}\n#### {answer}", 1.0
    raise ValueError(style)


def main() -> None:
    rng = random.Random(20261122)
    rows = []
    styles = ["correct", "correct", "comma", "wrong", "wrong", "unformatted", "two_answers", "dollar"]
    for pid in range(32):  # noqa: B007
        template, fn = TEMPLATES[pid % len(TEMPLATES)]
        a, b = rng.randint(12, 999), rng.randint(2, 40)
        if fn(a, b) < 0:
            a, b = b, a
        question = template.format(name=NAMES[pid % len(NAMES)], a=a, b=b)
        answer = fn(a, b)
        steps = f"We combine {a} and {b}: the result is {answer}."
        group = []
        for k, style in enumerate(rng.sample(styles, len(styles))):  # k > 0: a sibling exists
            if k > 0 and rng.random() < 0.25:  # a duplicate sample, as GRPO groups often have
                group.append(group[-1])  # an identical rollout: scored once, by hash
                continue
            text, expected = response(rng, steps, answer, style)
            group.append({
                "prompt": question, "response": text, "ground_truth": str(answer), "data_source": "openai/gsm8k",
                "extra_info": {"problem": pid, "style": style, "expected": expected},
            })
        rows += group
    out = Path(__file__).with_name("gsm8k_rollouts.jsonl")
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} rollouts to {out}")


if __name__ == "__main__":
    main()
