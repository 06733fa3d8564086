"""YAML configuration: one file with ``producer:``, ``pool:``, ``judges:`` and ``rewards:`` sections.

``producer:`` and ``pool:`` are checked against ``ProducerOptions`` and
``PoolOptions`` (``config.options``), which own every key, type and default.
Unknown keys and wrong types are errors that name the file, the section and
the key: a typo never silently falls back to a default.  ``judges:`` (named LLM
judges, which rewards name) is checked by ``config.judges``; ``rewards:`` (the
reward catalog) by ``registry.catalog.Catalog``.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Union

import yaml

from .._exceptions import ConfigError
from .judges import check_section as check_judges
from .options import PoolOptions, ProducerOptions, _Options

SECTIONS: dict[str, type[_Options]] = {"producer": ProducerOptions, "pool": PoolOptions}


def load(source: Union[str, os.PathLike, Mapping[str, Any], None]) -> dict[str, Any]:
    """Read and check a config; returns ``{"producer": {...}, "pool": {...}, "judges": {...}, "rewards": {...}, "where": str}``.

    ``judges`` maps each judge's name to its checked params (``config.judges``); the ``rewards:`` section
    is checked by ``registry.catalog.Catalog``.
    """
    if source is None:
        return {**{name: {} for name in SECTIONS}, "judges": {}, "rewards": {}, "where": "config"}
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
    unknown = set(data) - set(SECTIONS) - {"judges", "rewards"}
    if unknown:
        raise ConfigError(f"{where}: unknown section(s) {sorted(unknown)}; expected {sorted([*SECTIONS, 'judges', 'rewards'])}")
    rewards = data.get("rewards") or {}
    if not isinstance(rewards, dict):
        raise ConfigError(f"{where}: section 'rewards' must be a mapping")
    out: dict[str, Any] = {"rewards": rewards, "judges": check_judges(data.get("judges"), f"{where}: judges"), "where": where}
    for name, options in SECTIONS.items():
        section = data.get(name) or {}
        if not isinstance(section, dict):
            raise ConfigError(f"{where}: section '{name}' must be a mapping")
        out[name] = options.check_mapping(section, f"{where}: {name}")
    return out


def optional_path(value: Optional[str]) -> Optional[str]:
    return os.path.expanduser(value) if value else None
