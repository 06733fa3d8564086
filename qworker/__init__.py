"""qworker: reward computation for RL training on a pool of worker processes.

    from qworker import Producer, reward

    @reward("my_reward")
    def my_reward(payload: dict) -> float: ...

    with Producer(local_workers=4) as p:
        futs = p.submit_batch("my_reward", payloads)   # returns at once
        results = p.gather(futs, timeout=300)          # list[Result], in order
"""

from ._errors import ErrorKind
from ._exceptions import (
    CacheError,
    ConfigError,
    GatherTimeout,
    PoolStartError,
    ProducerClosed,
    QworkerError,
    RewardError,
    ServiceUnavailable,
    WireError,
)
from ._version import __version__ as __version__
from .config.options import PoolOptions, ProducerOptions
from .engine.producer import Producer
from .engine.result import Result, ResultFuture
from .registry.registry import reward
from .service.client import Client

__all__ = [
    "CacheError",
    "Client",
    "ConfigError",
    "ErrorKind",
    "GatherTimeout",
    "PoolOptions",
    "PoolStartError",
    "Producer",
    "ProducerOptions",
    "ProducerClosed",
    "QworkerError",
    "Result",
    "ResultFuture",
    "RewardError",
    "ServiceUnavailable",
    "WireError",
    "reward",
]
