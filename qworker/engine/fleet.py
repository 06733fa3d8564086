"""What the producer knows about its pools and workers: credit, leases, liveness.

Owned by the dispatcher thread; nothing here is locked.

A *lease* is a task sent to a worker and not yet answered.  It lasts while the
worker is alive: the worker's own messages and its pool's reports both renew
it.  A worker heard from by neither within ``heartbeat_timeout_s`` is lost, and
so are its leases (the dispatcher redelivers them).

``WorkerState.leases`` is the lease index, and only ``Pending``'s transitions
write it (``lease`` adds, every move out of LEASED removes): a task is in
``w.leases`` exactly while it is LEASED with ``holder`` ``w``.  Nothing here
ends a lease: ``remove`` and ``held`` name the tasks, and the scheduler moves
each one on (requeued, handed to its gate, or resolved).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..transport import wire
from .status import PoolRow, WorkerRow
from .task import Pending, WorkerState


@dataclass(slots=True, eq=False)
class PoolState:
    id: str
    host: str
    pid: int
    state: str = "running"
    last_seen: float = 0.0
    reports: dict[str, wire.WorkerReport] = field(default_factory=dict)


class Fleet:
    def __init__(self, *, heartbeat_timeout_s: float) -> None:
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.workers: dict[str, WorkerState] = {}
        self.pools: dict[str, PoolState] = {}
        self.retired: set[str] = set()  # workers that said BYE or were declared lost
        # Quarantine is by identity and outlives the WorkerState: a peer that says BYE then READY,
        # or is lost and comes back, is still sent nothing.  (A pool's respawned worker has a new id.)
        self.quarantined: set[str] = set()

    def on_ready(self, msg: wire.Ready, now: float) -> tuple[WorkerState, bool]:
        """Record a READY; returns the worker and whether it is new."""
        w = self.workers.get(msg.worker)
        new = w is None
        if w is None:
            if msg.worker in self.retired:
                self.retired.discard(msg.worker)  # it came back (e.g. after a network partition)
            w = WorkerState(msg.worker, msg.pool, msg.pid, msg.host, sent=msg.received, quarantined=msg.worker in self.quarantined)
            self.workers[msg.worker] = w
        w.sync_credit(msg.granted, msg.received)
        w.max_message_bytes = msg.max_message_bytes
        w.last_seen = now
        return w, new

    def quarantine(self, w: WorkerState) -> None:
        """Send ``w`` nothing more, and accept no result from it, for as long as this producer runs."""
        w.quarantined = True
        self.quarantined.add(w.id)

    def on_pool_report(self, msg: wire.PoolReport, now: float) -> PoolState:
        p = self.pools.get(msg.pool)
        if p is None:
            p = self.pools[msg.pool] = PoolState(msg.pool, msg.host, msg.pid)
        p.state, p.last_seen = msg.state, now
        p.reports = {r.worker: r for r in msg.workers}
        for r in msg.workers:
            w = self.workers.get(r.worker)
            if w is not None and r.alive:
                w.last_seen = now
        return p

    def supervised(self, w: WorkerState, now: float) -> bool:
        """Whether a pool vouches for ``w``: its latest report, within the heartbeat timeout, lists it alive."""
        pool = self.pools.get(w.pool)
        if pool is None or now - pool.last_seen > self.heartbeat_timeout_s:
            return False
        report = pool.reports.get(w.id)
        return report is not None and report.alive

    def silent_workers(self, now: float) -> list[WorkerState]:
        return [w for w in self.workers.values() if now - w.last_seen > self.heartbeat_timeout_s]

    def drop_silent_pools(self, now: float) -> None:
        for pid in [p.id for p in self.pools.values() if now - p.last_seen > self.heartbeat_timeout_s]:
            del self.pools[pid]

    def remove(self, worker: WorkerState) -> list[Pending]:
        """Forget a worker; returns the tasks it holds (still LEASED: the caller moves each one on)."""
        self.workers.pop(worker.id, None)
        self.retired.add(worker.id)
        return self.held(worker)

    @staticmethod
    def held(worker: WorkerState) -> list[Pending]:
        """The tasks ``worker`` holds, oldest lease first (a copy: moving them on empties ``worker.leases``)."""
        return list(worker.leases.values())

    def with_credit(self) -> list[WorkerState]:
        return [w for w in self.workers.values() if w.granted > w.sent and not w.quarantined]

    def snapshot(self) -> list[PoolRow]:
        """Pools and their workers, for ``qworker status``."""
        now = time.monotonic()
        out: list[PoolRow] = []
        pool_ids = list(self.pools) + sorted({w.pool for w in self.workers.values()} - set(self.pools))
        for pool_id in pool_ids:
            p = self.pools.get(pool_id)
            rows: list[WorkerRow] = []
            ids = set(p.reports) if p else set()
            ids |= {w.id for w in self.workers.values() if w.pool == pool_id}
            for wid in sorted(ids):
                w = self.workers.get(wid)
                r = p.reports.get(wid) if p else None
                if w is None and r is not None and not r.alive:
                    continue  # a dead generation the pool has replaced
                rows.append({
                    "worker": wid,
                    "pid": (r.pid if r else w.pid if w else 0),
                    "alive": bool(w is not None and (r is None or r.alive)),
                    "in_flight": len(w.leases) if w else 0,
                    "quarantined": bool(w and w.quarantined),
                    "done": w.done if w else 0,
                    "failed": w.failed if w else 0,
                    "restarts": r.restarts if r else 0,
                    "rss_mb": round(r.rss_mb, 1) if r else 0.0,
                    "busy_s": round(r.busy_s, 2) if r else 0.0,
                })
            out.append({
                "pool": pool_id,
                "host": p.host if p else "",
                "pid": p.pid if p else 0,
                "state": p.state if p else "unknown",
                "last_seen_s": round(now - p.last_seen, 2) if p else None,
                "workers": rows,
            })
        return out
