"""Prompt data: conversational rows rendered with the tokenizer's chat template, max_prompt_length
filtering with a count of what was dropped, and the errors for bad rows."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.contract.trainer.conftest import toy_config  # noqa: E402
from trainer.config import config_from_dict  # noqa: E402
from trainer.data import load_prompts, prepare_rows, read_jsonl  # noqa: E402
from trainer.loop import GRPOTrainer  # noqa: E402
from trainer.rollout_hf import load_tokenizer  # noqa: E402


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_messages_are_rendered_with_the_chat_template(tiny_model, tmp_path):
    tok = load_tokenizer(str(tiny_model))
    rows = [{"messages": [{"role": "system", "content": "be.brief"}, {"role": "user", "content": "copy:3="}], "ground_truth": "3"},
            {"prompt": "copy:1=", "ground_truth": "1"}]
    kept, dropped = prepare_rows(rows, tok, None)
    assert dropped == 0
    assert kept[0]["prompt"] == "<s>be.brief<u>copy:3=<a>"          # trainer.tiny's template, with the generation prompt
    assert kept[0]["messages"] == rows[0]["messages"] and kept[1] == rows[1]
    assert tok.unk_token_id not in tok(kept[0]["prompt"], add_special_tokens=False)["input_ids"]


def test_max_prompt_length_drops_and_counts(tiny_model, tmp_path, capsys):
    rows = [{"prompt": "x" * n, "ground_truth": "1"} for n in (3, 8, 9, 20)] + [
        {"messages": [{"role": "user", "content": "abcd"}], "ground_truth": "2"}]   # "<u>abcd<a>": 10 tokens
    path = write(tmp_path / "d.jsonl", rows)
    kept, dropped = load_prompts(path, str(tiny_model), 8)
    assert [len(r["prompt"]) for r in kept] == [3, 8] and dropped == 3
    assert "2 rows kept, 3 dropped as longer than max_prompt_length 8 tokens" in capsys.readouterr().out
    with pytest.raises(ValueError, match="every row is longer"):
        load_prompts(path, str(tiny_model), 2)


def test_bad_rows_and_a_tokenizer_without_template(tiny_model, tmp_path):
    for bad in [{"prompt": "a"}, {"messages": [], "ground_truth": 1}, {"messages": [{"role": "user"}], "ground_truth": 1},
                {"messages": "hi", "ground_truth": 1}]:
        with pytest.raises(ValueError, match=":1: each line needs"):
            read_jsonl(write(tmp_path / "bad.jsonl", [bad]))
    tok = load_tokenizer(str(tiny_model))
    tok.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        prepare_rows([{"messages": [{"role": "user", "content": "a"}], "ground_truth": 1}], tok, None)


def test_trainer_on_conversational_data_with_a_length_limit(tiny_model, tmp_path, capsys):
    rows = [{"messages": [{"role": "user", "content": f"copy:{d}="}], "ground_truth": str(d)} for d in "0123"] * 4
    rows += [{"messages": [{"role": "user", "content": "copy:1=" + "z" * 40}], "ground_truth": "1"}] * 3   # too long
    data = write(tmp_path / "chat.jsonl", rows)
    cfg = toy_config(tiny_model, data, tmp_path / "run", steps=2, prompts_per_step=4)
    cfg["data"]["max_prompt_length"] = 16
    with GRPOTrainer(config_from_dict(cfg)) as t:
        history = t.run()
        assert all(r["prompt"].startswith("<u>copy:") and r["prompt"].endswith("=<a>") for r in t.sampler.rows)
        assert len(t.sampler.rows) == 16
    assert history[0]["data_dropped_rows"] == 3 and "data_dropped_rows" not in history[1]
    assert "16 rows kept, 3 dropped" in capsys.readouterr().out
