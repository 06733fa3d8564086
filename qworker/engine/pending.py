"""The pending table: the one owner of a task's lifetime, from registration to resolution.

``PendingTable`` holds every submitted task not yet resolved (a ``Pending``,
``engine.task``); duplicate submissions share one entry and its future.

**Invariant: every future the table hands out resolves exactly once.**  It is
kept here, not by each caller:

* A task enters only through ``registering``, a context in which the
  submitting thread owns what it registered until it hands the tasks on (to
  the dispatcher) or resolves them (from a slower cache tier).  If anything
  raises inside the context before the hand-over (a cache tier, a bug), the
  tasks it registered and did not resolve are handed on all the same (a
  submission that shares one of them must not fail because this one did), or,
  if even that raises, resolved as ``cancelled`` naming the exception; the
  exception propagates to the caller.
* Once handed on, the dispatcher resolves a task from its result (``resolve``:
  the first outcome wins, ``claim`` guards every other resolution), so a
  result that arrives twice (a redelivery's) changes nothing.  (A ``Client``
  keeps no table of these: its futures are its ``FutureTable``'s.)
* ``close`` refuses every later registration (``ProducerClosed``) and resolves
  whatever is still pending as ``cancelled``; a submission racing it either
  registers before (and its tasks are cancelled) or raises (and what it had
  registered is cancelled).

**Invariant: a task is in the table exactly while it is not DONE** (``engine.task``):
every removal moves it to DONE (``Pending.finish``) under the lock, which also
ends its lease; nothing else makes a task DONE.

**One cache lookup per submitted key**: registration looks a key that is not
pending up in the memory tier, under the lock (``resolve`` caches under the
same lock, so a task that resolved a moment ago is found there, not paid for
again); the caller then asks the persistent tier once for the keys still
missing (``resolve_cached``).

Thread-safe: one lock guards the table and its counters (``counts``, updated
inside the holds of the lock that the registrations and resolutions take
anyway: no extra acquisition); a large submission takes it once per 1024
entries, so ``close`` waits for at most one such chunk.  A result is cached
as its task leaves the table, under the lock, so an identical submission finds
the task or its score and never pays again; futures are resolved outside the
lock, and a cache that raises costs only the caching.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Hashable, Iterator, Optional, Sequence

from .._errors import ErrorKind
from .._exceptions import ProducerClosed
from ..cache.results import ResultCache
from .result import Result, ResultFuture, resolve_many
from .task import DONE, Pending, PolicyPending, Resolution, finish_all

if TYPE_CHECKING:
    from ..cache.identity import TaskIdentity
    from .admission import AdmissionPolicy

log = logging.getLogger("qworker")

__all__ = ["PendingTable", "Registration"]

_REGISTER_CHUNK = 1024  # entries registered per hold of the lock


@dataclass(slots=True, eq=False)
class Registration:
    """What one submission registered: a future per entry, in order, and the tasks it created."""

    futures: list[ResultFuture]
    new: list[Pending]
    _hand_on: Callable[[list[Pending]], None]
    handed_on: bool = field(default=False)

    def hand_on(self, tasks: list[Pending]) -> None:
        """Give ``tasks`` (those of ``new`` not resolved here) to whoever resolves them from here on."""
        self._hand_on(tasks)
        self.handed_on = True


class PendingTable:
    def __init__(self, *, cache: ResultCache, fallback_score: float, cache_read: bool = True) -> None:
        self.cache = cache
        self.cache_read = cache_read  # False: results are written to the cache but never answered from it
        self.fallback_score = fallback_score
        self._lock = threading.Lock()
        self._pending: dict[bytes, Pending] = {}
        self._closed: Optional[str] = None  # why, once closed
        # written under ``_lock`` only: "submitted", "rejected", "cache_hits", "deduplicated" by registrations (the
        # callers' threads); "resolved", "failed" by resolutions (whichever thread resolves)
        self._counts = {"submitted": 0, "rejected": 0, "resolved": 0, "failed": 0, "cache_hits": 0, "deduplicated": 0}

    @property
    def counts(self) -> dict[str, int]:
        """A consistent copy of the counters: submitted (rejected and cache hits included), rejected (bad
        payloads), cache_hits, deduplicated (shared a pending task), resolved (cache hits not included), failed."""
        with self._lock:
            return dict(self._counts)

    def __len__(self) -> int:
        return len(self._pending)

    def get(self, key: bytes) -> Optional[Pending]:
        return self._pending.get(key)

    @contextmanager
    def registering(self, entries: list[tuple[bytes, bytes]], *, reward: str, params: dict, timeout_s: Optional[float],
                    policy: Optional[AdmissionPolicy], now: float, hand_on: Callable[[list[Pending]], None],
                    lane: Hashable = 0, cache_read: bool = True, rejected: int = 0,
                    identity: Optional[TaskIdentity] = None) -> Iterator[Registration]:
        """Register ``(key, payload bytes)`` entries; the block owns the new tasks (NEW) until ``reg.hand_on``.

        An entry whose key is already pending shares that task's future; else,
        unless ``cache_read`` is False, one found in the memory cache tier
        resolves at once (its future in ``reg.futures``, no task made).
        ``rejected``: payloads of the same submission refused before (counted
        as submitted and rejected).  ``identity``: the new tasks' ``Pending.identity``.  The
        block resolves some of ``reg.new`` or none, and passes the rest to
        ``reg.hand_on``.  If it raises first, the new tasks still pending go to
        ``hand_on`` all the same, or are cancelled if that raises too.  Raises
        ``ProducerClosed`` once the table is closed.
        """
        reg = self._add(entries, reward=reward, params=params, timeout_s=timeout_s, policy=policy, now=now, hand_on=hand_on, lane=lane,
                        cache_read=cache_read, rejected=rejected, identity=identity)
        try:
            yield reg
        except BaseException as exc:
            if not reg.handed_on:
                self._hand_on_after(exc, reg.new, hand_on)
            raise

    def _hand_on_after(self, exc: BaseException, new: list[Pending], hand_on: Callable[[list[Pending]], None]) -> None:
        """A submission failed with ``exc`` while it owned ``new``: hand on those still pending, or cancel them."""
        left = [p for p in new if p.state is not DONE]
        try:
            hand_on(left)
        except BaseException as again:
            self._cancel(left, f"the submission that registered it failed ({type(exc).__name__}: {exc}; then "
                               f"{type(again).__name__}: {again})")

    def _add(self, entries: list[tuple[bytes, bytes]], *, reward: str, params: dict, timeout_s: Optional[float],
             policy: Optional[AdmissionPolicy], now: float, hand_on: Callable[[list[Pending]], None], lane: Hashable = 0,
             cache_read: bool = True, rejected: int = 0, identity: Optional[TaskIdentity] = None) -> Registration:
        futures: list[ResultFuture] = []
        new: list[Pending] = []
        hits: list[tuple[ResultFuture, bytes, tuple[float, dict]]] = []
        read = self.cache_read and cache_read  # False too for keys nothing is cached under (a version not yet reported)
        # A task without a policy is made with positional arguments only, and a lane other than 0 (a reward service's
        # client's) is set on it afterwards: a partial's keyword argument is merged into a fresh dict per call, which
        # took a task's construction from about 110 to 190 ns (measured when this was written).
        make: Callable[..., Pending] = Pending if policy is None else functools.partial(PolicyPending, policy=policy, lane=lane)
        then_lane = lane if policy is None and lane != 0 else None
        try:
            self._add_chunks(entries, reward, params, timeout_s, now, identity, make, then_lane, read, futures, new, hits, rejected)
        except ProducerClosed:
            raise  # what earlier chunks registered is in the table, and ``close`` cancels it
        except BaseException as exc:  # a cache tier or a bug, past earlier chunks: their tasks must not be stranded
            self._hand_on_after(exc, new, hand_on)
            raise
        for fut, key, (score, extra) in hits:
            fut.set_result(Result(score=score, extra=extra, cached=True, key=key.hex()))
        return Registration(futures, new, hand_on)

    def _add_chunks(self, entries: list[tuple[bytes, bytes]], reward: str, params: dict, timeout_s: Optional[float], now: float,
                    identity: Optional[TaskIdentity], make: Callable[..., Pending], then_lane: Optional[Hashable], read: bool,
                    futures: list[ResultFuture], new: list[Pending], hits: list[tuple[ResultFuture, bytes, tuple[float, dict]]],
                    rejected: int) -> None:
        """``_add``'s registration, chunk by chunk, into ``futures``, ``new`` and ``hits``; each new task made by ``make``
        and, unless ``then_lane`` is None, given that lane."""
        cache_get, cache_holds = self.cache.get, self.cache.holds
        pending = self._pending
        counts = self._counts
        for start in range(0, max(len(entries), 1), _REGISTER_CHUNK):
            # The lock is released between chunks so that ``close`` never waits on a large batch.  ``close``
            # sets ``_closed`` before it takes the lock, so the next chunk sees it and stops (a waiter is not
            # starved by this thread taking the lock again at once); what earlier chunks registered is in the
            # table, and ``close`` cancels it.
            with self._lock:
                if self._closed is not None:
                    raise ProducerClosed(f"cannot submit: {self._closed}")
                chunk = entries[start : start + _REGISTER_CHUNK]
                hits_before, new_before = len(hits), len(new)
                for key, payload in chunk:
                    p = pending.get(key)
                    if p is None:
                        # The one memory-tier lookup of this key; ``resolve`` caches under this lock, so a task
                        # that resolved a moment ago is found here, not paid for again.
                        hit = cache_get(key) if read and cache_holds(key) else None
                        if hit is not None:
                            fut = ResultFuture()
                            hits.append((fut, key, hit))
                            futures.append(fut)
                            continue
                        p = pending[key] = make(key, reward, params, payload, timeout_s, ResultFuture(), now, identity)
                        if then_lane is not None:
                            p.lane = then_lane
                        new.append(p)
                    futures.append(p.future)
                n_hits, n_new = len(hits) - hits_before, len(new) - new_before
                counts["submitted"] += len(chunk) + rejected
                counts["rejected"] += rejected
                counts["cache_hits"] += n_hits
                counts["deduplicated"] += len(chunk) - n_new - n_hits
                rejected = 0  # counted with the first chunk

    def claim(self, tasks: Sequence[Pending], *, count_as: Optional[str] = None) -> list[Pending]:
        """Take the right to resolve each task (it is DONE from here); returns those still unresolved, each once.
        ``count_as``: the counter these add to."""
        claimed = []
        with self._lock:
            pending = self._pending
            for p in tasks:
                if pending.get(p.key) is p:
                    del pending[p.key]
                    p.finish()
                    claimed.append(p)
            if count_as is not None:
                self._counts[count_as] += len(claimed)
        return claimed

    def resolve(self, done: Sequence[Resolution]) -> None:
        """Resolve tasks from their outcomes (the first outcome of a task wins); cache the scores.

        The scores are cached before the tasks leave the table, under its lock, so
        an identical submission at any moment finds either the task or its score.
        The futures are set outside the lock, under one hold of the futures' own lock.
        """
        now = time.monotonic()
        fallback = self.fallback_score
        claimed: list[Pending] = []
        results: list[Result] = []
        rows = []  # successes to cache, under the key of the code that computed each (``Pending.cache_as``)
        with self._lock:
            pending = self._pending
            failed = 0
            for p, score, extra, error, worker, compute_s in done:
                key = p.key
                q = pending.pop(key, None)  # (one dict operation for the usual case: the task is there)
                if q is not p:
                    if q is not None:  # another task of this key (a resubmission after an earlier one resolved)
                        pending[key] = q
                    continue
                claimed.append(p)
                if extra is None:
                    extra = p.empty_extra  # made with the task: nothing made here outlives the batch (see ``Pending``)
                if error is not None or score is None:
                    failed += 1
                    score = fallback
                elif k := (key if p.cache_as is None else p.cache_as):  # b"": not cached
                    rows.append((k, score, extra, p.reward))  # the disk cache records each row's reward
                results.append(Result(score=score, extra=extra, error=None if error is None else str(error),  # the edge: text
                                      attempts=p.attempts, worker=worker, latency_s=now - p.submitted, compute_s=compute_s,
                                      key=key.hex()))
            finish_all(claimed)
            counts = self._counts
            counts["resolved"] += len(claimed)
            counts["failed"] += failed
            self._cache(self.cache.put_many, rows)
        resolve_many(zip([p.future for p in claimed], results, strict=True))

    def resolve_cached(self, tasks: list[Pending], found: dict[bytes, tuple[float, dict]]) -> None:
        """Resolve tasks whose results a slower cache tier had (the memory tier learns them)."""
        hits = self.claim(tasks, count_as="cache_hits")
        # The memory tier copies each ``extra`` before any future is set: a done-callback that changes its result's
        # ``extra`` then changes only its own copy, never what later hits get.
        self._cache(self.cache.remember, [(p.key, *found[p.key]) for p in hits])
        for p in hits:
            score, extra = found[p.key]
            p.future.set_result(Result(score=score, extra=extra, cached=True, key=p.key.hex()))

    @staticmethod
    def _cache(put: Callable[[list], None], rows: list) -> None:
        if not rows:
            return
        try:
            put(rows)
        except Exception:  # the futures are resolved already; only the caching is lost
            log.exception("qworker: could not cache %d results", len(rows))

    def close(self, why: str) -> None:
        """Refuse later registrations, and resolve every task still pending as cancelled."""
        self._closed = why  # before the lock: a registration in progress stops at its next chunk
        with self._lock:
            left = list(self._pending.values())
        self._cancel(left, why)

    def _cancel(self, tasks: Sequence[Pending], why: str) -> None:
        for p in self.claim(tasks):
            p.future.set_result(Result(score=self.fallback_score, error=ErrorKind.CANCELLED.error(why), attempts=p.attempts,
                                       key=p.key.hex()))
