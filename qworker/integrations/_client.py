"""The one client every adapter scores through: a process-wide, lazily made object.

``reward_client()`` returns an object with ``Producer``'s API (``submit_batch``
returning ``ResultFuture``\\s, ``gather``).  Which object, in this order:

1. one given to ``use_client(obj)`` (a ``Producer`` or ``Client`` you made);
2. ``qworker.Client(connect=$QWORKER_CONNECT)`` when ``QWORKER_CONNECT`` is set
   (a ``qworker serve`` service): every rank of every framework then shares one
   service, one cache and one limit per judge endpoint;
3. otherwise one embedded ``Producer`` per process, started on first use with
   ``config=$QWORKER_CONFIG`` (a YAML path; its ``producer:`` and ``rewards:``
   sections apply) and ``local_workers=$QWORKER_WORKERS`` (when set), closed
   at interpreter exit.

The cached object belongs to the process that made it: a forked child makes
its own.  Safe to call from any thread.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any, Optional, Protocol, Sequence

from ..engine.producer import Producer
from ..engine.result import Result, ResultFuture
from ..service.client import Client

__all__ = [
    "RewardClient", "reward_client", "current_client", "use_client", "close_client", "ENV_CONNECT", "ENV_CONFIG", "ENV_WORKERS"]

ENV_CONNECT = "QWORKER_CONNECT"
ENV_CONFIG = "QWORKER_CONFIG"
ENV_WORKERS = "QWORKER_WORKERS"


class RewardClient(Protocol):
    """What the adapters use of ``Producer`` / ``Client``."""

    def submit_batch(self, reward: str, payloads: Sequence[Any], *, params: Optional[dict] = None) -> list[ResultFuture]: ...

    def gather(self, futures: Sequence[ResultFuture], timeout: Optional[float] = None) -> list[Result]: ...


_lock = threading.Lock()
_client: Optional[Any] = None
_owner_pid = 0
_owned = False  # made here (closed at exit), not given to use_client
_atexit_registered = False


def reward_client() -> RewardClient:
    """The process-wide client (see the module docstring for which one)."""
    global _client, _owner_pid, _owned, _atexit_registered
    with _lock:
        if _client is not None and _owner_pid == os.getpid():
            return _client
        _client, _owned = _make(), True
        _owner_pid = os.getpid()
        if not _atexit_registered:
            atexit.register(close_client)
            _atexit_registered = True
        return _client


def current_client() -> Optional[RewardClient]:
    """The process-wide client if one is given or made in this process already, else None (makes none)."""
    with _lock:
        return _client if _client is not None and _owner_pid == os.getpid() else None


def use_client(client: Optional[RewardClient]) -> None:
    """Make ``client`` the process-wide client (None forgets it).  The caller keeps
    ownership: it is not closed here, nor at exit."""
    global _client, _owner_pid, _owned
    with _lock:
        _client, _owner_pid, _owned = client, os.getpid(), False


def close_client() -> None:
    """Close the client this module made in this process, if any, and forget it."""
    global _client, _owned
    with _lock:
        client, owned = _client, _owned and _owner_pid == os.getpid()
        _client, _owned = None, False
    if client is not None and owned:
        client.close()


def _make() -> Any:
    connect = os.environ.get(ENV_CONNECT)
    if connect:
        return Client(connect=connect)
    overrides: dict[str, Any] = {}
    workers = os.environ.get(ENV_WORKERS)
    if workers:
        try:
            overrides["local_workers"] = int(workers)
        except ValueError:
            raise RuntimeError(f"{ENV_WORKERS} must be an integer, got {workers!r}") from None
    return Producer(config=os.environ.get(ENV_CONFIG) or None, **overrides)
