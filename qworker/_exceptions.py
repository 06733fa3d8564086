"""Exceptions raised by qworker.

Hierarchy::

    QworkerError
    ├── ConfigError          a config file, dict or argument is invalid
    │   └── CacheError       the result cache's file cannot be used (not an SQLite database, cannot be opened)
    ├── WireError            a frame failed to decode or failed its schema check
    ├── RewardError          a reward could not be registered or resolved
    ├── ProducerClosed       the producer was used after close()
    ├── PoolStartError       local workers did not come up (their stderr is attached)
    ├── GatherTimeout        gather() passed its deadline (also a TimeoutError)
    ├── ServiceUnavailable   a Client's reward service did not take a request (down, or no workers)
    └── CallFailed           a reward's HTTP call failed (inside a worker; carries the outcome)

A failed *task* never raises: it resolves to a ``Result`` whose ``error`` names
what happened.  These exceptions are for misuse and for broken set-ups.
"""

from __future__ import annotations

from ._errors import ErrorKind

__all__ = [
    "CacheError",
    "CallFailed",
    "ConfigError",
    "GatherTimeout",
    "PoolStartError",
    "ProducerClosed",
    "QworkerError",
    "RewardError",
    "ServiceUnavailable",
    "WireError",
]


class QworkerError(Exception):
    """Base class of every exception qworker raises."""


class ConfigError(QworkerError, ValueError):
    """A configuration value is missing, unknown or of the wrong type."""


class CacheError(ConfigError):
    """The result cache's file (``cache_path``, ``--cache``) cannot be used: it is not an SQLite
    database, or it cannot be opened.  The message names the file."""


class WireError(QworkerError, ValueError):
    """A frame is not a valid qworker message."""


class RewardError(QworkerError, LookupError):
    """A reward name or ``module:function`` path cannot be resolved."""


class ProducerClosed(QworkerError, RuntimeError):
    """The producer has been closed."""


class PoolStartError(QworkerError, RuntimeError):
    """Local workers failed to report READY in time."""


class GatherTimeout(QworkerError, TimeoutError):
    """``Producer.gather`` passed its timeout before every future resolved.

    The unfinished futures stay pending and may still resolve later.
    """

    def __init__(self, message: str, *, done: int, pending: int) -> None:
        super().__init__(message)
        self.done = done
        self.pending = pending


class ServiceUnavailable(QworkerError, RuntimeError):
    """A reward service did not accept a request: it did not answer, or has no workers."""


class CallFailed(QworkerError):
    """A reward's call to an endpoint failed; raised inside a worker.

    ``outcome`` tells the producer's gate what happened (endpoint, status,
    latency, Retry-After) so it can adapt the endpoint's limit and decide
    whether the task is retried; ``kind`` (an ``ErrorKind`` value) is the
    error kind if it is not.
    """

    def __init__(self, message: str, *, outcome: dict, kind: str = ErrorKind.JUDGE_ERROR) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.kind = kind
