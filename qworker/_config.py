"""YAML configuration: one file with a ``producer:`` and a ``pool:`` section.

Each section maps onto the keyword arguments of ``Producer`` and ``Pool``.
Unknown keys and wrong types are errors that name the file, the section and
the key: a typo never silently falls back to a default.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Union

import yaml

from ._exceptions import ConfigError

# key -> accepted types; None is always accepted and means "the default"
PRODUCER_KEYS: dict[str, tuple[type, ...]] = {
    "local_workers": (int,),
    "bind": (str,),
    "rewards": (list,),
    "cache_path": (str,),
    "cache_max_entries": (int,),
    "cache_ttl_s": (int, float),
    "max_attempts": (int,),
    "task_timeout_s": (int, float),
    "fallback_score": (int, float),
    "heartbeat_s": (int, float),
    "ready_timeout_s": (int, float),
    "max_payload_bytes": (int,),
    "max_message_bytes": (int,),
    "metrics_port": (int,),
}
POOL_KEYS: dict[str, tuple[type, ...]] = {
    "connect": (str,),
    "workers": (int,),
    "rewards": (list,),
    "pool_id": (str,),
    "max_rss_mb": (int, float),
    "task_timeout_s": (int, float),
    "heartbeat_s": (int, float),
    "drain_timeout_s": (int, float),
    "max_hold": (int,),
    "io_threads": (int,),
    "log_level": (str,),
    "max_message_bytes": (int,),
}
SECTIONS = {"producer": PRODUCER_KEYS, "pool": POOL_KEYS}
SIGNED = {"fallback_score"}  # every other number must be >= 0


def load(source: Union[str, os.PathLike, Mapping[str, Any], None]) -> dict[str, Any]:
    """Read and check a config; returns ``{"producer": {...}, "pool": {...}, "rewards": {...}, "where": str}``.

    The ``rewards:`` section is checked by ``_catalog.Catalog``.
    """
    if source is None:
        return {**{name: {} for name in SECTIONS}, "rewards": {}, "where": "config"}
    where = "config"
    if isinstance(source, Mapping):
        data: Any = dict(source)
    else:
        where = os.fspath(source)
        try:
            with open(where, encoding="utf-8") as f:
                data = yaml.safe_load(f)
        except OSError as exc:
            raise ConfigError(f"cannot read config {where}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config {where} is not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be a mapping, not {type(data).__name__}")
    unknown = set(data) - set(SECTIONS) - {"rewards"}
    if unknown:
        raise ConfigError(f"{where}: unknown section(s) {sorted(unknown)}; expected {sorted([*SECTIONS, 'rewards'])}")
    rewards = data.get("rewards") or {}
    if not isinstance(rewards, dict):
        raise ConfigError(f"{where}: section 'rewards' must be a mapping")
    out: dict[str, Any] = {"rewards": rewards, "where": where}
    for name, keys in SECTIONS.items():
        section = data.get(name) or {}
        if not isinstance(section, dict):
            raise ConfigError(f"{where}: section '{name}' must be a mapping")
        out[name] = check_section(section, keys, f"{where}: {name}")
    return out


def check_section(section: Mapping[str, Any], keys: Mapping[str, tuple[type, ...]], where: str) -> dict[str, Any]:
    out = {}
    for key, value in section.items():
        if key not in keys:
            raise ConfigError(f"{where}: unknown key {key!r}; known keys: {', '.join(sorted(keys))}")
        types = keys[key]
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            names = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"{where}.{key}: expected {names}, got {type(value).__name__} {value!r}")
        if isinstance(value, (int, float)) and value < 0 and key not in SIGNED:
            raise ConfigError(f"{where}.{key}: must not be negative, got {value!r}")
        out[key] = value
    return out


def merge(explicit: Mapping[str, Any], from_config: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Explicit arguments win over the config file, which wins over defaults."""
    merged = dict(defaults)
    merged.update({k: v for k, v in from_config.items() if v is not None})
    merged.update({k: v for k, v in explicit.items() if v is not None})
    return merged


def optional_path(value: Optional[str]) -> Optional[str]:
    return os.path.expanduser(value) if value else None
