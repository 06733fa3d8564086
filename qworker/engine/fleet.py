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

Pools may state different frame limits (``Ready.max_message_bytes``).  ``widest``
is the largest a worker may soon receive: a pool's limit is remembered for a
heartbeat timeout after the pool or one of its workers was last heard from, so a
task too big for a narrow worker is kept while a wide pool restarts or respawns a
worker (not while every live worker it reports is quarantined: none will take
it), and the producer's own limit counts for a heartbeat timeout after the fleet
starts (``started``: other pools may still be starting).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

from ..config.options import MIN_MESSAGE_BYTES
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
        # pool -> (the frame limit its workers last stated, bytes, 0 for none said; when the pool or one of its workers
        # was last heard from, s): ``widest`` counts it for a heartbeat timeout after that
        self.limits: dict[str, tuple[int, float]] = {}
        # when the fleet last started: a worker not quarantined said Ready while none was connected and no pool's limit
        # had been heard from within the heartbeat timeout
        self.started: Optional[float] = None

    def on_ready(self, msg: wire.Ready, now: float) -> tuple[WorkerState, bool]:
        """Record a READY; returns the worker and whether it is new."""
        w = self.workers.get(msg.worker)
        new = w is None
        if msg.worker not in self.quarantined and not self._heard_from(now):
            self.started = now  # the fleet starts (again): other pools may still be starting (``widest``)
        if w is None:
            if msg.worker in self.retired:
                self.retired.discard(msg.worker)  # it came back (e.g. after a network partition)
            w = WorkerState(msg.worker, msg.pool, msg.pid, msg.host, sent=msg.received, quarantined=msg.worker in self.quarantined)
            self.workers[msg.worker] = w
        w.sync_credit(msg.granted, msg.received)
        # its socket's limit: none is under the least a process accepts (a lower one is a peer's mistake)
        w.max_message_bytes = max(msg.max_message_bytes, MIN_MESSAGE_BYTES) if msg.max_message_bytes else 0
        w.last_seen = now
        if not w.quarantined:
            self.limits[w.pool] = (w.max_message_bytes, now)
        return w, new

    def _heard_from(self, now: float) -> bool:
        """Whether a worker not quarantined is connected, or a pool's limit was heard from within the heartbeat
        timeout before ``now`` (s): if neither, the fleet is (re)starting."""
        since = now - self.heartbeat_timeout_s
        return (any(not w.quarantined for w in self.workers.values())
                or any(heard >= since for _, heard in self.limits.values()))

    def widest(self, own: int, now: float) -> int:
        """The largest frame limit, bytes, of a worker that may receive a task soon, ``now`` (s, monotonic): the largest
        of those of the workers connected and not quarantined, and of the limit each pool's workers last stated, for
        ``heartbeat_timeout_s`` after that pool or one of its workers was last heard from.  ``own`` (the producer's
        limit) is the most it returns, and it counts for a worker that states none; it is returned for
        ``heartbeat_timeout_s`` after the fleet starts (``started``: other pools may still be starting), and when no limit is
        known (no worker heard from in that window: a task waits for the next).  A task over it, less the message's
        overhead and the transport's framing, fits no frame a worker may soon receive."""
        if self.started is not None and now - self.started <= self.heartbeat_timeout_s:
            return own
        widest = 0
        for w in self.workers.values():
            if not w.quarantined:
                widest = max(widest, min(own, w.max_message_bytes or own))
        since = now - self.heartbeat_timeout_s
        for limit, heard in self.limits.values():
            if heard >= since:
                widest = max(widest, min(own, limit or own))
        return widest or own

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
        limit = self.limits.get(msg.pool)
        alive = [r.worker for r in msg.workers if r.alive]
        if limit is not None and (not alive or any(wid not in self.quarantined for wid in alive)):
            # (a pool whose every live worker is quarantined will send this producer none: its limit stops counting)
            self.limits[msg.pool] = (limit[0], now)
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
        for pid in [pid for pid, (_, heard) in self.limits.items() if now - heard > self.heartbeat_timeout_s]:
            del self.limits[pid]

    def remove(self, worker: WorkerState) -> list[Pending]:
        """Forget a worker; returns the tasks it holds (still LEASED: the caller moves each one on).  Its pool's limit
        is remembered as last heard from at its last message at the latest (``widest``)."""
        self.workers.pop(worker.id, None)
        limit = self.limits.get(worker.pool)
        if not worker.quarantined and (limit is None or limit[1] < worker.last_seen):
            # (an entry dropped while the worker was busy comes back: its Results are heard from, and refresh none)
            self.limits[worker.pool] = (limit[0] if limit else worker.max_message_bytes, worker.last_seen)
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
