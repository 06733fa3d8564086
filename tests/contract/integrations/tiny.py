"""A tokenizer built locally with the ``tokenizers`` library: nothing is downloaded."""

from __future__ import annotations

WORDS = [
    "<pad>", "<eos>", "<unk>", "<|user|>", "<|assistant|>",
    "what", "is", "2+2", "3+3", "?", "the", "answer", "\\boxed{4}", "\\boxed{5}", "\\boxed{6}", "a", "b", "c", "d",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)


def tokenizer():
    """A ``PreTrainedTokenizerFast`` over ``WORDS`` (whitespace-split, word level), with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
        additional_special_tokens=["<|user|>", "<|assistant|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
