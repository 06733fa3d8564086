"""The field mapping shared by the adapters (no framework needed)."""

from __future__ import annotations

import pytest

from qworker.integrations._outcome import choose
from qworker.integrations._payload import PromptMismatch, from_openrlhf, from_trl, last_text, plain, split_query


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
    assert split_query("anything", "") == "anything"  # no prompt: the whole query is the response
    assert from_openrlhf("P r", "P", 3) == {"response": " r", "ground_truth": 3, "prompt": "P"}


@pytest.mark.parametrize("query, prompt, response", [
    # the case: the decoded query has a space after <s> the prompt lacks
    ("<s> Example: \\boxed{5}. Now solve: 2+3? I do not know.", "<s>Example: \\boxed{5}. Now solve: 2+3?", " I do not know."),
    # left padding and a chat template decoded with its special tokens
    ("<pad><pad><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n42<|im_end|>",
     "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "\n42<|im_end|>"),
    # a BOS the prompt lacks; the prompt ends with special tokens, which end it in the query too
    ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n 7",
     "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", "\n\n 7"),
    # decoded with skip_special_tokens: the prompt's special tokens are gone, the text and whitespace differ
    ("user\nWhat is 2+3?\nassistant\n5", "<|im_start|>user\nWhat is  2+3?<|im_end|>\n<|im_start|>assistant\n", "\n5"),
])
def test_a_query_is_split_as_openrlhf_decodes_it(query, prompt, response) -> None:
    assert split_query(query, prompt) == response


def test_a_query_that_does_not_start_with_its_prompt_is_never_scored_silently(caplog) -> None:
    with pytest.raises(PromptMismatch, match="does not start with its prompt.*--whole-query"):
        split_query("other answer \\boxed{5}", "PROMPT \\boxed{5}")
    with pytest.raises(PromptMismatch):
        from_openrlhf("2+3? 5", "Now solve: 2+3?", "5")  # a shorter query: the prompt's start is missing
    with caplog.at_level("WARNING", logger="qworker.integrations"):
        assert split_query("other answer", "PROMPT", whole_query=True) == "other answer"  # opt-in, and logged
    assert "scoring the whole query" in caplog.text


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


def test_an_adapter_refuses_a_module_function_reward_that_does_not_import_before_anything_starts(monkeypatch):
    from qworker import QworkerError
    from qworker.integrations import _client
    from qworker.integrations._outcome import check_reward

    monkeypatch.delenv("QWORKER_CONNECT", raising=False)
    monkeypatch.delenv("QWORKER_CONFIG", raising=False)
    monkeypatch.setattr(_client, "_client", None)
    for name in ("nosuch.module:fn", "qworker.rewards.math_answer:nope"):
        with pytest.raises(QworkerError, match="does not import here"):
            check_reward(name, None, where="QworkerReward")
    check_reward("math", None, where="QworkerReward")
