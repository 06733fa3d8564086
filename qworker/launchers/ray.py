"""One ``qworker-pool`` per node of a Ray cluster, kept alive while nodes come and go.

    from qworker import PoolOptions
    from qworker.launchers.ray import RayPools

    with RayPools(connect="tcp://HEAD:5555", options=PoolOptions(reward_modules=("mypkg.rewards",))) as pools:
        ...                     # the producer's tasks now run on every node

For each alive node in ``ray.nodes()`` a Ray actor is pinned to that node with
``NodeAffinitySchedulingStrategy(node_id, soft=False)``, and the actor runs the
pool supervisor as a child process (``PoolProcess``: ``python -m qworker pool``
with ``options.to_argv()``), so its signal handling, worker spawning and
hard-timeout watchdog are those of a daemon.  The supervisor is told the actor's
pid (``parent_pid``): if the actor dies, the pool drains and exits by itself.

A background thread re-polls ``ray.nodes()`` every ``poll_s`` seconds: a node that
joins gets a pool, a node that leaves has its pool forgotten, and a pool whose
actor or supervisor died is started again after a backoff (1 s doubling to 32 s
while it keeps failing; reset once a pool has run for ``STABLE_S``).  ``stop()``
(and leaving the ``with`` block, and interpreter exit) sends SIGTERM to every
supervisor, which drains its workers, then kills the actors: nothing is left.

Ray is imported here only, when a launcher starts.  Pool options pass through as
a ``PoolOptions``, untouched but for what the launcher owns: ``connect``,
``workers``, ``pool_id`` (per node) and ``parent_pid`` (per actor).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from ..config.extras import MissingExtra, need
from ..config.options import PoolOptions
from ..host.process import PoolProcess

__all__ = ["NoRay", "PoolInfo", "RayPools", "import_ray", "start_pools"]

log = logging.getLogger("qworker.ray")

DEFAULT_POLL_S = 2.0
STABLE_S = 60.0  # a pool that ran this long resets its restart backoff
BACKOFF_S = (1.0, 32.0)  # first restart delay, and the cap while a pool keeps failing
STOP_MARGIN_S = 10.0  # beyond the drain timeout, for a supervisor to exit and report


def import_ray() -> Any:
    """``ray``, or ``MissingExtra`` (a ``ConfigError`` and an ``ImportError``) naming the ``ray`` extra."""
    try:
        return need("ray", "ray", "the Ray launcher")
    except MissingExtra as exc:
        raise NoRay(str(exc)) from None


# -- the actor: one per node ----------------------------------------------------------
class _PoolActor:
    """Body of the per-node actor (made a Ray actor by ``_actor_class``): runs one pool
    supervisor as its child process and reports on it."""

    def __init__(self, options: PoolOptions) -> None:
        self.options = options.replace(parent_pid=os.getpid())
        self.process = PoolProcess(self.options)

    def describe(self) -> dict[str, Any]:
        """Where this pool runs: ``node_id``, ``actor_pid`` and the supervisor's ``pid``."""
        ray = import_ray()
        return {"node_id": ray.get_runtime_context().get_node_id(), "actor_pid": os.getpid(), "pid": self.process.pid}

    def exit_code(self) -> Optional[int]:
        """None while the supervisor runs."""
        return self.process.exit_code()

    def stop(self, timeout_s: float) -> Optional[int]:
        """SIGTERM the supervisor (it drains its workers); kill it after ``timeout_s`` seconds."""
        self.process.stop(timeout_s)
        return self.process.exit_code()


_ACTOR_CLASS: Any = None


def _actor_class() -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        _ACTOR_CLASS = import_ray().remote(max_restarts=0, max_concurrency=1)(_PoolActor)
    return _ACTOR_CLASS


# -- the launcher ---------------------------------------------------------------------
@dataclass(frozen=True)
class PoolInfo:
    """One node's pool, as the launcher last saw it.

    ``state``: ``starting`` (actor not yet placed or started), ``running``,
    ``restarting`` (dead; started again at the next backoff deadline).
    ``pid`` and ``actor_pid`` are on the node's host; None until started.
    """

    node_id: str
    host: str
    pool_id: str
    workers: int
    state: str
    restarts: int
    pid: Optional[int]
    actor_pid: Optional[int]


@dataclass
class _Slot:
    node_id: str
    host: str
    workers: int
    restarts: int = 0
    failures: int = 0  # consecutive, for the backoff
    actor: Any = None
    pool_id: str = ""
    probe: Any = None  # an outstanding ObjectRef: describe() first, then exit_code()
    described: dict[str, Any] = field(default_factory=dict)
    started: float = 0.0
    restart_at: Optional[float] = None


def _short_host(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name.split(".")[0] or "node")


