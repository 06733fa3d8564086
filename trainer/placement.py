"""Where the actors run: in the driver process (``local``) or as Ray actors (``ray``), behind one interface.

``make_actors(cfg)`` returns a ``Placement`` with ``policy`` and ``rollout`` handles; ``handle.call(
"method", *args)`` runs the actor's method and returns its result.  ``sync_weights()`` moves the
policy's weights into the rollout engine (with Ray, through the object store without passing through
the driver).  Ray is imported only when ``placement.backend`` is ``ray``.

- ``local``: plain objects; the smallest tests and the CPU demo use it (no Ray start-up cost).
  Rewards still overlap: they run in qworker's worker processes.
- ``ray``: the policy and rollout are Ray actors.  With ``placement.ray.colocate`` they share one GPU
  (0.5 each); otherwise each gets a GPU.  Without a GPU they get one CPU each.  A local Ray is
  started on loopback only (``127.0.0.1``, no dashboard, no usage stats, a private temp dir).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

from trainer.config import TrainConfig

__all__ = ["Placement", "make_actors", "device_for", "rollout_backend"]


def device_for(cfg: TrainConfig) -> str:
    """``cuda`` when asked for, or when ``auto`` and CUDA is available; else ``cpu``."""
    if cfg.train.device != "auto":
        return cfg.train.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def rollout_backend(cfg: TrainConfig, device: str) -> str:
    """``vllm`` on CUDA with ``auto``, ``hf`` on CPU; an explicit choice wins."""
    if cfg.rollout.backend != "auto":
        return cfg.rollout.backend
    return "vllm" if device == "cuda" else "hf"


def policy_kwargs(cfg: TrainConfig, device: str, init_from: str | None) -> dict[str, Any]:
    t = cfg.train
    return dict(
        device=device, dtype=cfg.model.dtype, lora=vars(cfg.model.lora) if cfg.model.lora.enabled else None,
        lr=t.lr, betas=tuple(t.betas), weight_decay=t.weight_decay, kl_coef=t.kl_coef,
        temperature=cfg.rollout.temperature, clip_range_left=t.clip_range_left, clip_range_right=t.clip_range_right,
        loss_aggregation=t.loss_aggregation, max_new_tokens=cfg.rollout.max_new_tokens, max_grad_norm=t.max_grad_norm, micro_batch_size=t.micro_batch_size,
        gradient_checkpointing=cfg.model.gradient_checkpointing, init_from=init_from, seed=t.seed,
    )


def _rollout_factory(cfg: TrainConfig, device: str) -> tuple[type, tuple, dict]:
    if rollout_backend(cfg, device) == "vllm":
        from trainer.rollout_vllm import VllmRollout

        v = cfg.rollout.vllm
        return VllmRollout, (cfg.model.path,), dict(
            dtype=cfg.model.dtype, gpu_memory_utilization=v.gpu_memory_utilization, enforce_eager=v.enforce_eager,
            max_model_len=v.max_model_len, weight_sync=v.weight_sync, seed=cfg.train.seed,
        )
    from trainer.rollout_hf import HFRollout

    return HFRollout, (cfg.model.path,), dict(dtype=cfg.model.dtype, device=device)


class LocalHandle:
    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.obj, method)(*args, **kwargs)


class RayHandle:
    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        import ray

        return ray.get(getattr(self.actor, method).remote(*args, **kwargs))


@dataclass
class Placement:
    policy: Any
    rollout: Any
    sync_weights: Callable[[], None]
    shutdown: Callable[[], None]


def make_actors(cfg: TrainConfig, init_from: str | None = None) -> Placement:
    """Start the policy and rollout actors as ``cfg.placement.backend`` says (see the module docstring)."""
    from trainer.policy import PolicyActor

    device = device_for(cfg)
    rcls, rargs, rkwargs = _rollout_factory(cfg, device)
    if cfg.placement.backend == "local":
        policy, rollout = LocalHandle(PolicyActor(cfg.model.path, **policy_kwargs(cfg, device, init_from))), LocalHandle(rcls(*rargs, **rkwargs))

        def sync() -> None:
            rollout.obj.load_weights(policy.obj.get_weights())

        return Placement(policy, rollout, sync, lambda: None)
    return _ray_actors(cfg, device, init_from, PolicyActor, rcls, rargs, rkwargs)


def init_ray(address: str | None, temp_dir: str | None) -> None:
    """Start (or join) Ray with every server on loopback; a no-op when Ray is already initialised.

    Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when it is first imported: a process that imported
    Ray before this call must set it (to 0) itself, or Ray maps 127.0.0.1 to the host's address.
    """
    import sys

    if "ray" not in sys.modules:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, include_dashboard=False)
        return
    temp_dir = temp_dir or tempfile.mkdtemp(prefix="qworker-train-ray-")
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if constants is not None and getattr(constants, "ENABLE_RAY_CLUSTER", False):  # Ray was imported before the variable was set
        constants.ENABLE_RAY_CLUSTER = False  # a local instance stays on loopback
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, _temp_dir=temp_dir, log_to_driver=True)


def _ray_actors(
    cfg: TrainConfig, device: str, init_from: str | None, pcls: type[Any], rcls: type[Any], rargs: tuple, rkwargs: dict
) -> Placement:
    import ray

    init_ray(cfg.placement.ray.address, cfg.placement.ray.temp_dir)
    if device == "cuda":
        share = 0.5 if cfg.placement.ray.colocate else 1.0
        opts = {"num_gpus": share, "num_cpus": 1}
    else:
        opts = {"num_cpus": 1}
    # the actors inherit the driver's environment (HF_HUB_OFFLINE and the like) through the local raylet
    p = ray.remote(pcls).options(**opts).remote(cfg.model.path, **policy_kwargs(cfg, device, init_from))
    r = ray.remote(rcls).options(**opts).remote(*rargs, **rkwargs)
    policy, rollout = RayHandle(p), RayHandle(r)

    def sync() -> None:
        ray.get(r.load_weights.remote(p.get_weights.remote()))

    def shutdown() -> None:
        for actor in (p, r):
            ray.kill(actor)

    return Placement(policy, rollout, sync, shutdown)
