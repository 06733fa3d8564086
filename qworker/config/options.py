"""Options of each process role: the one place each option is spelled.

``ProducerOptions``, ``PoolOptions`` and ``WorkerOptions`` are frozen,
keyword-only dataclasses.  Each field carries its default, its type, its
command-line flag and its help text; from that one definition come:

* validation of a YAML section (``from_mapping``: unknown keys, wrong types and
  negative numbers are ``ConfigError``\\s naming the file, section and key);
* the command-line flags of ``qworker-pool`` (``add_arguments``);
* the argv a parent builds to start a child (``to_argv``) and the child's
  parsing of it (``from_argv``), so a pool's option reaches its workers
  without being spelled again.

Options shared by several roles live in a common base class, so their
defaults are written once.  Times are seconds, sizes bytes or MiB as named.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, TypeVar

from .._exceptions import ConfigError
from ..transport.security import CurveClient, CurveServer

__all__ = ["ProducerOptions", "PoolOptions", "WorkerOptions", "DEFAULT_MAX_MESSAGE_BYTES"]

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

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
    values a string may take (given in any case, kept upper-case).  ``more``: metadata of a
    family of options of its own (``judge.settings``: where a setting applies, its bounds)."""
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
                raise ConfigError(f"{where}: unknown key {key!r}; known keys: {', '.join(sorted(fields))}")
            f, tp = fields[key]
            if value is not None:
                value = _coerce(value, tp, f"{where}.{key}", signed=f.metadata["signed"], positive=f.metadata["positive"])
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


def _coerce(value: Any, tp: Any, where: str, *, signed: bool, positive: bool = False) -> Any:
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
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0 and not signed:
        raise ConfigError(f"{where}: must not be negative, got {value!r}")
    if positive and not value > 0:
        raise ConfigError(f"{where}: must be above 0 seconds, got {value!r}")
    return value


# -- the roles -------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class _Shared(_Options):
    """Options the producer, its pools and their workers must agree on."""

    reward_modules: tuple[str, ...] = _opt((), "reward modules for workers to import (dotted names or .py paths); repeatable",
                                           aliases=("--rewards",))
    task_timeout_s: float = _opt(60.0, "default hard limit per task, seconds (a reward's own timeout wins)", flag="--timeout",
                                 positive=True)
    heartbeat_s: float = _opt(1.0, "liveness report interval, seconds; silent for 3 of these = lost", flag="--heartbeat",
                              positive=True)
    max_message_bytes: int = _opt(DEFAULT_MAX_MESSAGE_BYTES, "frame size cap, bytes; pools must use the producer's")
    curve_secret_key: Optional[str] = _opt(None, "CURVE: this process's secret key file (NAME.key_secret from 'qworker keys')")
    insecure: bool = _opt(False, "bind (producer) or connect (pool) beyond loopback without CURVE (a trusted network only)")


