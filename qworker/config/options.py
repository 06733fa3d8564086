"""Options of each process role: the one place each option is spelled.

``ProducerOptions``, ``PoolOptions`` and ``WorkerOptions`` are frozen,
keyword-only dataclasses built with ``qworker._options``.  Each field carries its
default, its type, its command-line flag and its help text; from that one definition come:

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

import dataclasses
import os
from dataclasses import dataclass
from typing import Optional

from .._exceptions import ConfigError
from .._options import _opt, _Options, positive_number
from ..transport.security import CurveClient, CurveServer
from ..transport.sockets import DEFAULT_MAX_MESSAGE_BYTES

MIN_MESSAGE_BYTES = 1 << 16  # the least frame limit: below it a worker's hello or a pool's status report may not pass

__all__ = ["ProducerOptions", "PoolOptions", "WorkerOptions", "DEFAULT_MAX_MESSAGE_BYTES", "MIN_MESSAGE_BYTES", "positive_number"]


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
    max_message_bytes: int = _opt(DEFAULT_MAX_MESSAGE_BYTES, "frame size cap, bytes (at least 65,536): the largest message "
                                  "received; producer and pools fit what they send to each other's", minimum=MIN_MESSAGE_BYTES)
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

    workers: Optional[int] = _opt(None, "worker processes, at least 1 (default: CPU count)", minimum=1)
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
