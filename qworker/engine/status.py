"""The shape of a producer's status: what ``Producer.status()``, ``qworker status``,
the Prometheus metrics and a reward service's status all read.

These ``TypedDict``\\s are the one definition of its keys: the modules that build
a status (``engine.dispatcher``, ``engine.fleet``, ``judge.control.gate``) and those that read it
(``cli.main``, ``engine.metrics``, ``service``) are type-checked against them.  Times are
seconds, sizes MiB where named.
"""

from __future__ import annotations

from typing import Optional, TypedDict

__all__ = ["Status", "ServiceStatus", "ProducerStatus", "PoolRow", "WorkerRow", "JudgeStatus", "EndpointRow"]


class WorkerRow(TypedDict):
    worker: str
    pid: int
    alive: bool
    in_flight: int
    quarantined: bool
    done: int
    failed: int
    restarts: int
    rss_mb: float
    busy_s: float


class PoolRow(TypedDict):
    pool: str
    host: str
    pid: int
    state: str  # running, draining, stopped, unknown
    last_seen_s: Optional[float]
    workers: list[WorkerRow]


class EndpointRow(TypedDict):
    endpoint: int
    url: str
    model: str
    state: str  # up, cooling, probing, down (why)
    in_flight: int
    limit: float
    weight: float
    priority: int
    requests: int
    ok: int
    status_429: int
    timeouts: int
    connect_errors: int
    other_errors: int
    retries: int
    latency_p50_s: float
    latency_p90_s: float
    latency_p99_s: float
    latency_gradient: float
    error_share: float
    paced_rpm: Optional[float]
    cool_reason: str
    other_producers: int  # producers on this host that share the endpoint (``judge.control.peers``)
    share: float  # what this producer may hold of the limit (the limit itself when alone)


class JudgeStatus(TypedDict):
    model: str
    queued: int
    delayed: int
    endpoints: list[EndpointRow]


class ProducerStatus(TypedDict):
    endpoint: str
    pid: int
    host: str
    uptime_s: float
    queued: int
    in_flight: int
    pending: int
    submitted: int
    rejected: int
    resolved: int
    failed: int
    cache_hits: int
    deduplicated: int
    cache_entries: int
    dropped_frames: int
    dropped_results: int  # results from quarantined or unknown peers: they resolve nothing
    duplicate_results: int
    redelivered: int
    # the disk cache tier (all 0 without one): rows handed to it and not yet committed, failed write
    # attempts (each retried), failed reads (answered as misses), damaged rows skipped, rows dropped
    # (over the bound of rows waiting for a failing disk, or refused by SQLite)
    cache_unwritten: int
    cache_write_errors: int
    cache_read_errors: int
    cache_corrupt_rows: int
    cache_rows_dropped: int


class Status(TypedDict):
    producer: ProducerStatus
    pools: list[PoolRow]
    judges: list[JudgeStatus]


class LedgerInfo(TypedDict):
    """Results kept for clients until acknowledged (``service.ledger``): kept now, and counts since start."""

    clients: int
    unacked: int  # Resolved messages not yet acknowledged
    unacked_bytes: int
    sent: int
    resent: int
    acked: int
    evicted: int  # dropped unacknowledged, past the ledger's bytes or age bound
    dropped_rows: int  # results for requests no longer held
    repeats: int  # repeated submissions answered without taking them twice


class ServiceInfo(TypedDict):
    endpoint: str
    instance: str
    clients: int
    requests: int
    dropped_frames: int
    http: Optional[str]  # the HTTP front's URL, None without one
    ledger: LedgerInfo


class ServiceStatus(Status):
    """A reward service's status: its producer's, and the service's own."""

    service: ServiceInfo
