"""The trainer's configuration: typed sections read from YAML, with unknown keys refused.

``load_config(path, overrides)`` reads ``configs/grpo.yaml``-style files; ``overrides`` are
``"section.key=value"`` strings (the value parsed as YAML), applied after the file.  Every key and
its meaning is documented in ``configs/grpo.yaml``; the defaults here are the same.  verl's and TRL's
names for the same settings are accepted too (``aliases.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union, get_args, get_origin, get_type_hints

import yaml

from trainer.aliases import resolve_aliases
from trainer.errors import ConfigurationError
from trainer.grpo import ADVANTAGE_MODES, AGGREGATIONS, AdvantageMode, Aggregation
from trainer.schedule import SCHEDULES, Schedule

__all__ = ["TrainConfig", "load_config", "config_from_dict", "ConfigurationError"]


@dataclass
class LoraConfig:
    enabled: bool = False
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class ModelConfig:
    path: str = ""
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    gradient_checkpointing: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class DataConfig:
    path: str = ""
    shuffle: bool = True
    max_prompt_length: Optional[int] = None  # tokens, after the chat template; longer rows are dropped (and counted)


@dataclass
class EvalConfig:
    data: str = ""  # a held-out JSONL like data.path; "" = no evaluation
    every_n_steps: int = 0  # evaluate before step 0, every N steps, and after the last; 0 = before and after only
    k: int = 4  # mean@k and pass@k
    n: Optional[int] = None  # samples per prompt (>= k; the unbiased pass@k uses all n); null = k
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: Optional[int] = None  # null = rollout.max_new_tokens
    pass_threshold: float = 1.0  # a sample passes when its reward is >= this
    max_prompts: Optional[int] = None  # only the first N rows of the file; null = all
    seed: int = 1234  # the same seed at every evaluation: differences come from the weights


@dataclass
class VllmConfig:
    gpu_memory_utilization: float = 0.3
    enforce_eager: bool = True
    max_model_len: Optional[int] = None
    weight_sync: str = "auto"  # auto (= inprocess; measured in rollout_vllm.py) | inprocess | rpc_bytes | shm_file


@dataclass
class RolloutConfig:
    backend: str = "auto"  # auto | hf | vllm
    num_generations: int = 8
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    chunks: int = 1
    vllm: VllmConfig = field(default_factory=VllmConfig)


@dataclass
class OptimConfig:
    steps: int = 100
    prompts_per_step: int = 8
    mini_batch_size: Optional[int] = None
    micro_batch_size: int = 8
    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: list = field(default_factory=lambda: [0.9, 0.999])
    lr_schedule: Schedule = "constant"
    warmup_ratio: float = 0.0
    min_lr_ratio: float = 0.0
    max_grad_norm: float = 1.0
    advantage: AdvantageMode = "grpo"
    clip_range_left: float = 0.2
    clip_range_right: float = 0.28
    loss_aggregation: Aggregation = "token"
    kl_coef: float = 0.0
    ppo_epochs: int = 1  # passes of updates over each step's batch (old log-probs fixed before the first)
    overlap: bool = True
    off_policy: bool = False
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda


@dataclass
class RewardConfig:
    name: str = "think_math"
    params: dict = field(default_factory=dict)
    modules: list = field(default_factory=list)
    gather_timeout_s: float = 600.0


@dataclass
class RayConfig:
    address: Optional[str] = None
    colocate: bool = True
    temp_dir: Optional[str] = None


@dataclass
class PlacementConfig:
    backend: str = "local"  # local | ray
    ray: RayConfig = field(default_factory=RayConfig)


@dataclass
class LogConfig:
    dir: str = "out/grpo"
    jsonl: bool = True
    tensorboard: bool = False
    wandb_project: Optional[str] = None
    print_every: int = 1


@dataclass
class CheckpointConfig:
    every: int = 20  # a crash loses at most this many steps; 0 = only at the end
    keep: int = 2
    resume: bool = True


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: OptimConfig = field(default_factory=OptimConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    qworker: dict = field(default_factory=dict)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    log: LogConfig = field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def validate(self) -> TrainConfig:
        """Check ranges and choices; raises ``ConfigurationError`` naming the key.  Returns self."""
        t, r = self.train, self.rollout
        _choice("train.advantage", t.advantage, ADVANTAGE_MODES)
        _choice("train.loss_aggregation", t.loss_aggregation, AGGREGATIONS)
        _choice("train.lr_schedule", t.lr_schedule, SCHEDULES)
        _choice("train.device", t.device, ("auto", "cpu", "cuda"))
        _choice("rollout.backend", r.backend, ("auto", "hf", "vllm"))
        _choice("rollout.vllm.weight_sync", r.vllm.weight_sync, ("auto", "inprocess", "rpc_bytes", "shm_file"))
        _choice("placement.backend", self.placement.backend, ("local", "ray"))
        _choice("model.dtype", self.model.dtype, ("auto", "float32", "bfloat16", "float16"))
        for key, value, low in [
            ("train.steps", t.steps, 1),
            ("train.prompts_per_step", t.prompts_per_step, 1),
            ("train.micro_batch_size", t.micro_batch_size, 1),
            ("rollout.num_generations", r.num_generations, 1),
            ("rollout.max_new_tokens", r.max_new_tokens, 1),
            ("rollout.chunks", r.chunks, 1),
            ("train.ppo_epochs", t.ppo_epochs, 1),
            ("eval.k", self.eval.k, 1),
            ("eval.every_n_steps", self.eval.every_n_steps, 0),
        ]:
            if value < low:
                raise ConfigurationError(f"{key}: must be >= {low}, got {value}")
        if t.advantage == "grpo" and r.num_generations < 2:
            raise ConfigurationError("train.advantage: 'grpo' needs rollout.num_generations >= 2")
        if not 0 <= t.clip_range_left < 1 or t.clip_range_right < 0:
            raise ConfigurationError("train.clip_range_left must be in [0, 1) and train.clip_range_right >= 0")
        if t.mini_batch_size is not None and t.mini_batch_size < 1:
            raise ConfigurationError("train.mini_batch_size: must be >= 1 or null")
        if t.lr <= 0 or t.kl_coef < 0 or t.max_grad_norm < 0:
            raise ConfigurationError("train.lr must be > 0, train.kl_coef and train.max_grad_norm >= 0")
        if not 0 <= t.warmup_ratio <= 1 or not 0 <= t.min_lr_ratio <= 1:
            raise ConfigurationError("train.warmup_ratio and train.min_lr_ratio must be in [0, 1]")
        if t.off_policy and not t.overlap:
            raise ConfigurationError("train.off_policy: needs train.overlap: true (it scores each group as soon as it is generated)")
        e = self.eval
        if e.n is not None and e.n < e.k:
            raise ConfigurationError(f"eval.n: must be >= eval.k ({e.k}) or null, got {e.n}")
        optional: list[tuple[str, Optional[int]]] = [
            ("eval.max_new_tokens", e.max_new_tokens), ("eval.max_prompts", e.max_prompts), ("data.max_prompt_length", self.data.max_prompt_length)]
        for name, limit in optional:
            if limit is not None and limit < 1:
                raise ConfigurationError(f"{name}: must be >= 1 or null, got {limit}")
        if r.chunks > t.prompts_per_step:
            raise ConfigurationError("rollout.chunks: must not exceed train.prompts_per_step")
        if not self.model.path:
            raise ConfigurationError("model.path: required (a local directory or a model name)")
        if not self.data.path:
            raise ConfigurationError("data.path: required (a JSONL file with prompt or messages, and ground_truth)")
        return self


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigurationError(f"{key}: {value!r} is not one of {list(allowed)}")


def _build(cls: type, data: Any, where: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigurationError(f"{where}: expected a mapping, got {type(data).__name__}")
    data = resolve_aliases(where, data)
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigurationError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(names)}")
    kwargs = {}
    for key, value in data.items():
        kwargs[key] = _coerce(hints[key], value, f"{where}.{key}" if where else key)
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    optional = get_origin(hint) is Union and type(None) in get_args(hint)
    if value is None:
        if optional:
            return None
        raise ConfigurationError(f"{where}: must not be null")
    base = next(a for a in get_args(hint) if a is not type(None)) if optional else hint
    if get_origin(base) is Literal:  # one of a few strings; the error lists them
        _choice(where, value, get_args(base))
        return value
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if base is float and isinstance(value, str):
        try:
            return float(value)  # YAML reads "1e-6" as a string
        except ValueError:
            pass
    if not isinstance(value, base) or (base in (int, float) and isinstance(value, bool)):
        raise ConfigurationError(f"{where}: expected {base.__name__}, got {type(value).__name__} {value!r}")
    return value


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """Build and validate a ``TrainConfig`` from a nested mapping (as read from YAML)."""
    return _build(TrainConfig, data, "").validate()


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply one ``"a.b.c=value"`` override to the nested mapping ``data`` in place (value parsed as YAML)."""
    if "=" not in override:
        raise ConfigurationError(f"override {override!r}: expected KEY=VALUE, e.g. train.lr=1e-6")
    key, raw = override.split("=", 1)
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigurationError(f"override {override!r}: {part} is not a section")
    node[parts[-1]] = yaml.safe_load(raw)


def load_config(path: Optional[str], overrides: tuple[str, ...] | list[str] = ()) -> TrainConfig:
    """Read a YAML config (or start from defaults when ``path`` is None), apply overrides, validate."""
    data: dict[str, Any] = {}
    if path:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
        if not isinstance(data, dict):
            raise ConfigurationError(f"{path}: the top level must be a mapping")
    for override in overrides:
        apply_override(data, override)
    return config_from_dict(data)