class RayPools:
    """One pool per alive Ray node, for as long as this object is started.

    ``connect``: the producer's endpoint (default ``options.connect``).
    ``workers_per_node``: workers of each pool (default ``options.workers``, else the
    node's CPU resource, rounded down; a node with fewer than 1 CPU gets no pool).
    ``options``: every other pool option, passed through; ``options.pool_id`` (if
    set) prefixes the pool ids, which are ``PREFIX-HOST-NODEID8`` (``-rN`` after the
    N-th restart), ``PREFIX`` defaulting to ``ray``.
    ``reserve_cpus``: each actor holds as many Ray CPUs as its pool has workers, so
    Ray schedules no other CPU work there (default: 0 CPUs, a sidecar).
    ``poll_s``: seconds between looks at ``ray.nodes()`` and at the pools.
    ``address``: passed to ``ray.init`` if Ray is not yet initialised in this process.
    ``ready_timeout_s``: how long ``start()`` waits for the first pools to start.
    """

    def __init__(
        self,
        connect: Optional[str] = None,
        workers_per_node: Optional[int] = None,
        options: Optional[PoolOptions] = None,
        *,
        reserve_cpus: bool = False,
        poll_s: float = DEFAULT_POLL_S,
        address: Optional[str] = None,
        ready_timeout_s: float = 120.0,
    ) -> None:
        self.options = options or PoolOptions()
        self.connect = connect or self.options.connect
        if not self.connect:
            raise ValueError("RayPools needs the producer's endpoint: connect='tcp://HOST:PORT'")
        if workers_per_node is not None and workers_per_node < 1:
            raise ValueError(f"workers_per_node must be at least 1, got {workers_per_node}")
        self.workers_per_node = workers_per_node if workers_per_node is not None else self.options.workers
        self.reserve_cpus = reserve_cpus
        self.poll_s = poll_s
        self.address = address
        self.ready_timeout_s = ready_timeout_s
        self._slots: dict[str, _Slot] = {}
        self._skipped: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = False

    # public ------------------------------------------------------------------------
    def start(self) -> RayPools:
        """Start a pool on every alive node and the thread that follows the cluster;
        returns once each first pool's supervisor is running (or ``ready_timeout_s``
        passed: late pools are logged and keep being followed).  Once only."""
        if self._started:
            return self
        ray = import_ray()
        if not ray.is_initialized():
            if self.address is None:
                raise RuntimeError("Ray is not initialised: call ray.init() first, or pass address='auto'")
            ray.init(address=self.address, log_to_driver=True)
        self._ray = ray
        self._started = True
        self._tick()
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline and any(s.probe is not None and not s.described for s in self._slots.values()):
            time.sleep(0.2)
            self._tick()
        late = [s.node_id for s in self._slots.values() if not s.described]
        if late:
            log.warning("ray pools: %d pool(s) not started after %.0f s (nodes %s); still trying", len(late), self.ready_timeout_s, late)
        self._thread = threading.Thread(target=self._follow, name="qworker-ray-pools", daemon=True)
        self._thread.start()
        atexit.register(self.stop)
        return self

    def pools(self) -> list[PoolInfo]:
        """A snapshot of every node's pool, in node-id order."""
        with self._lock:
            return [self._info(s) for _, s in sorted(self._slots.items())]

    def stop(self) -> None:
        """Drain every pool (SIGTERM to each supervisor, all at once), then kill the
        actors; returns within about ``options.drain_timeout_s + STOP_MARGIN_S``
        seconds.  Idempotent."""
        if not self._started or self._stopping.is_set():
            return
        self._stopping.set()
        atexit.unregister(self.stop)
        if self._thread is not None:
            self._thread.join()
        ray = self._ray
        if not ray.is_initialized():  # ray.shutdown() came first: it ended the actors, and the pools drain themselves
            return
        with self._lock:
            slots = [s for s in self._slots.values() if s.described]  # a pool not yet started has nothing to drain
            pending = [s for s in self._slots.values() if s.actor is not None and not s.described]
        for s in pending:
            self._kill(s)  # a supervisor it did start sees the actor gone and drains itself
        timeout_s = self.options.drain_timeout_s + STOP_MARGIN_S
        refs = [s.actor.stop.remote(self.options.drain_timeout_s + STOP_MARGIN_S / 2) for s in slots]
        if refs:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
            for s, ref in zip(slots, refs, strict=True):
                try:
                    if ref in ready:
                        ray.get(ref)
                except Exception as exc:  # a dead actor has nothing left to drain
                    log.info("ray pools: %s was already gone at stop (%s)", s.pool_id, type(exc).__name__)
        for s in slots:
            self._kill(s)
        log.info("ray pools: stopped %d pool(s)", len(slots))

    def __enter__(self) -> RayPools:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # following the cluster -----------------------------------------------------------
    def _follow(self) -> None:
        while not self._stopping.wait(self.poll_s):
            try:
                self._tick()
            except Exception:  # a GCS hiccup must not end the follower
                log.exception("ray pools: could not check the cluster; trying again in %.1f s", self.poll_s)

    def _tick(self) -> None:
        ray = self._ray
        nodes = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        now = time.monotonic()
        with self._lock:
            self._skipped &= set(nodes)
            for node_id in [n for n in self._slots if n not in nodes]:
                slot = self._slots.pop(node_id)
                log.warning("ray pools: node %s (%s) left; forgetting pool %s", node_id, slot.host, slot.pool_id)
                self._kill(slot)
            for node_id, node in nodes.items():
                if node_id not in self._slots and node_id not in self._skipped:
                    self._add(node_id, node)
            for slot in self._slots.values():
                self._check(slot, now)
                if slot.actor is None and slot.restart_at is not None and now >= slot.restart_at:
                    self._launch(slot)

    def _add(self, node_id: str, node: dict[str, Any]) -> None:
        workers = self.workers_per_node or int(node.get("Resources", {}).get("CPU", 0))
        host = str(node.get("NodeManagerHostname") or node.get("NodeManagerAddress") or "node")
        if workers < 1:
            log.info("ray pools: node %s (%s) has no CPU resource; no pool there", node_id, host)
            self._skipped.add(node_id)
            return
        slot = _Slot(node_id=node_id, host=host, workers=workers)
        self._slots[node_id] = slot
        self._launch(slot)

    def _pool_id(self, slot: _Slot) -> str:
        base = f"{self.options.pool_id or 'ray'}-{_short_host(slot.host)}-{slot.node_id[:8]}"
        return base if slot.restarts == 0 else f"{base}-r{slot.restarts}"

    def _launch(self, slot: _Slot) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        slot.pool_id = self._pool_id(slot)
        options = self.options.replace(connect=self.connect, workers=slot.workers, pool_id=slot.pool_id)
        slot.actor = _actor_class().options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(slot.node_id, soft=False),
            num_cpus=slot.workers if self.reserve_cpus else 0,
        ).remote(options)
        slot.probe = slot.actor.describe.remote()
        slot.described = {}
        slot.started = time.monotonic()
        slot.restart_at = None
        log.info("ray pools: starting pool %s with %d workers on node %s (%s)", slot.pool_id, slot.workers, slot.node_id, slot.host)

    def _check(self, slot: _Slot, now: float) -> None:
        """Collect the slot's outstanding probe if it is ready, and send the next one."""
        if slot.actor is None or slot.probe is None:
            return
        ray = self._ray
        ready, _ = ray.wait([slot.probe], timeout=0)
        if not ready:
            return  # still being placed or started, or busy
        try:
            answer = ray.get(slot.probe)
        except Exception as exc:  # RayActorError and kin: the actor is gone
            self._failed(slot, now, f"its actor died ({type(exc).__name__})")
            return
        if isinstance(answer, dict):
            slot.described = answer
            log.info("ray pools: pool %s runs as pid %d on node %s", slot.pool_id, answer["pid"], slot.node_id)
        elif answer is not None:
            self._failed(slot, now, f"its supervisor exited with code {answer}")
            return
        if slot.failures and now - slot.started >= STABLE_S:
            slot.failures = 0
        slot.probe = slot.actor.exit_code.remote()

    def _failed(self, slot: _Slot, now: float, why: str) -> None:
        self._kill(slot)
        slot.failures = 0 if now - slot.started >= STABLE_S else slot.failures + 1
        delay = min(BACKOFF_S[1], BACKOFF_S[0] * 2 ** max(0, slot.failures - 1))
        slot.restarts += 1
        slot.restart_at = now + delay
        log.warning("ray pools: pool %s on node %s failed: %s; restarting in %.0f s", slot.pool_id, slot.node_id, why, delay)

    def _kill(self, slot: _Slot) -> None:
        if slot.actor is not None:
            try:
                self._ray.kill(slot.actor, no_restart=True)
            except Exception:  # already gone
                pass
        slot.actor, slot.probe, slot.described = None, None, {}

    def _info(self, slot: _Slot) -> PoolInfo:
        state = "running" if slot.described else ("restarting" if slot.actor is None else "starting")
        return PoolInfo(
            slot.node_id, slot.host, slot.pool_id, slot.workers, state, slot.restarts,
            slot.described.get("pid"), slot.described.get("actor_pid"),
        )


def start_pools(
    connect: Optional[str] = None, workers_per_node: Optional[int] = None, options: Optional[PoolOptions] = None, **kwargs: Any
) -> RayPools:
    """``RayPools(...).start()``: pools on every node until the returned handle's ``stop()``."""
    return RayPools(connect, workers_per_node, options, **kwargs).start()


class NoRay(ImportError):
    """Ray is not installed (kept an ``ImportError`` for callers of ``RayPools``)."""
