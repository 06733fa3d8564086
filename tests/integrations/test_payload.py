"""The field mapping shared by the adapters (no framework needed)."""

from __future__ import annotations

import pytest

from qworker.integrations._outcome import choose
from qworker.integrations._payload import from_openrlhf, from_trl, last_text, plain, split_query


def test_plain_makes_values_encodable() -> None:
    np = pytest.importorskip("numpy")
    value = {"a": np.int64(3), "b": np.array([1.5, 2.5]), "c": (1, "x"), 4: {"d": np.str_("s")}, "obj": object(), "n": None}
    assert plain(value) == {"a": 3, "b": [1.5, 2.5], "c": [1, "x"], "4": {"d": "s"}, "n": None}


def test_last_text_of_messages() -> None:
    chat = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "q2"}]}]
    assert last_text(chat, "user") == "q2"
    assert last_text(chat, "assistant") == "a1"
    assert last_text("plain", "user") == "plain"


def test_split_query() -> None:
    assert split_query("PROMPT answer", "PROMPT") == " answer"
    assert split_query("other answer", "PROMPT") == "other answer"
    assert from_openrlhf("P r", "P", 3) == {"response": " r", "ground_truth": 3, "prompt": "P"}


def test_trl_ground_truth_column() -> None:
    cols = {"solution": ["4"], "extra_info": [{"i": 0}]}
    assert from_trl(["q"], ["a"], [[1, 2]], cols, max_response_length=8) == [
        {"response": "a", "ground_truth": "4", "prompt": "q", "extra_info": {"i": 0}, "response_length": 2, "max_response_length": 8}
    ]
    with pytest.raises(KeyError, match="answer_col"):
        from_trl(["q"], ["a"], None, cols, ground_truth_column="answer_col")


def test_choose_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QWORKER_REWARD", raising=False)
    assert choose() == ("math", None)
    monkeypatch.setenv("QWORKER_REWARD", "gsm8k")
    assert choose() == ("gsm8k", None)
    assert choose("format", {"score": 2}) == ("format", {"score": 2})
    assert choose("format", per_sample={"qworker_reward": "tag_count", "qworker_params": {"ordered": False}}) == (
        "tag_count", {"ordered": False})
    with pytest.raises(TypeError):
        choose("format", [1])
