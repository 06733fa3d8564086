"""``FutureTable``: futures that one thread hands out and other threads resolve; a ``Client``'s own.

A ``Client`` does not hash, deduplicate or cache: the service does.  It only
needs each future it hands out to resolve exactly once, whichever of its
threads (the I/O thread with a result, a caller giving up, ``close``) gets
there first.  This table keeps that, and nothing else.

Contract:

* ``register(n)`` makes a ``Batch`` of ``n`` fresh futures, held by the
  table until ``hand_out(batch)``.  It creates them without the table's lock
  and takes the lock once, for O(1) work, to enter the batch; it checks for
  ``close`` every ``CHECK_EVERY`` futures, so a large registration racing
  ``close`` stops within that many and raises ``ProducerClosed``.
* ``hand_out(batch)`` is called just before the futures are given to the
  caller: it raises ``ProducerClosed`` once the table is closed, so a batch
  is either handed out before ``close`` (and ``close`` cancels what is left of
  it) or never handed out at all (``close`` drops it: nobody can wait on its
  futures).  So ``close`` costs O(1) per batch not handed out, whatever its
  size.
* ``resolve(batch, indexes, results)`` sets the future at each of ``indexes``
  to the result at the same position of ``results`` (sequences of one length,
  else ``ValueError`` and nothing set): **the first result of a
  future wins** (the future's own lock decides; a later one is ignored), so a
  result that arrives twice, or after ``close``, changes nothing.  Returns how
  many futures this call resolved.  A batch whose every future has resolved
  leaves the table.
* ``close(why)`` refuses later registrations and hand-outs, and resolves
  every future handed out and still pending as ``cancelled``
  (``ErrorKind.CANCELLED``, naming ``why``) before it returns.  It holds the
  lock only to take the batches out: it never waits on a registration in
  progress.
* Thread-safe: any thread may call any method.  Futures are resolved outside
  the lock; their callbacks run on the resolving thread, as each resolves, or,
  for what a thread resolves inside its ``callbacks_after()``, at the end of
  it, in the order their futures resolved (threads sleeping on them are woken
  at once): so a region where user code must not run (the collector paused)
  can resolve futures.
"""

from __future__ import annotations

import concurrent.futures
import threading
from contextlib import contextmanager
from typing import Iterable, Iterator, Optional

from .._errors import ErrorKind
from .._exceptions import ProducerClosed
from .result import Callbacks, Result, ResultFuture, resolve_first, run_callbacks

__all__ = ["Batch", "FutureTable", "CHECK_EVERY"]

CHECK_EVERY = 1024  # futures created between checks for close


class Batch:
    """The futures of one registration, in order; ``left``: how many have not resolved (kept by the table)."""

    __slots__ = ("futures", "left", "handed_out")

    def __init__(self, futures: list[ResultFuture]) -> None:
        self.futures = futures
        self.left = len(futures)
        self.handed_out = False


class FutureTable:
    def __init__(self, *, fallback_score: float) -> None:
        """``fallback_score``: the score of a future ``close`` cancels."""
        self.fallback_score = fallback_score
        self._lock = threading.Lock()
        self._live: set[Batch] = set()  # registered, with futures not yet resolved
        self._closed: Optional[str] = None  # why, once closed
        self._held: dict[int, Callbacks] = {}  # thread ident -> the callbacks it holds (``callbacks_after``); each its own

    def __len__(self) -> int:
        """Futures registered (handed out or not yet) and not yet resolved."""
        with self._lock:
            return sum(b.left for b in self._live)

    def register(self, n: int) -> Batch:
        """A batch of ``n`` new futures; ``ProducerClosed`` once the table is closed."""
        futures: list[ResultFuture] = []
        for start in range(0, n, CHECK_EVERY):
            if self._closed is not None:
                raise ProducerClosed(f"cannot submit: {self._closed}")
            futures += [ResultFuture() for _ in range(min(CHECK_EVERY, n - start))]
        batch = Batch(futures)
        with self._lock:
            if self._closed is not None:
                raise ProducerClosed(f"cannot submit: {self._closed}")
            if n:
                self._live.add(batch)
        return batch

    def hand_out(self, batch: Batch) -> list[ResultFuture]:
        """The batch's futures, for its caller; ``ProducerClosed`` once the table is closed."""
        with self._lock:
            if self._closed is not None:
                raise ProducerClosed(f"cannot submit: {self._closed}")
            batch.handed_out = True
        return batch.futures

    def resolve(self, batch: Batch, indexes: Iterable[int], results: Iterable[Result]) -> int:
        """Set the future at each of ``indexes`` to the result at the same position of ``results``, unless it resolved
        before; returns how many this call set.  ``ValueError`` if the two differ in length, ``IndexError`` if an index is
        not one of the batch's positions: in either case nothing is set."""
        pairs = list(zip(map(batch.futures.__getitem__, indexes), results, strict=True))  # all checked before any is set
        fresh = resolve_first(pairs, self._held.get(threading.get_ident()))  # one hold of the futures' lock
        if fresh:
            with self._lock:
                batch.left -= fresh
                if batch.left <= 0:
                    self._live.discard(batch)
        return fresh

    @contextmanager
    def callbacks_after(self) -> Iterator[None]:
        """Inside, the callbacks of the futures this thread resolves (``resolve``, ``fail``) are held; they run at its
        end, on this thread, in order, even when it ends by an exception.  Not nested."""
        me = threading.get_ident()
        if me in self._held:
            raise RuntimeError("callbacks_after() entered twice on one thread")
        held: Callbacks = []
        self._held[me] = held
        try:
            yield
        finally:
            self._held.pop(me, None)
            run_callbacks(held)

    def fail(self, batch: Batch, indexes: Iterable[int], error: str) -> int:
        """Resolve the futures at ``indexes`` (those still pending) with ``error`` and the fallback score."""
        indexes = list(indexes)
        return self.resolve(batch, indexes, [Result(score=self.fallback_score, error=error) for _ in indexes])

    def close(self, why: str) -> None:
        """Refuse later registrations; resolve every pending future as cancelled."""
        with self._lock:
            self._closed = why
            batches = list(self._live)
            self._live.clear()
        error = ErrorKind.CANCELLED.error(why)
        score = self.fallback_score
        for batch in batches:
            if not batch.handed_out:
                continue  # nobody holds its futures: its caller raises ProducerClosed at hand_out
            for f in batch.futures:
                if not f.done():
                    try:
                        f.set_result(Result(score=score, error=error))
                    except concurrent.futures.InvalidStateError:
                        pass  # resolved meanwhile by another thread: that result won
            batch.left = 0
