from __future__ import annotations

import time

import pytest

from qworker.rewards._extract import final_answer, last_answer_tag, last_boxed, last_hash_answer


@pytest.mark.parametrize(
    ("text", "answer", "source"),
    [
        (r"so \boxed{\frac{1}{2}} done", r"\frac{1}{2}", "boxed"),
        (r"\boxed {3}", "3", "boxed"),
        (r"\boxed 5$ and more", "5", "boxed"),
        (r"\fbox{7}", "7", "boxed"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}", "boxed"),  # escaped braces do not count
        (r"\boxed{1} then \boxed{2", "1", "boxed"),  # an unclosed last \boxed{ is not an answer
        (r"<answer>5</answer> then \boxed{4}", "4", "boxed"),  # the marker that starts last wins
        (r"\boxed{4} then <answer>5</answer>", "5", "answer_tag"),
        (r"<answer>\boxed{9}</answer>", "9", "boxed"),
        ("steps\n#### 1,234\nthanks", "1,234", "hash"),
        ("#### 1\nno, wait\n#### 2", "2", "hash"),
    ],
)
def test_final_answer(text, answer, source):
    found = final_answer(text)
    assert found is not None and (found.text, found.source) == (answer, source)


@pytest.mark.parametrize("text", ["no marker at all", r"\boxed", r"\boxed{unclosed", "<answer>open", "####   \n", ""])
def test_no_answer(text):
    assert final_answer(text) is None


def test_each_marker_alone():
    assert last_boxed(r"a \boxed{x} b \fbox{y}").text == "y"
    assert last_answer_tag("<answer>a</answer><answer>b</answer>").text == "b"
    assert last_answer_tag("<answer>a</answer><answer>open").text == "a"
    assert last_hash_answer("#### 7").text == "7"


def test_linear_on_huge_and_hostile_inputs():
    t0 = time.perf_counter()
    assert final_answer("a" * 1_000_000 + r"\boxed{42}").text == "42"
    assert final_answer(r"\boxed{" * 200_000) is None  # 200k unclosed: only the last few are tried
    assert final_answer("{" * 500_000 + r"\boxed{1}" + "}" * 500_000).text == "1"
    assert time.perf_counter() - t0 < 5  # generous: these take ~0.1 s; quadratic work would take minutes
