"""verl and TRL names for the trainer's config keys, so a config copied from either mostly just works.

``resolve_aliases(section, mapping)`` rewrites one section's mapping to our key names before the
section is built.  Each alias sets its target keys either *directly* or as a *fallback* (TRL's
``epsilon_high`` defaults to ``epsilon``, verl's ``clip_ratio_low``/``clip_ratio_high`` default to
``clip_ratio``):

- every direct setter of a key (our own name included) must give the same value, or
  ``ConfigurationError`` names them all;
- fallbacks count only when no direct setter is present, and then must agree among themselves.

So ``epsilon: 0.2`` + ``epsilon_high: 0.28`` is (0.2, 0.28), ``clip_ratio: 0.2`` alone is (0.2, 0.2),
and ``beta: 0.04`` + ``kl_coef: 0.01`` is an error.  Some aliases translate values (verl's
``loss_agg_mode: token-mean``); a value with no translation is an error that lists the known ones.
Names whose units differ from ours (verl's ``ppo_mini_batch_size`` counts prompts, ours sequences)
are deliberately not aliases: they stay unknown keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.errors import ConfigurationError

__all__ = ["ALIASES", "Alias", "resolve_aliases"]


@dataclass(frozen=True)
class Alias:
    """``direct``: keys this alias sets; ``fallback``: keys it sets only when nothing sets them directly;
    ``values``: a translation of its values (empty: taken as they are); ``origin``: verl and/or TRL."""

    direct: tuple[str, ...] = ()
    fallback: tuple[str, ...] = ()
    values: dict[Any, Any] = field(default_factory=dict)
    origin: str = ""


_AGG_VERL = {"token-mean": "token", "seq-mean-token-mean": "sequence", "seq-mean-token-sum-norm": "dr_grpo"}
_AGG_TRL = {"grpo": "sequence", "bnpo": "token", "dapo": "token", "dr_grpo": "dr_grpo"}
_SCALE_TRL = {True: "grpo", "group": "grpo", False: "grpo_no_std", "none": "grpo_no_std"}
_SCHEDULE_TRL = {"constant": "constant", "constant_with_warmup": "constant", "cosine": "cosine"}

ALIASES: dict[str, dict[str, Alias]] = {
    "train": {
        "clip_ratio_low": Alias(("clip_range_left",), origin="verl"),
        "clip_ratio_high": Alias(("clip_range_right",), origin="verl"),
        "clip_ratio": Alias((), ("clip_range_left", "clip_range_right"), origin="verl"),
        "epsilon": Alias(("clip_range_left",), ("clip_range_right",), origin="TRL"),
        "epsilon_high": Alias(("clip_range_right",), origin="TRL"),
        "beta": Alias(("kl_coef",), origin="TRL"),
        "kl_loss_coef": Alias(("kl_coef",), origin="verl"),
        "num_iterations": Alias(("ppo_epochs",), origin="TRL"),
        "learning_rate": Alias(("lr",), origin="TRL"),
        "grad_clip": Alias(("max_grad_norm",), origin="verl"),
        "lr_warmup_steps_ratio": Alias(("warmup_ratio",), origin="verl"),
        "lr_scheduler_type": Alias(("lr_schedule",), values=_SCHEDULE_TRL, origin="TRL"),
        "loss_agg_mode": Alias(("loss_aggregation",), values=_AGG_VERL, origin="verl"),
        "loss_type": Alias(("loss_aggregation",), values=_AGG_TRL, origin="TRL"),
        "scale_rewards": Alias(("advantage",), values=_SCALE_TRL, origin="TRL"),
        "norm_adv_by_std_in_grpo": Alias(("advantage",), values={True: "grpo", False: "grpo_no_std"}, origin="verl"),
    },
    "rollout": {
        "n": Alias(("num_generations",), origin="verl"),
        "response_length": Alias(("max_new_tokens",), origin="verl"),
        "max_completion_length": Alias(("max_new_tokens",), origin="TRL"),
    },
}


def _translate(section: str, name: str, alias: Alias, value: Any) -> Any:
    if not alias.values:
        return value
    for known, ours in alias.values.items():  # True == 1 in a dict: compare types too
        if known == value and type(known) is type(value):
            return ours
    raise ConfigurationError(f"{section}.{name} ({alias.origin}): {value!r} is not one of {list(alias.values)}")


def resolve_aliases(section: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (one section's mapping) with aliases replaced by our keys; see the module docstring."""
    table = ALIASES.get(section)
    if not table or not any(k in table for k in data):
        return data
    out = {k: v for k, v in data.items() if k not in table}
    direct: dict[str, list[tuple[str, Any]]] = {k: [(k, v)] for k, v in out.items()}
    weak: dict[str, list[tuple[str, Any]]] = {}
    for name, value in data.items():
        alias = table.get(name)
        if alias is None:
            continue
        value = _translate(section, name, alias, value)
        for key in alias.direct:
            direct.setdefault(key, []).append((name, value))
        for key in alias.fallback:
            weak.setdefault(key, []).append((name, value))
    for key in set(direct) | set(weak):
        setters = direct.get(key) or weak[key]
        if not all(_same(v, setters[0][1]) for _, v in setters):
            shown = ", ".join(f"{section}.{n}={v!r}" for n, v in setters)
            raise ConfigurationError(f"{section}.{key}: set to different values by {shown}")
        out[key] = setters[0][1]
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal values: ``0.2 == 0.2`` and ``1 == 1.0``, but ``True`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)
