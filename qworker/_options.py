"""The options machinery: frozen, keyword-only dataclasses whose fields carry their own metadata.

Each field (``_opt``) carries its default, its type, its command-line flag and its help text; from
that one definition ``_Options`` gives:

* validation of a YAML section (``check_mapping``/``from_mapping``: unknown keys, wrong types and
  negative numbers are ``ConfigError``\\s naming the file, section and key);
* command-line flags (``add_arguments``, ``from_args``);
* the argv a parent builds to start a child (``to_argv``) and the child's parsing of it
  (``from_argv``), so an option reaches a child process without being spelled again.

A leaf module (it imports only ``_exceptions``): the process roles (``config.options``) and a
judge's options (``judge.settings``) are built with it without importing each other.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, TypeVar

from ._exceptions import ConfigError

__all__ = ["positive_number"]

_O = TypeVar("_O", bound="_Options")


def positive_number(text: str) -> float:
    """An argparse ``type`` for durations and limits: a finite number above 0 (``--timeout 0`` would mean nothing)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be above 0 seconds, got {text!r}")
    return value


def _opt(
    default: Any, help: str, *, flag: Optional[str] = None, aliases: tuple[str, ...] = (), yaml: bool = True, cli: bool = True,
    signed: bool = False, positive: bool = False, choices: Optional[tuple[str, ...]] = None, **more: Any,
) -> Any:
    """A field with its metadata: ``flag`` (default ``--name-with-dashes``) and older
    ``aliases`` (still accepted, hidden from ``--help``), whether a YAML section may
    set it, whether users see it on the command line, whether it may be negative,
    whether it must be above 0 (a duration for which 0 would mean nothing), and the
    values a string may take (given in any case, kept upper-case).  ``more``: further metadata:
    ``minimum``, the least value a number may take (checked as it is coerced, from YAML, a
    flag or a keyword), and a family of options' own (``judge.settings``: where a setting
    applies, its bounds)."""
    meta = {"help": help, "flag": flag, "aliases": aliases, "yaml": yaml, "cli": cli, "signed": signed, "positive": positive,
            "choices": choices, **more}
    return field(default=default, metadata=meta)