@dataclass(frozen=True, kw_only=True)
class ProducerOptions(_Shared):
    """``Producer(...)`` and the config's ``producer:`` section."""

    local_workers: Optional[int] = _opt(None, "worker processes started locally (default: CPU count, or 0 with --bind)", flag="--workers",
                                        aliases=("--local-workers",))
    bind: Optional[str] = _opt(None, "endpoint for remote pools, e.g. tcp://127.0.0.1:5555 (default: a private ipc:// socket)")
    cache_path: Optional[str] = _opt(None, "persistent SQLite result cache shared by processes on this host (default: none, memory only)",
                                     flag="--cache",
                                     aliases=("--cache-path",))
    cache_read: bool = _opt(True, "answer tasks from the result cache; --no-cache-read recomputes every task (results are still cached)")
    cache_max_entries: int = _opt(1_000_000, "memory LRU size, and the disk cache's row limit")
    cache_ttl_s: Optional[float] = _opt(None, "seconds a cached result stays valid (default: forever)", flag="--cache-ttl",
                                        aliases=("--cache-ttl-s",), positive=True)
    max_attempts: int = _opt(3, "deliveries of a task before it fails with worker_lost")
    fallback_score: float = _opt(0.0, "the score of a failed task (its Result.error says why)", signed=True)
    ready_timeout_s: float = _opt(60.0, "seconds Producer() waits for local workers to say READY", flag="--ready-timeout",
                                  aliases=("--ready-timeout-s",), positive=True)
    max_payload_bytes: int = _opt(8 * 1024 * 1024, "larger payloads fail with bad_payload at submit")
    metrics_port: Optional[int] = _opt(None, "serve Prometheus metrics on 127.0.0.1 at this port")
    curve_allowed_keys: Optional[str] = _opt(None, "CURVE: directory of the public keys of pools and clients to admit")

    def curve(self) -> Optional[CurveServer]:
        """The binding side's CURVE settings, or None; half a setting is a ``ConfigError``."""
        if (self.curve_secret_key is None) != (self.curve_allowed_keys is None):
            raise ConfigError("CURVE needs both curve_secret_key and curve_allowed_keys (or neither)")
        return CurveServer(self.curve_secret_key, self.curve_allowed_keys) if self.curve_secret_key and self.curve_allowed_keys else None

    def workers_to_start(self) -> int:
        if self.local_workers is not None:
            return self.local_workers
        return (os.cpu_count() or 1) if self.bind is None else 0


@dataclass(frozen=True, kw_only=True)
class _HostShared(_Shared):
    """Options a pool passes on to each of its workers."""

    connect: Optional[str] = _opt(None, "the producer's endpoint, e.g. tcp://HOST:5555")
    max_hold: int = _opt(512, "most tasks a worker holds at once (it asks for ~50 ms of work)")
    io_threads: int = _opt(128, "threads for kind='io' rewards (judge calls in flight) in each worker")
    log_level: str = _opt("INFO", "log messages of this level and above: DEBUG, INFO, WARNING, ERROR",
                          choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parent_pid: Optional[int] = _opt(None, "exit when this process is gone", yaml=False, cli=False)
    curve_server_key: Optional[str] = _opt(None, "CURVE: the producer's public key file (NAME.key)")

    def curve(self) -> Optional[CurveClient]:
        """The connecting side's CURVE settings, or None; half a setting is a ``ConfigError``."""
        if (self.curve_secret_key is None) != (self.curve_server_key is None):
            raise ConfigError("CURVE needs both curve_secret_key and curve_server_key (or neither)")
        return CurveClient(self.curve_secret_key, self.curve_server_key) if self.curve_secret_key and self.curve_server_key else None


@dataclass(frozen=True, kw_only=True)
class PoolOptions(_HostShared):
    """``qworker-pool`` flags and the config's ``pool:`` section."""

    workers: Optional[int] = _opt(None, "worker processes (default: CPU count)")
    pool_id: Optional[str] = _opt(None, "pool name shown by 'qworker status' (default: HOST-PID)", flag="--id")
    max_rss_mb: Optional[float] = _opt(None, "recycle a worker whose resident memory passes this, MiB")
    drain_timeout_s: float = _opt(30.0, "seconds to drain on SIGTERM before workers are killed", flag="--drain-timeout")

    def worker(self, *, worker_id: str, pool_id: str, slot_path: str, parent_pid: int) -> WorkerOptions:
        """The options of one of this pool's workers."""
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(_HostShared)}
        return WorkerOptions(**{**shared, "parent_pid": parent_pid}, worker_id=worker_id, pool_id=pool_id, slot_path=slot_path)


@dataclass(frozen=True, kw_only=True)
class WorkerOptions(_HostShared):
    """One worker process (``python -m qworker.host.worker``), started by its pool."""

    worker_id: str = _opt("", "this worker's identity on the producer's socket", flag="--id", yaml=False)
    pool_id: str = _opt("", "the pool it belongs to", flag="--pool", yaml=False)
    slot_path: Optional[str] = _opt(None, "its shared-memory busy slot, read by the pool's watchdog", flag="--slot", yaml=False)
    target_hold_s: float = _opt(0.05, "seconds of work a worker asks to hold", yaml=False)
