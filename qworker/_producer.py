"""``Producer``: the part of qworker that lives in the trainer.

``submit_batch`` hashes each payload, answers from the cache what it can, shares
the future of a task already in flight, and hands the rest to the dispatcher
thread; it returns at once.  ``gather`` sleeps on the futures' events.  Nothing
in the caller's thread polls or sleeps in a loop.
"""

from __future__ import annotations

import concurrent.futures
import gc
import json
import logging
import os
import socket
import threading
import time
from hashlib import blake2b
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar, Union

import zmq

from . import _composite, _config, _metrics
from ._cache import MemoryCache
from ._catalog import Catalog, Composite
from ._diskcache import DiskCache
from ._dispatcher import Dispatcher
from ._exceptions import ConfigError, GatherTimeout, PoolStartError, ProducerClosed
from ._fleet import Pending, Resolution
from ._gate import JUDGE_REWARD, Gate, hash_params, identity
from ._hashing import encode_payload, key_prefix, new_packer, params_fingerprint
from ._localpool import LocalPool
from ._registry import modules_to_forward
from ._result import Result, ResultFuture
from ._sockets import DEFAULT_MAX_MESSAGE_BYTES, bound_endpoint, make_socket, new_ipc_endpoint, runtime_dir

log = logging.getLogger("qworker")

__all__ = ["Producer"]

_DEFAULTS: dict[str, Any] = {
    "local_workers": None,  # None: os.cpu_count() when bind is None, else 0
    "bind": None,
    "rewards": [],
    "cache_path": None,
    "cache_max_entries": 1_000_000,
    "cache_ttl_s": None,
    "max_attempts": 3,
    "task_timeout_s": 60.0,
    "fallback_score": 0.0,
    "heartbeat_s": 1.0,
    "ready_timeout_s": 60.0,
    "max_payload_bytes": 8 * 1024 * 1024,
    "max_message_bytes": DEFAULT_MAX_MESSAGE_BYTES,
    "metrics_port": None,
}
_CHUNK = 1024  # tasks hashed before the dispatcher is woken
_T = TypeVar("_T")