def _base_type(tp: Any) -> Any:
    """``Optional[X]`` -> ``X``; ``tuple[str, ...]`` -> ``tuple``; ``list[dict]`` -> ``list``."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is typing.Union and len(args) == 1:
        tp = args[0]
    return typing.get_origin(tp) or tp


_FIELDS: dict[type, tuple[tuple[dataclasses.Field, Any], ...]] = {}  # each options class's fields, worked out once


@dataclass(frozen=True, kw_only=True)
class _Options:
    @classmethod
    def _fields(cls) -> tuple[tuple[dataclasses.Field, Any], ...]:
        """Each field with its base type (``_base_type``), in declaration order; computed once per class."""
        fields = _FIELDS.get(cls)
        if fields is None:
            hints = typing.get_type_hints(cls)
            fields = _FIELDS[cls] = tuple((f, _base_type(hints[f.name])) for f in dataclasses.fields(cls))
        return fields

    @classmethod
    def yaml_keys(cls) -> list[str]:
        return [f.name for f, _ in cls._fields() if f.metadata["yaml"]]

    @classmethod
    def check_mapping(cls, section: Mapping[str, Any], where: str, *, internal: bool = False) -> dict[str, Any]:
        """Type-check a YAML section (with ``internal``, any field); returns it with lists as
        tuples.  None means "the default"."""
        fields = {f.name: (f, tp) for f, tp in cls._fields() if internal or f.metadata["yaml"]}
        out: dict[str, Any] = {}
        for key, value in section.items():
            if key not in fields:
                near = difflib.get_close_matches(str(key), fields, 1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise ConfigError(f"{where}: unknown key {key!r}; known keys: {', '.join(sorted(fields))}{hint}")
            f, tp = fields[key]
            if value is not None:
                value = _coerce(value, tp, f"{where}.{key}", signed=f.metadata["signed"], positive=f.metadata["positive"],
                                minimum=f.metadata.get("minimum"))
            out[key] = value
        return out

    @classmethod
    def from_mapping(cls: type[_O], *layers: Mapping[str, Any], where: str = "config", internal: bool = False) -> _O:
        """Options from checked layers of values, later layers winning; None values are skipped."""
        merged: dict[str, Any] = {}
        for layer in layers:
            merged.update(cls.check_mapping({k: v for k, v in layer.items() if v is not None}, where, internal=internal))
        return cls(**merged)

    # command line ------------------------------------------------------------
    @classmethod
    def add_arguments(cls, parser: Any, *, skip: tuple[str, ...] = ()) -> None:
        """Add a flag per option (but those in ``skip``), default None ("not given"); a boolean is
        ``--flag``/``--no-flag``; options users do not set, and older spellings, are hidden."""
        for f, tp in cls._fields():
            if f.name in skip:
                continue
            help = f.metadata["help"]
            if f.default is not None and f.default != () and "default" not in help:  # 0.0 and False are shown too
                help += f" (default: {('on' if f.default else 'off') if isinstance(f.default, bool) else f.default})"
            kw: dict[str, Any] = {"dest": f.name, "default": None, "help": help if f.metadata["cli"] else argparse.SUPPRESS}
            if tp is tuple:
                kw["action"] = "append"
            elif tp is bool:
                kw["action"] = argparse.BooleanOptionalAction
            else:
                kw["type"] = positive_number if f.metadata["positive"] else _parser_type(tp)
                kw["metavar"] = "S" if f.name.endswith("_s") else _flag(f)[2:].upper().replace("-", "_")
                if f.metadata["choices"]:
                    kw["type"], kw["choices"], kw["metavar"] = str.upper, f.metadata["choices"], "LEVEL"
            parser.add_argument(_flag(f), **kw)
            for alias in f.metadata["aliases"]:
                parser.add_argument(alias, **{**kw, "help": argparse.SUPPRESS, "default": argparse.SUPPRESS})

    @classmethod
    def given(cls, args: argparse.Namespace) -> dict[str, Any]:
        """The options the command line set, by field name (a flag equal to its default included)."""
        given: dict[str, Any] = {}
        for f, tp in cls._fields():
            value = getattr(args, f.name, None)
            if value is None:
                continue
            if tp is tuple:
                value = tuple(m for v in value for m in str(v).split(",") if m)
            given[f.name] = value
        return given

    @classmethod
    def from_args(cls: type[_O], args: argparse.Namespace, *layers: Mapping[str, Any], where: str = "command line") -> _O:
        """Options from parsed flags over ``layers`` (e.g. a config file's section)."""
        return cls.from_mapping(*layers, cls.given(args), where=where, internal=True)

    def to_argv(self) -> list[str]:
        """Flags that rebuild these options in a child process (``from_argv``)."""
        argv: list[str] = []
        for f, tp in self._fields():
            value = getattr(self, f.name)
            if value is None or value == f.default:
                continue
            if tp is tuple:
                if value:
                    argv += [_flag(f), ",".join(value)]
            elif tp is bool:
                argv.append(_flag(f) if value else "--no-" + _flag(f)[2:])
            else:
                argv += [_flag(f), repr(value) if tp is float else str(value)]
        return argv

    @classmethod
    def from_argv(cls: type[_O], argv: list[str], prog: str) -> _O:
        parser = argparse.ArgumentParser(prog=prog)
        cls.add_arguments(parser)
        return cls.from_args(parser.parse_args(argv), where=prog)

    def replace(self: _O, **changes: Any) -> _O:
        return dataclasses.replace(self, **changes)


def _flag(f: dataclasses.Field) -> str:
    return f.metadata["flag"] or f"--{f.name.replace('_', '-')}"


def _parser_type(tp: Any) -> Any:
    return tp


def _coerce(value: Any, tp: Any, where: str, *, signed: bool, positive: bool = False, minimum: Optional[float] = None) -> Any:
    """``value`` as an option of type ``tp`` (``where`` names it in errors): not negative unless ``signed``, above 0 if
    ``positive``, at least ``minimum`` (the field's ``_opt(..., minimum=...)``) if given."""
    if tp is list:  # a list of mappings (a judge's endpoints); that it has some, and what each holds, is the family's own check
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a non-empty list of mappings, got {type(value).__name__} {value!r}")
        return list(value)
    if tp is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: expected a list of strings, got {type(value).__name__} {value!r}")
        return tuple(value)
    ok = isinstance(value, bool) if tp is bool else (
        isinstance(value, (int, float)) and not isinstance(value, bool) if tp is float else isinstance(value, tp) and not isinstance(value, bool)
    )
    if not ok:
        name = "number" if tp is float else tp.__name__
        raise ConfigError(f"{where}: expected {name}, got {type(value).__name__} {value!r}")
    if tp is float:
        value = float(value)
    if minimum is None and isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0 and not signed:
        raise ConfigError(f"{where}: must not be negative, got {value!r}")
    if positive and not value > 0:
        raise ConfigError(f"{where}: must be above 0 seconds, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{where}: must be at least {minimum:,}, got {value!r}")
    return value
