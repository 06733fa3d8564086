from __future__ import annotations

import pytest

from qworker.rewards.format import format_match, tag_count


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("<think>a\nb</think><answer>1</answer>", True),
        ("  <think>a</think>\n\n<answer>1</answer>\n", True),
        ("<think>a</think>", False),
        ("<answer>1</answer><think>a</think>", False),
        ("preamble <think>a</think><answer>1</answer>", False),
        ("<think>a</think><answer>1</answer> trailing", False),
    ],
)
def test_default_layout(text, ok):
    assert format_match({"response": text}) == {"score": float(ok), "matched": ok}


def test_custom_pattern_and_score():
    out = format_match({"response": "Answer: 42"}, pattern=r"Answer: \d+", score=0.5)
    assert out["score"] == 0.5


def test_invalid_pattern_names_it():
    with pytest.raises(ValueError, match="invalid pattern"):
        format_match({"response": "x"}, pattern="(")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("<think>a</think><answer>1</answer>", 4),
        ("<think>a</think>", 2),
        ("<think>a</think><think>b</think><answer>1</answer>", 0),  # a repeated tag stops the ordered count
        ("</think><think>a<answer>1</answer>", 1),  # out of order after the first
        ("nothing", 0),
    ],
)
def test_tag_count(text, found):
    out = tag_count({"response": text})
    assert out == {"score": found / 4, "found": found}


def test_tag_count_unordered():
    assert tag_count({"response": "</answer><answer></think><think>"}, ordered=False)["found"] == 4
