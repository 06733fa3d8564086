"""The GPU rollout actor: a vLLM ``LLM`` engine, with the same interface as ``rollout_hf.HFRollout``.

vLLM is imported here only (never at package import), so CPU hosts and reward hosts need not have it.
Written against vLLM's documented offline API (v0.8 and later):

- ``LLM(model=path, dtype=..., gpu_memory_utilization=..., enforce_eager=..., seed=...,
  worker_extension_cls="trainer.rollout_vllm.WeightSyncExtension")``;
- ``llm.generate([{"prompt_token_ids": ids}, ...], SamplingParams(n=..., temperature=..., top_p=...,
  max_tokens=..., seed=...))``: prompts are tokenized by our tokenizer, without special tokens, so
  the policy scores exactly the ids that were sampled from;
- weight updates, ``weight_sync``:
  - ``collective_rpc`` (current vLLM): ``llm.collective_rpc("qworker_load_weights", args=(batch,))``
    runs ``WeightSyncExtension.qworker_load_weights`` in every worker, which moves the tensors to its
    device and calls ``model_runner.model.load_weights``; sent in batches of about 256 MiB;
  - ``load_weights`` (older vLLM, in-process engine):
    ``llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights(items)``;
  - ``auto``: ``collective_rpc`` when the engine has it, else ``load_weights``.
  After an update the prefix cache is reset (its KV blocks came from the old weights).

The weights travel as CPU tensors (through Ray's object store when placed with Ray).  That is right
for small models and the smoke test; large models want NCCL or CUDA IPC (vLLM's RLHF examples).
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

__all__ = ["VllmRollout", "WeightSyncExtension"]

BATCH_BYTES = 256 << 20


class WeightSyncExtension:
    """Mixed into each vLLM worker (``worker_extension_cls``); ``self`` is the worker."""

    def qworker_load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> int:
        device = next(self.model_runner.model.parameters()).device  # type: ignore[attr-defined]
        self.model_runner.model.load_weights(weights=[(n, t.to(device)) for n, t in weights])  # type: ignore[attr-defined]
        return len(weights)


def _batches(state: dict[str, torch.Tensor]) -> Iterable[list[tuple[str, torch.Tensor]]]:
    batch: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in state.items():
        batch.append((name, t))
        size += t.numel() * t.element_size()
        if size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


class VllmRollout:
    """Sampling with a vLLM engine on this process's GPU; see the module docstring."""

    def __init__(self, model_path: str, dtype: str = "auto", gpu_memory_utilization: float = 0.3,
                 enforce_eager: bool = True, max_model_len: int | None = None, weight_sync: str = "auto", seed: int = 0) -> None:
        from vllm import LLM

        from .rollout_hf import load_tokenizer

        self.tokenizer = load_tokenizer(model_path)
        self.eos_token_id = int(self.tokenizer.eos_token_id)
        self.pad_token_id = int(self.tokenizer.pad_token_id)
        kwargs: dict[str, Any] = dict(
            model=model_path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager, seed=seed, max_model_len=max_model_len,
        )
        self.weight_sync = weight_sync
        if weight_sync in ("auto", "collective_rpc"):
            kwargs["worker_extension_cls"] = f"{__name__}.WeightSyncExtension"
        try:
            self.llm = LLM(**kwargs)
        except TypeError:
            if weight_sync == "collective_rpc":
                raise
            kwargs.pop("worker_extension_cls", None)  # vLLM before worker extensions
            self.llm = LLM(**kwargs)
            self.weight_sync = "load_weights"
        if self.weight_sync == "auto":
            self.weight_sync = "collective_rpc" if hasattr(self.llm, "collective_rpc") else "load_weights"

    def generate(self, prompts: list[str], n: int, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int = 0) -> list[list[dict[str, Any]]]:
        from vllm import SamplingParams

        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=seed)
        outs = self.llm.generate([{"prompt_token_ids": x} for x in ids], params, use_tqdm=False)
        groups = []
        for prompt_ids, out in zip(ids, outs, strict=True):
            group = []
            for c in out.outputs:
                comp = list(c.token_ids)
                finish = "stop" if c.finish_reason == "stop" else "length"  # vLLM keeps the EOS id in token_ids
                group.append({"prompt_ids": list(prompt_ids), "completion_ids": comp, "text": c.text, "finish": finish})
            groups.append(group)
        return groups

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Load the policy's weights (base-model names) into every vLLM worker, then drop the prefix cache."""
        if self.weight_sync == "collective_rpc":
            for batch in _batches(state):
                self.llm.collective_rpc("qworker_load_weights", args=(batch,))
        else:
            model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
            model.load_weights(state.items())
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()
