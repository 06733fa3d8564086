"""The ``math`` reward against the labelled fixture, and its error behaviour."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from qworker.rewards.math_answer import score_math

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "math_cases.jsonl"
CASES = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


def test_fixture_is_large_and_documented():
    assert len(CASES) >= 200
    assert len({c["id"] for c in CASES}) == len(CASES)
    assert all(c["why"].strip() for c in CASES)
    categories = {c["category"] for c in CASES}
    for needed in ("boxed", "fraction", "latex_vs_plain", "interval", "set", "units_percent", "negative", "multiple_boxed", "malformed"):
        assert needed in categories
    scores = [c["expected"] for c in CASES]
    assert 0.3 < sum(s > 0 for s in scores) / len(scores) < 0.7  # both outcomes well represented


def test_fixture_agreement_is_total():
    wrong = []
    for c in CASES:
        out = score_math({"response": c["response"], "ground_truth": c["ground_truth"]}, **c.get("params", {}))
        if abs(out["score"] - c["expected"]) > 1e-9:
            wrong.append(f"{c['id']}: got {out['score']} want {c['expected']} ({c['why']}) pred={out['pred']!r}")
    assert not wrong, "\n".join(wrong)


def test_extra_carries_the_prediction():
    out = score_math({"response": r"... so \boxed{\dfrac{3}{4}}", "ground_truth": "0.75"})
    assert out == {"score": 1.0, "pred": r"\dfrac{3}{4}", "source": "boxed", "format_ok": True}


def test_strict_and_bonus():
    plain = {"response": "The answer is 12.", "ground_truth": "12"}
    assert score_math(plain)["score"] == 1.0  # math-verify finds it in the text
    assert score_math(plain, strict=True) == {"score": 0.0, "pred": None, "source": None, "format_ok": False}
    boxed = {"response": r"\boxed{12}", "ground_truth": "12"}
    assert score_math(boxed, format_bonus=0.1)["score"] == pytest.approx(1.1)
    assert score_math(plain, format_bonus=0.1)["score"] == 1.0  # no marker, no bonus


def test_unparsable_gold_is_an_error_not_a_zero():
    row = {"response": r"\boxed{1}", "ground_truth": r"\frac{"}
    with pytest.raises(ValueError, match="cannot parse the ground truth"):
        score_math(row)
    assert score_math(row, bad_gold_score=-1.0)["score"] == -1.0


@pytest.mark.parametrize("gold", [None, {"a": 1}, [], True])
def test_bad_ground_truth_types(gold):
    with pytest.raises(ValueError, match="ground_truth"):
        score_math({"response": "1", "ground_truth": gold})


def test_missing_response():
    with pytest.raises(ValueError, match="'response'"):
        score_math({"ground_truth": "1"})


def test_math_verify_timeout_is_an_explicit_error():
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="math-verify took over 1 s"):
        score_math({"response": r"\boxed{9^{9^{9^{9}}}}", "ground_truth": "3"}, timeout_s=1)
    assert time.monotonic() - t0 < 10


def test_off_the_main_thread_it_still_scores():
    out = {}
    t = threading.Thread(target=lambda: out.update(score_math({"response": r"\boxed{2}", "ground_truth": 2})))
    t.start()
    t.join(60)
    assert out["score"] == 1.0
