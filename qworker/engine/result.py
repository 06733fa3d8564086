"""``Result`` and ``ResultFuture``: what a submitted task resolves to."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from typing import Any, Callable, Generator, Iterable, Optional, Sequence

import msgspec

from .._errors import ErrorKind
from .._exceptions import GatherTimeout
from .arguments import check_futures

__all__ = ["Result", "ResultFuture", "gather", "resolve_many"]

class Result(msgspec.Struct, kw_only=True, gc=False):
    """The outcome of one reward task.

    ``score`` is the reward's score, or the producer's ``fallback_score`` when
    ``error`` is set; check ``ok`` (or ``error``) rather than trusting a 0.
    ``latency_s`` runs from submission to resolution as the trainer sees it;
    ``compute_s`` is the time spent inside the reward on the worker.

    A struct with fields (keyword arguments; equal when its fields are), which
    the cyclic garbage collector does not track: a producer makes one per task,
    and tracking them made collections rescan every result a trainer still
    holds.  Do not make it part of a reference cycle (an ``extra`` that holds
    the result itself): such a cycle is never freed.
    """

    score: float = 0.0
    extra: dict = msgspec.field(default_factory=dict)
    error: Optional[str] = None
    cached: bool = False
    attempts: int = 0
    worker: str = ""
    latency_s: float = 0.0
    compute_s: float = 0.0
    key: str = ""  # hex task hash

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def error_kind(self) -> Optional[ErrorKind]:
        """Why it failed (``ErrorKind.TIMEOUT``, ... which compare equal to ``"timeout"``, ...), or None."""
        return ErrorKind.of(self.error)

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score, "extra": self.extra, "error": self.error, "cached": self.cached,
            "attempts": self.attempts, "worker": self.worker, "latency_s": round(self.latency_s, 6),
            "compute_s": round(self.compute_s, 6), "key": self.key,
        }


_base = concurrent.futures._base
_PENDING, _RUNNING, _FINISHED = _base.PENDING, _base.RUNNING, _base.FINISHED
_log = logging.getLogger("qworker")

# Guards the state of every ResultFuture: its transition to FINISHED, its callbacks, and the lazy
# creation of its Condition.  Held for a few attribute reads and writes only, never while waiting.
_state_lock = threading.Lock()


class ResultFuture(concurrent.futures.Future):
    """A ``concurrent.futures.Future`` of a ``Result`` that is also awaitable.

    It never raises for a failed task: the ``Result`` carries the error.
    Callbacks added with ``add_done_callback`` run on the thread that resolves
    it (the producer's dispatcher thread): keep them short.

    It works wherever a ``Future`` does (``concurrent.futures.wait`` and
    ``as_completed``, ``asyncio.wrap_future``, ``await``), but costs less: a
    stdlib ``Future`` makes a ``Condition`` over an ``RLock`` for each future
    and takes it on every call, while a ``ResultFuture`` makes its
    ``Condition`` only when a thread has to sleep on it, and reads a finished
    result without a lock.  ``resolve_many`` finishes a batch under one hold
    of the module's state lock.  A ``ResultFuture`` never holds an exception
    (``set_exception`` raises ``TypeError``).
    """

    _exception: Optional[BaseException] = None  # never set: Future's own methods (``__repr__``) read it

    def __init__(self) -> None:  # noqa: D107 - no Future.__init__: its Condition is what this avoids
        self._state = _PENDING
        self._result: Optional[Result] = None
        self._cond: Optional[threading.Condition] = None  # made by the first thread that waits
        # never changed in place: a tuple that ``add_done_callbacks`` may share between futures, replaced to add one
        self._callbacks: Optional[tuple[Callable[[concurrent.futures.Future], object], ...]] = None
        self._waiter_list: Optional[list] = None  # concurrent.futures.wait's waiters, under the Condition
        # A note for a party that follows futures besides their callbacks, kept on the future so that it needs no
        # table of the futures it follows (a table of every task in flight, whose lookups miss the CPU's caches): who
        # asked for it (``asker``) and at what position (``asked_at``).  The future never reads them.  A follower may
        # read a note another follower wrote, and writes one only where none is or where the note is its own (a
        # reward service marks its notes: ``service.server``).  Set here, with the future's other attributes: one
        # added later would give the future a dict of its own.  GC-safe as long as a note never refers back to a future.
        self.asker: Any = None
        self.asked_at = 0

    # the parts of Future's internals that concurrent.futures.wait and as_completed touch
    @property
    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _state_lock:
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition(threading.Lock())
        return cond

    @_condition.setter
    def _condition(self, cond: threading.Condition) -> None:
        self._cond = cond

    @property
    def _waiters(self) -> list:
        waiters = self._waiter_list
        if waiters is None:
            with _state_lock:
                waiters = self._waiter_list
                if waiters is None:
                    waiters = self._waiter_list = []
        return waiters

    @_waiters.setter
    def _waiters(self, waiters: list) -> None:
        self._waiter_list = waiters

    # reading ----------------------------------------------------------------
    def cancel(self) -> bool:
        """Always False: a task is shared by every duplicate submission, so it
        runs to its result (asyncio's ``wait_for`` timing out leaves it running)."""
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return self._state is _RUNNING

    def done(self) -> bool:
        return self._state is _FINISHED

    def result(self, timeout: Optional[float] = None) -> Result:
        """The ``Result``, sleeping until there is one for at most ``timeout`` s (for ever if None);
        raises ``concurrent.futures.TimeoutError`` after that."""
        if self._state is _FINISHED:  # _result is written before _state
            return self._result  # type: ignore[return-value]
        cond = self._condition
        with cond:
            if timeout is None:
                while self._state is not _FINISHED:
                    cond.wait()
            else:
                deadline = time.monotonic() + timeout
                while self._state is not _FINISHED:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise concurrent.futures.TimeoutError()
                    cond.wait(left)
        return self._result  # type: ignore[return-value]

    def exception(self, timeout: Optional[float] = None) -> None:
        """None once done (a ``ResultFuture`` never holds an exception); waits like ``result``."""
        self.result(timeout)
        return None

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future], object]) -> None:
        """Call ``fn(self)`` when it resolves, on the resolving thread; at once if it is done."""
        with _state_lock:
            if self._state is not _FINISHED:
                callbacks = self._callbacks
                self._callbacks = (fn,) if callbacks is None else (*callbacks, fn)  # as ``add_done_callbacks`` adds one
                return
        try:
            fn(self)
        except Exception:
            _log.exception("exception calling callback for %r", self)

    # resolving --------------------------------------------------------------
    def set_running_or_notify_cancel(self) -> bool:
        with _state_lock:
            if self._state is not _PENDING:
                raise RuntimeError(f"Future in unexpected state: {self._state}")
            self._state = _RUNNING
        return True

    def set_result(self, result: Result) -> None:
        """Resolve it; ``InvalidStateError`` if it is resolved already."""
        with _state_lock:
            if self._state is _FINISHED:
                raise concurrent.futures.InvalidStateError(f"{self!r} is resolved already")
            self._result = result
            self._state = _FINISHED
            cond, callbacks = self._cond, self._callbacks
            self._callbacks = None
        if cond is not None or callbacks is not None:
            _wake(self, cond, callbacks)

    def set_exception(self, exception: Optional[BaseException]) -> None:
        raise TypeError("a ResultFuture resolves to a Result (with its error set), never to an exception")

    def __repr__(self) -> str:
        if self._state is _FINISHED:
            return f"<ResultFuture at {id(self):#x} state=finished returned {self._result!r}>"
        return f"<ResultFuture at {id(self):#x} state={self._state.lower()}>"

    def __await__(self) -> Generator[Any, None, Result]:
        return asyncio.wrap_future(self).__await__()


