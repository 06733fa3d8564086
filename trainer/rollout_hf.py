"""The CPU rollout actor: Hugging Face ``generate`` with the same interface as the vLLM actor.

Interface shared by every rollout actor (``rollout_vllm.VllmRollout`` too):

- ``generate(prompts, n, max_new_tokens, temperature, top_p, seed) -> list[list[dict]]``: for each
  prompt (a string, chat template already applied), ``n`` completions, each a dict with
  ``prompt_ids`` (list[int]), ``completion_ids`` (list[int], ending with EOS when the model stopped),
  ``text`` (the completion decoded without special tokens) and ``finish`` (``"stop"`` or ``"length"``).
- ``load_weights(state)``: take the policy's weights (a name -> tensor mapping in the base model's
  names), after each optimizer step.
- ``eos_token_id`` and ``pad_token_id`` attributes.

And, for ``train.off_policy``, the sampling policy's per-token log-probs, one of:

- a ``logprobs`` key on every completion (list[float], nats at ``temperature``), recorded while
  sampling: the vLLM actor does this;
- ``logprobs(seqs, temperature, micro_batch_size)``: the per-token log-probs of completions under the
  rollout's *current* weights, i.e. the policy that sampled them (``logprobs.sequence_logprobs``,
  the same code the policy actor uses): this actor does this.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from trainer.logprobs import sequence_logprobs

__all__ = ["HFRollout", "load_tokenizer", "resolve_dtype"]


def resolve_dtype(name: str, device: str) -> torch.dtype:
    """``auto`` is float32 on CPU and bfloat16 on CUDA."""
    if name == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


class HFRollout:
    """Sampling with ``model.generate`` on ``device`` (CPU by default), one call for all prompts."""

    def __init__(self, model_path: str, dtype: str = "auto", device: str = "cpu") -> None:
        from transformers import AutoModelForCausalLM

        self.device = device
        self.tokenizer = load_tokenizer(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=resolve_dtype(dtype, device))
        # transformers wraps PreTrainedModel.to in functools.wraps(nn.Module.to), which mypy reads as the
        # unbound Module.to (self first): the ignore is for that.  to() moves the model in place.
        self.model.to(device)  # type: ignore[arg-type]
        self.model.eval()
        self.eos_token_id = int(self.tokenizer.eos_token_id)
        self.pad_token_id = int(self.tokenizer.pad_token_id)

    @torch.no_grad()
    def generate(
        self, prompts: list[str], n: int, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0
    ) -> list[list[dict[str, Any]]]:
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        torch.manual_seed(seed)
        # greedy (temperature 0): generate refuses num_return_sequences > 1; the n copies are identical anyway
        per_prompt = n if temperature > 0 else 1
        # Untyped on purpose: some transformers releases type generate's self so that their own auto
        # class's return type does not match it, others do not; an ignore would be wrong in one of them.
        out = cast(Any, self.model).generate(
            **enc,
            do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None,
            top_p=top_p,
            top_k=0,
            max_new_tokens=max_new_tokens,
            num_return_sequences=per_prompt,
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
        )
        width = enc["input_ids"].shape[1]
        groups: list[list[dict[str, Any]]] = []
        for i, prompt_row in enumerate(enc["input_ids"]):
            mask = enc["attention_mask"][i].bool()
            prompt_ids = prompt_row[mask].tolist()
            group = []
            for j in range(n):
                gen = out[i * per_prompt + (j if per_prompt == n else 0), width:].tolist()
                finish = "length"
                if self.eos_token_id in gen:
                    gen = gen[: gen.index(self.eos_token_id) + 1]
                    finish = "stop"
                text = self.tokenizer.decode(gen, skip_special_tokens=True)
                group.append({"prompt_ids": prompt_ids, "completion_ids": gen, "text": text, "finish": finish})
            groups.append(group)
        return groups

    def logprobs(self, seqs: list[tuple[list[int], list[int]]], temperature: float, micro_batch_size: int) -> list[list[float]]:
        """Log-probs (nats, at ``temperature``) of each ``(prompt_ids, completion_ids)``'s completion
        tokens under the weights this actor samples with now; no gradient."""
        return sequence_logprobs(self.model, seqs, self.pad_token_id, self.device, temperature, micro_batch_size)

    @torch.no_grad()
    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Copy the policy's weights in (names of the base model; strict)."""
        self.model.load_state_dict(state, strict=True)
