"""``Producer``: the part of qworker that lives in the trainer.

``submit_batch`` hashes each payload, answers from the cache what it can, shares
the future of a task already in flight, and hands the rest to the dispatcher
thread; it returns at once.  ``gather`` sleeps on the futures' events.  Nothing
in the caller's thread polls or sleeps in a loop.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import logging
import os
import time
from typing import Any, Hashable, Iterable, Mapping, Optional, Sequence, Union

import msgspec

from .._errors import ErrorKind
from .._exceptions import PoolStartError, ProducerClosed, QworkerError
from ..cache.hashing import encode_payloads, new_packer, params_fingerprint, prefix_state
from ..cache.identity import RunVersions, TaskIdentity
from ..cache.results import ResultCache
from ..config import file as _config
from ..config.options import PoolOptions, ProducerOptions
from ..host.process import PoolProcess
from ..registry.catalog import Catalog, Composite
from ..registry.registry import modules_to_forward
from ..transport.sockets import new_ipc_endpoint
from . import composite as _composite
from . import discovery as _discovery
from . import metrics as _metrics
from .admission import AdmissionPolicy, Sources
from .arguments import check_payloads, check_timeout_s
from .dispatcher import Dispatcher
from .gc_pause import paused_gc
from .pending import PendingTable
from .result import Result, ResultFuture, gather
from .status import Status

log = logging.getLogger("qworker")

__all__ = ["Producer"]

_CHUNK = 1024  # tasks hashed before the dispatcher is woken
_decode_payload = msgspec.msgpack.Decoder().decode  # an encoded payload, as a worker decodes it


_BUFFERS = frozenset({msgspec.Raw, bytes, bytearray, memoryview})


def _given_encodings(payloads: list[Any]) -> list[Union[bytes, Exception]]:
    """``submit_batch(encoded=True)``'s payloads as bytes, with an error in place of one that is not a buffer
    (so it fails alone as ``bad_payload``, as one that cannot be encoded does)."""
    if set(map(type, payloads)) <= _BUFFERS:  # the usual chunk (a reward service's): converted in one pass
        return list(map(bytes, payloads))
    out: list[Union[bytes, Exception]] = []
    for p in payloads:
        if isinstance(p, (bytes, bytearray, memoryview, msgspec.Raw)):
            out.append(bytes(p))
        else:
            out.append(TypeError(f"encoded=True takes each payload's encoding (bytes), not {type(p).__name__}"))
    return out


_local_pool_numbers = itertools.count(1)  # local pool ids stay distinct within a process


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
        self, *, config: Union[str, os.PathLike, Mapping[str, Any], None] = None, options: Optional[ProducerOptions] = None,
        **overrides: Any,
    ) -> None:
        """``overrides`` are ``ProducerOptions`` fields (``local_workers=4``, ``bind=...``, ...);
        they win over ``options``, which wins over the config's ``producer:`` section."""
        worker = os.environ.get("QWORKER_WORKER_ID")
        if worker:  # a worker importing a reward module that is a script without the guard: no pools in pools
            raise QworkerError(
                f"Producer() was called inside qworker worker {worker}: a script named as a reward module runs its "
                "top-level code in every worker that imports it; put the training code under "
                "'if __name__ == \"__main__\":' (as multiprocessing requires)")
        loaded = _config.load(config)
        unknown = set(overrides) - set(ProducerOptions.yaml_keys())
        if unknown:
            raise TypeError(f"Producer() got unknown option(s) {sorted(unknown)}; see qworker.ProducerOptions")
        base = {} if options is None else {  # the fields set in ``options``
            f.name: getattr(options, f.name) for f in dataclasses.fields(options) if getattr(options, f.name) != f.default
        }
        opts = ProducerOptions.from_mapping(loaded["producer"], base, overrides, where=loaded["where"] + ": producer")
        self.options = opts
        if opts.metrics_port is not None:
            _metrics.check_available()  # before anything starts: a missing prometheus_client is one line naming the extra
        self.catalog = Catalog(loaded["rewards"], loaded["where"], modules=list(opts.reward_modules), remote=opts.bind is not None,
                               judges=loaded["judges"])
        self.fallback_score = opts.fallback_score
        self._closed = False
        self._policies = Sources()  # the admission-policy sources rewards declare (``engine.admission``)
        self.cache = ResultCache(max_entries=opts.cache_max_entries, ttl_s=opts.cache_ttl_s, path=_config.optional_path(opts.cache_path))
        self._table = PendingTable(cache=self.cache, fallback_score=opts.fallback_score, cache_read=opts.cache_read)
        self._versions = RunVersions()  # each reward's version as its workers report it: what cache keys rest on
        _discovery.sweep()
        try:
            self._dispatcher = Dispatcher(bind=opts.bind or new_ipc_endpoint(), table=self._table, options=opts, versions=self._versions)
        except BaseException:  # its socket cannot be bound (ConfigError: a port in use, a runtime directory too long)
            self.cache.close()  # the disk tier's writer thread and file: a caller that retries does not leak one each time
            raise
        self.endpoint = self._dispatcher.endpoint
        self._dispatcher.start()
        self._note = ""
        self._metrics: Optional[_metrics.MetricsServer] = None
        self._pool: Optional[PoolProcess] = None
        try:  # the dispatcher, its socket, the pool and the cache writer must not outlive a failed start (a busy
            # metrics port, a pool that cannot start, no workers ready in time): a caller that retries finds them gone
            self._note = _discovery.register(self.endpoint, f"{id(self):x}")
            if opts.metrics_port is not None:
                self._metrics = _metrics.serve(self.status, opts.metrics_port)  # on loopback
            n = opts.workers_to_start()
            if n:
                forwarded = tuple(m for m in modules_to_forward() if m not in opts.reward_modules)
                self._pool = PoolProcess(PoolOptions(
                    connect=self.endpoint, workers=n, reward_modules=(*opts.reward_modules, *forwarded),
                    pool_id=f"local-{os.getpid()}-{next(_local_pool_numbers)}", parent_pid=os.getpid(),
                    task_timeout_s=opts.task_timeout_s, heartbeat_s=opts.heartbeat_s, max_message_bytes=opts.max_message_bytes,
                    log_level=logging.getLevelName(log.getEffectiveLevel()),  # the trainer's logging decides
                    # with CURVE, the local pool uses the producer's own key pair, which the producer admits
                    curve_secret_key=opts.curve_secret_key if opts.curve() else None,
                    curve_server_key=opts.curve_secret_key if opts.curve() else None,
                ))
                self.wait_for_workers(n, timeout=opts.ready_timeout_s)
        except BaseException:
            self.close()
            raise

    def wait_for_workers(self, n: int, timeout: float = 60.0) -> None:
        """Block until ``n`` workers have said READY (woken by each READY, not polled)."""
        deadline = time.monotonic() + timeout
        d = self._dispatcher
        cond = d.workers_seen
        with cond:
            while d.workers_ready < n:
                if self._pool is not None and self._pool.exit_code() is not None:
                    raise PoolStartError(f"the local pool exited with code {self._pool.exit_code()} before {n} workers were ready")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolStartError(f"only {d.workers_ready} of {n} workers were ready after {timeout:.0f} s")
                cond.wait(min(left, 1.0))  # wakes on READY; the 1 s bound notices a dead pool

    # submitting --------------------------------------------------------------
    def submit(self, reward: str, payload: Any, *, params: Optional[Mapping[str, Any]] = None, timeout_s: Optional[float] = None) -> ResultFuture:
        """Submit one task; see ``submit_batch``."""
        return self.submit_batch(reward, [payload], params=params, timeout_s=timeout_s)[0]

    def submit_batch(
        self, reward: str, payloads: Iterable[Any], *, params: Optional[Mapping[str, Any]] = None, timeout_s: Optional[float] = None,
        lane: Hashable = 0, encoded: bool = False,
    ) -> list[ResultFuture]:
        """Submit one task per payload and return their futures at once, in order.

        ``reward`` is a reward name, ``package.module:function``, or a name from
        the config's ``rewards:`` section (defaults, an alias, or a composite).
        ``params`` are keyword arguments for the reward and part of each task's
        hash.  ``timeout_s`` overrides the hard limit for these tasks.  Tasks of
        different ``lane``\\s are dispatched round-robin (a reward service gives
        each client a lane of its own); a task shared by two lanes keeps the first's.
        ``encoded``: each payload is already its encoding by ``cache.hashing.encode_payload`` (bytes, or a buffer
        such as ``msgspec.Raw``), hashed and sent as it is (a reward service passes its clients' on).
        """
        if self._closed:
            raise ProducerClosed("submit_batch() on a closed Producer")
        check_payloads(payloads)
        timeout_s = check_timeout_s(timeout_s)
        target = self.catalog.resolve(reward, params)
        if isinstance(target, Composite):
            submit = lambda batch: _composite.submit(  # noqa: E731
                lambda name, part, p: self._submit_plain(name, part, p, timeout_s, lane), target, batch, self.fallback_score)
            if not encoded:
                return submit(list(payloads))
            # each component hashes the payload afresh, so it is decoded here; one that does not decode fails alone
            decoded, failed = [], {}
            for i, p in enumerate(payloads):
                try:
                    decoded.append(_decode_payload(p))
                except Exception as exc:  # not msgpack, not UTF-8, nested too deep, not a buffer
                    failed[i] = self._done(error=ErrorKind.BAD_PAYLOAD.error(
                        f"encoded=True takes each payload's encoding by encode_payload; this one does not decode ({exc})"))
            scored = iter(submit(decoded))
            return [failed[i] if i in failed else next(scored) for i in range(len(decoded) + len(failed))]
        return self._submit_plain(target.reward, payloads, target.params, timeout_s, lane, encoded)

    def _submit_plain(self, reward: str, payloads: Iterable[Any], params: dict, timeout_s: Optional[float],
                      lane: Hashable = 0, encoded: bool = False) -> list[ResultFuture]:
        spec = self.catalog.book.spec(reward)
        policy: Optional[AdmissionPolicy] = None
        hashed = params
        admitted = self._policies.submission(spec.admission if spec is not None else None, params)
        if admitted is not None:  # its tasks wait in the policy the reward declares; it says what their key hashes
            policy, hashed = admitted.policy, admitted.hashed_params
            if admitted.task_params is not None:
                params = admitted.task_params
            if timeout_s is None:
                timeout_s = admitted.timeout_s
        if timeout_s is None:  # the reward's own @reward(timeout=...), as a worker applies it: the producer's limits match
            timeout_s = spec.timeout_s if spec is not None else None
        # the version the workers reported, never the producer's own copy's (which may be other code, or none)
        identity = TaskIdentity(reward, params_fingerprint(hashed), self._versions.for_lookup(reward, self.catalog.version(reward)))
        futures: list[ResultFuture] = []
        chunk: list[Any] = []
        # Building ~6 GC-tracked objects per task makes a large batch trigger full
        # collections that rescan every pending task (40% of the time at 100k);
        # nothing made here is cyclic garbage, so the collector waits until we return.
        with paused_gc():
            for payload in payloads:
                chunk.append(payload)
                if len(chunk) == _CHUNK:
                    futures.extend(self._submit_chunk(reward, params, identity, chunk, timeout_s, policy, lane, encoded))
                    chunk = []
            if chunk:
                futures.extend(self._submit_chunk(reward, params, identity, chunk, timeout_s, policy, lane, encoded))
        return futures

    def _submit_chunk(
        self, reward: str, params: dict, identity: TaskIdentity, payloads: list[Any], timeout_s: Optional[float],
        policy: Optional[AdmissionPolicy] = None, lane: Hashable = 0, encoded: bool = False,
    ) -> list[ResultFuture]:
        """Hash and register one chunk.  Each key is looked up once per cache tier: the memory tier as the table
        registers it (``PendingTable.registering``), the persistent tier once for the chunk's new tasks."""
        entries: list[tuple[bytes, bytes]] = []  # (key, payload bytes)
        refused: list[tuple[int, ResultFuture]] = []  # (index in the chunk, its failed future) of each payload refused
        limit = self.options.max_payload_bytes
        # False: recompute (``--no-cache-read``, ``score --overwrite``; or no worker has reported the reward's version yet,
        # so no key is known that its results are cached under); results are still cached
        cache_read = self.options.cache_read and identity.confirmed
        new_hash = prefix_state(identity.prefix).copy  # ``key_with_prefix``, the prefix hashed once per chunk
        packer = new_packer()
        encodings = _given_encodings(payloads) if encoded else encode_payloads(payloads, packer)
        for payload_bytes in encodings:
            if isinstance(payload_bytes, Exception):  # what encoding it raised
                exc = payload_bytes
                refused.append((len(entries) + len(refused), self._done(
                    error=ErrorKind.BAD_PAYLOAD.error(f"cannot encode payload ({type(exc).__name__}: {exc})"))))
                continue
            if len(payload_bytes) > limit:
                refused.append((len(entries) + len(refused), self._done(
                    error=ErrorKind.BAD_PAYLOAD.error(f"{len(payload_bytes)} bytes is over the {limit}-byte limit"))))
                continue
            h = new_hash()
            h.update(payload_bytes)
            entries.append((h.digest(), payload_bytes))
        table = self._table
        with table.registering(entries, reward=reward, params=params, timeout_s=timeout_s, policy=policy, now=time.monotonic(),
                               hand_on=self._dispatcher.submit, lane=lane, cache_read=identity.confirmed, rejected=len(refused),
                               identity=identity) as reg:
            futures = reg.futures  # one per entry, in order; the refused payloads' futures go between them
            if refused:
                registered = iter(reg.futures)
                futures = []
                for i, fut in refused:
                    futures.extend(itertools.islice(registered, i - len(futures)))
                    futures.append(fut)
                futures.extend(registered)
            new = reg.new
            if new and cache_read:
                found = self.cache.get_persistent(p.key for p in new)
                if found:
                    table.resolve_cached([p for p in new if p.key in found], found)
                    new = [p for p in new if p.key not in found]
            reg.hand_on(new)
        return futures

    def _done(self, *, score: Optional[float] = None, extra: Optional[dict] = None, error: Optional[str] = None,
              cached: bool = False, key: str = "") -> ResultFuture:
        fut = ResultFuture()
        fut.set_result(Result(score=self.fallback_score if score is None else score, extra=extra or {}, error=error, cached=cached, key=key))
        return fut

    # waiting -----------------------------------------------------------------
    def gather(self, futures: Sequence[concurrent.futures.Future], timeout: Optional[float] = None) -> list[Result]:
        """The ``Result`` of each future, in order; sleeps until all are done.

        Raises ``GatherTimeout`` after ``timeout`` seconds; unfinished futures
        stay pending and may still resolve.
        """
        return gather(futures, timeout)

    def map(self, reward: str, payloads: Iterable[Any], *, params: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None) -> list[Result]:
        """``gather(submit_batch(...))``."""
        return self.gather(self.submit_batch(reward, payloads, params=params), timeout=timeout)

    # introspection -----------------------------------------------------------
    def status(self) -> Status:
        """What ``qworker status`` shows: this producer, its pools and their workers, its judges."""
        if self._closed:
            raise ProducerClosed("status() on a closed Producer")
        return self._dispatcher.status()

    def flush(self, timeout: float = 30.0) -> bool:
        """Block until the result of every task that resolved before the call is written to the disk cache
        (``cache_path``), for at most ``timeout`` seconds.  True once they are all on disk (at once without a
        disk cache); False after ``timeout`` while the disk still fails (the results stay queued and are
        retried), or if some were dropped (see "The result cache" in the README).  Scores never wait for the
        disk: this is for a checkpoint, or before another process reads the file."""
        if self._closed:
            raise ProducerClosed("flush() on a closed Producer")
        return self.cache.flush(timeout)

    # shutdown ----------------------------------------------------------------
    def close(self, timeout: float = 30.0) -> None:
        """Drain the local pool, cancel what is unfinished, flush the disk cache and close every connection
        to its file."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.stop(timeout)
        if self._metrics is not None:
            self._metrics.shutdown()
        self._dispatcher.stop()
        self._policies.close()
        self._table.close("the producer closed")
        self.cache.close()
        _discovery.unregister(self._note)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if not getattr(self, "_closed", True) and pool is not None:
            try:
                pool.kill()
            except Exception:
                pass