Callbacks = list[tuple[ResultFuture, Sequence[Callable[[concurrent.futures.Future], object]]]]  # futures and their callbacks, to run


def _resolve(pairs: Iterable[tuple[ResultFuture, Result]], later: Optional[Callbacks] = None) -> tuple[int, Optional[ResultFuture]]:
    """Resolve each future not resolved yet with its result, under one hold of the state lock; then wake its
    waiters and run its callbacks (or, given ``later``, append them there, for ``run_callbacks``).  Returns how many
    this call resolved, and one that was resolved already (or None)."""
    woken: list[tuple[ResultFuture, Optional[threading.Condition], Optional[Sequence]]] = []
    again: Optional[ResultFuture] = None
    fresh = 0
    with _state_lock:
        for fut, result in pairs:
            if fut._state is _FINISHED:
                again = fut
                continue
            fut._result = result
            fut._state = _FINISHED
            fresh += 1
            if fut._cond is not None or fut._callbacks is not None:
                woken.append((fut, fut._cond, fut._callbacks))
                fut._callbacks = None
    if later is not None:
        for fut, cond, callbacks in woken:
            _wake(fut, cond, None)
            if callbacks:
                later.append((fut, callbacks))
        return fresh, again
    for fut, cond, callbacks in woken:  # ``_wake(fut, cond, callbacks)``, inline: once per followed future
        if cond is not None:
            _wake(fut, cond, None)
        for fn in callbacks or ():
            try:
                fn(fut)
            except Exception:
                _log.exception("exception calling callback for %r", fut)
    return fresh, again