class Producer:
    """Submit reward tasks to a worker pool and collect their ``Result``s.

    With no arguments it starts a local pool of ``os.cpu_count()`` workers over
    ``ipc://``.  ``bind="tcp://127.0.0.1:5555", local_workers=0`` waits for
    remote ``qworker-pool --connect`` daemons instead; binding to ``0.0.0.0``
    must be asked for.  ``config`` (a YAML path or dict) supplies defaults for
    every argument from its ``producer:`` section.

    Tasks are identified by a hash of (reward, params, payload).  A task whose
    hash is cached resolves at once with ``cached=True``; one already in flight
    shares its future.  A task whose worker dies is redelivered, up to
    ``max_attempts`` deliveries; a reward past ``task_timeout_s`` (or its own
    ``@reward(timeout=...)``) has its worker killed and resolves with a timeout
    error.  Failed tasks resolve with ``error`` set and ``score=fallback_score``.
    """

    def __init__(
        self,
        *,
        local_workers: Optional[int] = None,
        bind: Optional[str] = None,
        rewards: Optional[Sequence[str]] = None,
        config: Union[str, os.PathLike, Mapping[str, Any], None] = None,
        cache_path: Optional[str] = None,
        cache_max_entries: Optional[int] = None,
        cache_ttl_s: Optional[float] = None,
        max_attempts: Optional[int] = None,
        task_timeout_s: Optional[float] = None,
        fallback_score: Optional[float] = None,
        heartbeat_s: Optional[float] = None,
        ready_timeout_s: Optional[float] = None,
        max_payload_bytes: Optional[int] = None,
        max_message_bytes: Optional[int] = None,
        metrics_port: Optional[int] = None,
    ) -> None:
        explicit = {k: v for k, v in locals().items() if k in _DEFAULTS}
        loaded = _config.load(config)
        cfg = _config.merge(explicit, loaded["producer"], _DEFAULTS)
        self.config = cfg
        self.catalog = Catalog(loaded["rewards"], loaded["where"], modules=list(cfg["rewards"] or []), remote=cfg["bind"] is not None)
        self._gates: dict[str, Gate] = {}
        if cfg["local_workers"] is None:
            cfg["local_workers"] = (os.cpu_count() or 1) if cfg["bind"] is None else 0
        self.fallback_score = float(cfg["fallback_score"])
        self.max_payload_bytes = int(cfg["max_payload_bytes"])
        self.task_timeout_s = cfg["task_timeout_s"]
        self._closed = False
        self._lock = threading.Lock()
        self._pending: dict[bytes, Pending] = {}
        # "rejected" is counted by the caller's thread, "resolved"/"failed" by the dispatcher's
        self._counts = {"submitted": 0, "rejected": 0, "resolved": 0, "failed": 0, "cache_hits": 0, "deduplicated": 0}
        self._started = time.monotonic()
        self.memory_cache = MemoryCache(max_entries=int(cfg["cache_max_entries"]), ttl_s=cfg["cache_ttl_s"])
        path = _config.optional_path(cfg["cache_path"])
        self.disk_cache = DiskCache(path, max_entries=cfg["cache_max_entries"], ttl_s=cfg["cache_ttl_s"]) if path else None

        self._ctx = zmq.Context(io_threads=1)
        max_message_bytes = int(cfg["max_message_bytes"])
        sock = make_socket(self._ctx, zmq.ROUTER, bind=cfg["bind"] or new_ipc_endpoint(), max_message_bytes=max_message_bytes)
        self.endpoint = bound_endpoint(sock)
        heartbeat_s = float(cfg["heartbeat_s"])
        self._dispatcher = Dispatcher(
            sock=sock, resolve=self._resolve, pending_lookup=self._pending.get, max_attempts=int(cfg["max_attempts"]),
            heartbeat_timeout_s=3 * heartbeat_s, max_message_bytes=max_message_bytes,
            status_extra=self._producer_status,
        )
        self._dispatcher.start()
        self._registry_file = self._register()
        self._metrics = None
        if cfg["metrics_port"] is not None:  # Prometheus, on loopback
            self._metrics = _metrics.serve(self.status, int(cfg["metrics_port"]))
        self._pool: Optional[LocalPool] = None
        if cfg["local_workers"]:
            self._start_local_pool(int(cfg["local_workers"]), list(cfg["rewards"] or []), heartbeat_s)

    # local pool --------------------------------------------------------------
    def _start_local_pool(self, n: int, rewards: list[str], heartbeat_s: float) -> None:
        self._pool = LocalPool(
            connect=self.endpoint, workers=n, modules=[*rewards, *(m for m in modules_to_forward() if m not in rewards)],
            task_timeout_s=float(self.task_timeout_s), heartbeat_s=heartbeat_s, max_message_bytes=int(self.config["max_message_bytes"]),
        )
        self.wait_for_workers(n, timeout=float(self.config["ready_timeout_s"]))

    def wait_for_workers(self, n: int, timeout: float = 60.0) -> None:
        """Block until ``n`` workers have said READY (woken by each READY, not polled)."""
        deadline = time.monotonic() + timeout
        cond = self._dispatcher.workers_seen
        with cond:
            while len(self._dispatcher.fleet.workers) < n:
                if self._pool is not None and self._pool.exit_code() is not None:
                    raise PoolStartError(f"the local pool exited with code {self._pool.exit_code()} before {n} workers were ready")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolStartError(f"only {len(self._dispatcher.fleet.workers)} of {n} workers were ready after {timeout:.0f} s")
                cond.wait(min(left, 1.0))  # wakes on READY; the 1 s bound notices a dead pool

    # submitting --------------------------------------------------------------
    def submit(self, reward: str, payload: Any, *, params: Optional[Mapping[str, Any]] = None, timeout_s: Optional[float] = None) -> ResultFuture:
        """Submit one task; see ``submit_batch``."""
        return self.submit_batch(reward, [payload], params=params, timeout_s=timeout_s)[0]

    def submit_batch(
        self, reward: str, payloads: Iterable[Any], *, params: Optional[Mapping[str, Any]] = None, timeout_s: Optional[float] = None
    ) -> list[ResultFuture]:
        """Submit one task per payload and return their futures at once, in order.

        ``reward`` is a reward name, ``package.module:function``, or a name from
        the config's ``rewards:`` section (defaults, an alias, or a composite).
        ``params`` are keyword arguments for the reward and part of each task's
        hash.  ``timeout_s`` overrides the hard limit for these tasks.
        """
        if self._closed:
            raise ProducerClosed("submit_batch() on a closed Producer")
        target = self.catalog.resolve(reward, params)
        if isinstance(target, Composite):
            return _composite.submit(
                lambda name, batch, p: self._submit_plain(name, batch, p, timeout_s), target, list(payloads), self.fallback_score
            )
        return self._submit_plain(target.reward, payloads, target.params, timeout_s)

    def _submit_plain(self, reward: str, payloads: Iterable[Any], params: dict, timeout_s: Optional[float]) -> list[ResultFuture]:
        gate = None
        hashed = params
        if reward == JUDGE_REWARD:  # endpoint calls wait in a gate for capacity; routing is not part of the hash
            gate = self._gate_for(params)
            hashed = hash_params(params)
            if timeout_s is None:  # the hard limit sits past the request's own deadline
                timeout_s = float(params.get("timeout_s", 60.0)) + 5.0
        prefix = key_prefix(reward, params_fingerprint(hashed), self.catalog.version(reward))
        futures: list[ResultFuture] = []
        chunk: list[Any] = []
        # Building ~6 GC-tracked objects per task makes a large batch trigger full
        # collections that rescan every pending task (40% of the time at 100k);
        # nothing made here is cyclic garbage, so the collector waits until we return.
        paused = gc.isenabled()
        gc.disable()
        try:
            for payload in payloads:
                chunk.append(payload)
                if len(chunk) == _CHUNK:
                    futures.extend(self._submit_chunk(reward, params, prefix, chunk, timeout_s, gate))
                    chunk = []
            if chunk:
                futures.extend(self._submit_chunk(reward, params, prefix, chunk, timeout_s, gate))
        finally:
            if paused:
                gc.enable()
        return futures

    def _gate_for(self, params: dict) -> Gate:
        ident = identity(params)
        gate = self._gates.get(ident)
        if gate is None:
            try:
                gate = self._gates[ident] = Gate(params)
            except (ValueError, TypeError, KeyError) as exc:
                raise ConfigError(f"llm_judge: {exc}") from None
        return gate

    def _submit_chunk(
        self, reward: str, params: dict, prefix: bytes, payloads: list[Any], timeout_s: Optional[float], gate: Optional[Gate] = None
    ) -> list[ResultFuture]:
        now = time.monotonic()
        futures: list[Optional[ResultFuture]] = []
        misses: list[tuple[int, bytes, bytes]] = []  # (index, key, payload bytes)
        limit = self.max_payload_bytes
        cache_get = self.memory_cache.get
        packer = new_packer()
        hits = 0
        for i, payload in enumerate(payloads):
            try:
                payload_bytes = encode_payload(payload, packer)
            except Exception as exc:
                futures.append(self._failed_future(f"bad_payload: cannot encode payload ({type(exc).__name__}: {exc})"))
                continue
            if len(payload_bytes) > limit:
                futures.append(self._failed_future(f"bad_payload: {len(payload_bytes)} bytes is over the {limit}-byte limit"))
                continue
            key = blake2b(prefix + payload_bytes, digest_size=16).digest()
            hit = cache_get(key)
            if hit is not None:
                hits += 1
                futures.append(self._done_future(Result(hit[0], hit[1], cached=True, key=key.hex())))
                continue
            futures.append(None)
            misses.append((i, key, payload_bytes))
        new: list[Pending] = []
        deduplicated = 0
        with self._lock:
            pending = self._pending
            for i, key, payload_bytes in misses:
                p = pending.get(key)
                if p is None:
                    p = pending[key] = Pending(key, reward, params, payload_bytes, timeout_s, ResultFuture(), now, gate=gate)
                    new.append(p)
                else:
                    deduplicated += 1
                futures[i] = p.future  # type: ignore[assignment]
        counts = self._counts
        counts["submitted"] += len(payloads)
        counts["deduplicated"] += deduplicated
        counts["cache_hits"] += hits
        if new:
            self._enqueue(new)
        return futures  # type: ignore[return-value]

    def _done_future(self, result: Result) -> ResultFuture:
        fut = ResultFuture()
        fut.set_result(result)
        return fut

    def _failed_future(self, error: str) -> ResultFuture:
        self._counts["rejected"] += 1
        return self._done_future(Result(self.fallback_score, error=error))

    def _enqueue(self, batch: list[Pending]) -> None:
        if self.disk_cache is not None:
            found = self.disk_cache.get_many(p.key for p in batch)
            if found:
                self._counts["cache_hits"] += len(found)
                hits = self._claim([p for p in batch if p.key in found])
                batch = [p for p in batch if p.key not in found]
                self.memory_cache.put_many([(p.key, *found[p.key]) for p in hits])
                for p in hits:
                    score, extra = found[p.key]
                    p.future.set_result(Result(score, extra, cached=True, key=p.key.hex()))  # type: ignore[attr-defined]
        self._dispatcher.inbox.extend(batch)
        self._dispatcher.wake()

    # resolving ---------------------------------------------------------------
    def _claim(self, items: list[_T], task: Callable[[_T], Pending] = lambda p: p) -> list[_T]:  # type: ignore[assignment,return-value]
        """Take the right to resolve the task of each item; returns the items whose
        task was still unresolved, each task once.

        Whoever claims a task resolves its future: the first result wins.
        """
        claimed = []
        with self._lock:
            pending = self._pending
            for item in items:
                p = task(item)
                if pending.get(p.key) is p:
                    del pending[p.key]
                    p.resolved = True
                    claimed.append(item)
        return claimed

    def _resolve(self, done: list[Resolution]) -> None:
        """Resolve tasks (dispatcher thread): ``(pending, score, extra, error, worker, compute_s)`` each."""
        now = time.monotonic()
        fresh = self._claim(done, lambda d: d[0])
        to_cache = []
        failed = 0
        fallback = self.fallback_score
        for p, score, extra, error, worker, compute_s in fresh:
            extra = extra or {}
            if error is None and score is not None:
                to_cache.append((p.key, score, extra, p.reward))  # the disk cache records each row's reward
            else:
                score = fallback
                failed += 1
            p.future.set_result(Result(  # type: ignore[attr-defined]
                score, extra, error, False, p.attempts, worker, now - p.submitted, compute_s, p.key.hex()
            ))
        self.memory_cache.put_many(to_cache)
        if self.disk_cache is not None:
            self.disk_cache.put_many(to_cache)
        self._counts["failed"] += failed
        self._counts["resolved"] += len(fresh)

    # waiting -----------------------------------------------------------------
    def gather(self, futures: Sequence[concurrent.futures.Future], timeout: Optional[float] = None) -> list[Result]:
        """The ``Result`` of each future, in order; sleeps until all are done.

        Raises ``GatherTimeout`` after ``timeout`` seconds; unfinished futures
        stay pending and may still resolve.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        results: list[Result] = []
        # Waiting on the last future first means one wake-up, not one per result
        # batch: by the time it resolves, most earlier ones have too.
        for f in reversed(futures):
            try:
                results.append(f.result(None if deadline is None else max(0.0, deadline - time.monotonic())))
            except concurrent.futures.TimeoutError:
                not_done = sum(not g.done() for g in futures)
                raise GatherTimeout(
                    f"{not_done} of {len(futures)} tasks unfinished after {timeout} s",
                    done=len(futures) - not_done, pending=not_done,
                ) from None
        results.reverse()
        return results

    def map(self, reward: str, payloads: Iterable[Any], *, params: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None) -> list[Result]:
        """``gather(submit_batch(...))``."""
        return self.gather(self.submit_batch(reward, payloads, params=params), timeout=timeout)

    # introspection -----------------------------------------------------------
    def _producer_status(self) -> dict:
        d = self._dispatcher
        in_flight = sum(len(w.leases) for w in d.fleet.workers.values())
        return {
            "endpoint": self.endpoint, "pid": os.getpid(), "host": socket.gethostname(),
            "uptime_s": round(time.monotonic() - self._started, 1), "queued": len(d.queue) + len(d.inbox),
            "in_flight": in_flight, "pending": len(self._pending), **self._counts,
            "cache_entries": len(self.memory_cache), **d.stats,
        }

    def status(self) -> dict:
        """What ``qworker status`` shows: this producer, its pools and their workers."""
        if self._closed:
            raise ProducerClosed("status() on a closed Producer")
        return self._dispatcher.call(self._dispatcher.status)  # type: ignore[return-value]

    def _register(self) -> str:
        """Leave a note in the runtime dir so ``qworker status`` can find us."""
        path = os.path.join(runtime_dir(), f"producer-{os.getpid()}-{id(self):x}.json")
        with open(path, "w") as f:
            json.dump({"endpoint": self.endpoint, "pid": os.getpid()}, f)
        return path

    # shutdown ----------------------------------------------------------------
    def close(self, timeout: float = 30.0) -> None:
        """Drain the local pool, cancel what is unfinished, flush the disk cache."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.stop(timeout)
        if self._metrics is not None:
            self._metrics.shutdown()  # type: ignore[attr-defined]
        self._dispatcher.stop()
        with self._lock:
            left = list(self._pending.values())
        for p in self._claim(left):
            p.future.set_result(Result(self.fallback_score, error="cancelled: the producer closed", attempts=p.attempts, key=p.key.hex()))  # type: ignore[attr-defined]
        self._dispatcher.sock.close(linger=0)
        self._ctx.term()
        if self.disk_cache is not None:
            self.disk_cache.close()
        try:
            os.unlink(self._registry_file)
        except FileNotFoundError:
            pass

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and getattr(self, "_pool", None) is not None:
            try:
                self._pool.kill()  # type: ignore[union-attr]
            except Exception:
                pass
