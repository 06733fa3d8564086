"""The policy actor: the trainable model, its log-probabilities, the GRPO loss, and the optimizer.

The contract the loop relies on (``loop.py``):

- ``logprobs(seqs, old=True)``: per-token log-probabilities (nats, at the sampling temperature) of
  each completion under the current policy (``old``; ``old=False`` skips them) and, when
  ``kl_coef > 0``, the reference (``ref``: the initial weights; with LoRA, the base model with the
  adapter disabled).  No gradient.
- ``accumulate(micro)``: forward and backward on one micro-batch whose advantages are known; the
  gradient accumulated is that of the loss *numerator* (see ``grpo.aggregate``), unnormalised.
- ``optimizer_step(denominator, lr)``: divide the accumulated gradient by ``denominator`` (the
  mini-batch's token or sequence count, or sequences * ``max_new_tokens``), clip its norm, step, zero the gradient.
- ``get_weights()``: the weights under the base model's names (LoRA merged in), for the rollout.
- ``save(dir)``: the model in Hugging Face format under ``dir/hf`` and the optimizer state; a policy
  built with ``init_from=dir`` resumes from them (the reference stays the original ``model_path``).

A sequence is ``(prompt_ids, completion_ids)``; batching and log-probs are ``logprobs.py``'s, which the
CPU rollout actor shares (it computes the sampling policy's log-probs in off-policy mode).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional

import torch

from trainer.grpo import Aggregation, aggregate, clipped_policy_loss, kl_k3
from trainer.logprobs import Seq, batch_sequences, token_logprobs
from trainer.rollout_hf import load_tokenizer, resolve_dtype

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

__all__ = ["PolicyActor"]


class PolicyActor:
    """Holds the policy (and optional reference) model on ``device``; see the module docstring."""

    def __init__(
        self,
        model_path: str,
        *,
        device: str = "cpu",
        dtype: str = "auto",
        lora: Optional[dict[str, Any]] = None,
        lr: float = 1e-6,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0.0,
        kl_coef: float = 0.0,
        temperature: float = 1.0,
        clip_range_left: float = 0.2,
        clip_range_right: float = 0.28,
        loss_aggregation: Aggregation = "token",
        max_new_tokens: Optional[int] = None,
        max_grad_norm: float = 1.0,
        micro_batch_size: int = 8,
        gradient_checkpointing: bool = False,
        init_from: Optional[str] = None,
        seed: int = 0,
    ) -> None:
        from transformers import AutoModelForCausalLM

        torch.manual_seed(seed)
        self.device, self.kl_coef, self.temperature = device, kl_coef, temperature
        self.clip = (clip_range_left, clip_range_right)
        self.loss_aggregation, self.max_grad_norm, self.micro_batch_size = loss_aggregation, max_grad_norm, micro_batch_size
        self.max_new_tokens = max_new_tokens  # the dr_grpo aggregation's constant
        lora_cfg = lora if lora and lora.get("enabled") else None
        self.lora = lora_cfg is not None
        torch_dtype = resolve_dtype(dtype, device)
        self.tokenizer = load_tokenizer(model_path)
        self.pad_id = int(self.tokenizer.pad_token_id)
        hf_dir = os.path.join(init_from, "hf") if init_from else None  # init_from: a checkpoint directory
        base_from = model_path if self.lora or not hf_dir else hf_dir
        base = AutoModelForCausalLM.from_pretrained(base_from, dtype=torch_dtype)
        if gradient_checkpointing:
            base.gradient_checkpointing_enable()
        self.model: PreTrainedModel | PeftModel = base  # a PeftModel with LoRA
        if lora_cfg is not None:
            from peft import LoraConfig, PeftModel, get_peft_model

            if hf_dir:
                self.model = PeftModel.from_pretrained(base, hf_dir, is_trainable=True)
            else:
                cfg = LoraConfig(
                    r=lora_cfg["r"], lora_alpha=lora_cfg["alpha"], lora_dropout=lora_cfg["dropout"],
                    target_modules=list(lora_cfg["target_modules"]), task_type="CAUSAL_LM",
                )
                self.model = get_peft_model(base, cfg)
        # transformers wraps PreTrainedModel.to in functools.wraps(nn.Module.to), which mypy reads as the
        # unbound Module.to (self first): the ignores on .to(device) are for that.  to() moves in place.
        self.model.to(device)  # type: ignore[arg-type]
        self.model.train()
        self.ref: Optional[PreTrainedModel] = None
        if kl_coef > 0 and not self.lora:
            self.ref = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype)
            self.ref.to(device)  # type: ignore[arg-type]
            self.ref.eval()
            self.ref.requires_grad_(False)
        params = [p for p in self.model.parameters() if p.requires_grad]
        beta1, beta2 = betas
        self.optimizer = torch.optim.AdamW(params, lr=lr, betas=(beta1, beta2), weight_decay=weight_decay)
        if init_from and os.path.exists(os.path.join(init_from, "optimizer.pt")):
            self.optimizer.load_state_dict(torch.load(os.path.join(init_from, "optimizer.pt"), map_location=device))
        self.optimizer.zero_grad(set_to_none=True)

    # ---- batching -------------------------------------------------------------------------------
    def _batch(self, seqs: list[Seq]) -> dict[str, torch.Tensor]:
        return batch_sequences(seqs, self.pad_id, self.device)

    def _peft(self) -> PeftModel:
        """``self.model`` as the ``PeftModel`` it is with LoRA (the adapter's methods are only there)."""
        from peft import PeftModel

        assert isinstance(self.model, PeftModel), "only with LoRA"
        return self.model

    def _token_logp(self, model: torch.nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[sequences, c_max]`` log-probs of the completion tokens (garbage where ``mask`` is 0)."""
        return token_logprobs(model, b, self.temperature)

    # ---- the actor's methods ----------------------------------------------------------------------
    @torch.no_grad()
    def logprobs(self, seqs: list[Seq], old: bool = True) -> dict[str, Optional[list[list[float]]]]:
        """``{"old": [...] or None, "ref": [...] or None}``: one list of floats per completion token per
        sequence, under the current policy (``old``; skipped when ``old`` is False, as in off-policy
        mode, where the rollout actor computed them) and the reference (when ``kl_coef > 0``)."""
        olds: Optional[list[list[float]]] = [] if old else None
        ref: Optional[list[list[float]]] = [] if self.kl_coef > 0 else None
        # eval mode: these are the sampling policy's log-probs, and the rollout samples without dropout
        # (LoRA's dropout made the "old" log-probs random and the on-policy ratio != 1)
        self.model.eval()
        try:
            self._logprobs_into(seqs, olds, ref)
        finally:
            self.model.train()
        return {"old": olds, "ref": ref}

    def _logprobs_into(self, seqs: list[Seq], olds: Optional[list[list[float]]], ref: Optional[list[list[float]]]) -> None:
        for start in range(0, len(seqs), self.micro_batch_size):
            chunk = seqs[start : start + self.micro_batch_size]
            b = self._batch(chunk)
            if olds is not None:
                lp = self._token_logp(self.model, b).cpu()
                olds += [lp[i, : len(c)].tolist() for i, (_, c) in enumerate(chunk)]
            if ref is not None:
                if self.lora:
                    with self._peft().disable_adapter():
                        rp = self._token_logp(self.model, b).cpu()
                else:
                    assert self.ref is not None  # kl_coef > 0 without LoRA
                    rp = self._token_logp(self.ref, b).cpu()
                ref += [rp[i, : len(c)].tolist() for i, (_, c) in enumerate(chunk)]

    def accumulate(self, micro: list[dict[str, Any]]) -> dict[str, float]:
        """Forward/backward on ``micro``: dicts with ``prompt_ids``, ``completion_ids``, ``advantage``,
        ``old_logp`` and (with KL) ``ref_logp``.  Returns sums: ``loss_sum``, ``denominator``,
        ``clipped_tokens``, ``kl_sum``, ``tokens``, ``entropy_sum`` (the policy's entropy at each
        completion token, nats at the sampling temperature, summed)."""
        b = self._batch([(m["prompt_ids"], m["completion_ids"]) for m in micro])
        mask, c_max = b["mask"], int(b["c_max"])

        def pad(key: str) -> torch.Tensor:
            out = torch.zeros((len(micro), c_max), dtype=torch.float32)
            for i, m in enumerate(micro):
                out[i, : len(m[key])] = torch.tensor(m[key], dtype=torch.float32)
            return out.to(self.device)

        ent: list[torch.Tensor] = []
        logp = token_logprobs(self.model, b, self.temperature, entropy=ent)
        adv = torch.tensor([m["advantage"] for m in micro], dtype=torch.float32, device=self.device)
        per_token, clipped = clipped_policy_loss(logp, pad("old_logp"), adv, *self.clip)
        kl_sum = 0.0
        if self.kl_coef > 0:
            kl = kl_k3(logp, pad("ref_logp"), mask)  # masked before exp: pad slots hold 0.0, logp there is real
            per_token = per_token + self.kl_coef * kl
            kl_sum = float((kl.detach() * mask).sum())
        numerator, denominator = aggregate(per_token, mask, self.loss_aggregation, self.max_new_tokens)
        numerator.backward()
        return {"loss_sum": float(numerator.detach()), "denominator": denominator,
                "clipped_tokens": float((clipped * mask).sum()), "kl_sum": kl_sum, "tokens": float(mask.sum()),
                "entropy_sum": float((ent[0] * mask).sum())}

    def optimizer_step(self, denominator: float, lr: float) -> dict[str, float]:
        """Scale the accumulated gradient by ``1/denominator``, clip to ``max_grad_norm`` (0: no clip), step at ``lr``."""
        params = [p for p in self.model.parameters() if p.requires_grad and p.grad is not None]
        grads = [p.grad for p in params if p.grad is not None]
        scale = 1.0 / max(denominator, 1e-8)
        for g in grads:
            g.mul_(scale)
        if self.max_grad_norm > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm))
        else:
            norm = float(torch.norm(torch.stack([g.norm() for g in grads]))) if grads else 0.0
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": norm, "lr": lr}

    @torch.no_grad()
    def get_weights(self) -> dict[str, torch.Tensor]:
        """The full weights under the base model's parameter names (LoRA merged), on CPU."""
        if not self.lora:
            return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        peft = self._peft()
        peft.merge_adapter()
        try:
            out = {}
            for k, v in peft.get_base_model().state_dict().items():  # LoRA: base_model.model
                if "lora_" in k:
                    continue
                out[k.replace(".base_layer.", ".")] = v.detach().to("cpu", copy=True)
            return out
        finally:
            peft.unmerge_adapter()

    def save(self, directory: str) -> None:
        """Write ``directory/hf`` (model or LoRA adapter, and tokenizer) and ``directory/optimizer.pt``."""
        os.makedirs(directory, exist_ok=True)
        self.model.save_pretrained(os.path.join(directory, "hf"))
        self.tokenizer.save_pretrained(os.path.join(directory, "hf"))
        torch.save(self.optimizer.state_dict(), os.path.join(directory, "optimizer.pt"))