def resolve_many(pairs: Iterable[tuple[ResultFuture, Result]]) -> None:
    """Resolve each future with its result, under one hold of the state lock; then wake its waiters
    and run its callbacks.  ``InvalidStateError`` (after resolving the others) if one was resolved already."""
    _, again = _resolve(pairs)
    if again is not None:
        raise concurrent.futures.InvalidStateError(f"{again!r} is resolved already")


def resolve_first(pairs: Iterable[tuple[ResultFuture, Result]], later: Optional[Callbacks] = None) -> int:
    """``resolve_many`` where the first result of a future wins: one already resolved is left as it is (no
    error).  Returns how many this call resolved.  Given ``later``, the threads sleeping on the futures are woken at
    once, and their callbacks appended to ``later`` instead of run: the caller runs them (``run_callbacks``)."""
    return _resolve(pairs, later)[0]


def run_callbacks(later: Callbacks) -> None:
    """Run the callbacks ``resolve_first`` put in ``later``, in order (each as ``add_done_callback``'s: one that raises
    is logged), and empty it."""
    for fut, callbacks in later:
        _wake(fut, None, callbacks)
    later.clear()


def add_done_callbacks(futures: Iterable[ResultFuture], fn: Callable[[concurrent.futures.Future], object]) -> None:
    """``fut.add_done_callback(fn)`` for each future, under one hold of the state lock (a reward service
    follows every task of a request); ``fn`` runs at once, on this thread, for each that is done already.
    The futures that had no callback share one tuple ``(fn,)``: no object per future that lives until it
    resolves (a reward service follows every task it holds, and the cyclic GC would rescan each such list).
    A future's callbacks are a tuple, never changed in place: one that has some gets a new tuple with ``fn`` added."""
    done: list[ResultFuture] = []
    only = (fn,)
    with _state_lock:
        for fut in futures:
            if fut._state is _FINISHED:
                done.append(fut)
                continue
            callbacks = fut._callbacks
            fut._callbacks = only if callbacks is None else (*callbacks, fn)
    for fut in done:
        _wake(fut, None, only)


def _wake(fut: ResultFuture, cond: Optional[threading.Condition], callbacks: Optional[Sequence]) -> None:
    """After ``fut`` finished: wake the threads sleeping on it, then run its callbacks (outside every lock)."""
    if cond is not None:
        with cond:
            for waiter in fut._waiter_list or ():
                waiter.add_result(fut)
            cond.notify_all()
    for fn in callbacks or ():
        try:
            fn(fut)
        except Exception:
            _log.exception("exception calling callback for %r", fut)


def gather(futures: Sequence[concurrent.futures.Future], timeout: Optional[float] = None) -> list[Result]:
    """The ``Result`` of each future, in order; sleeps until all are done.

    Raises ``GatherTimeout`` after ``timeout`` seconds; unfinished futures stay
    pending and may still resolve.  One future alone is refused (``TypeError``): write ``gather([future])``.
    """
    check_futures(futures)
    if not isinstance(futures, Sequence):  # (a generator, a set: waited on from the last)
        futures = list(futures)
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
                f"{not_done} of {len(futures)} tasks unfinished after {timeout} s", done=len(futures) - not_done, pending=not_done,
            ) from None
    results.reverse()
    return results
