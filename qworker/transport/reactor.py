"""``Reactor``: the one poll loop of a thread that owns ZeroMQ sockets.

The producer's dispatcher (and a reward service's handlers on it) and a
``Client``'s I/O thread each own their sockets and run this loop: wait until a socket is
readable, another thread calls ``wake()``, or a deadline passes; then run the
registered handlers; repeat until ``stop()``.

Contract:

* **Threads.**  ``run()`` runs on the thread that owns the sockets (the
  *reactor thread*), and every handler runs there, one at a time.  ``wake()``
  and ``stop()`` are the only methods safe to call from other threads: state
  handed over from them (a deque appended to, a flag) is picked up by a handler
  on the turn the wake causes.  Register handlers before ``run()`` or from a
  handler; ``cancel`` one the same way (it does not run again, its socket is
  no longer polled).  Several owners may share one reactor (a reward service
  runs its handlers on its producer's dispatcher thread).
* **A turn.**  The loop waits (``zmq.Poller``) for a registered socket to be
  readable, a ``wake()``, or the nearest deadline: the next ``every`` callback
  that is due and the smallest value any ``deadline`` function returns, capped
  at ``max_wait_s``.  Then it runs, in the order they were registered: each
  socket handler whose socket was readable, each ``every`` callback whose
  interval has passed since it last ran, and each ``each_turn`` callback.  A
  socket handler should read what is waiting, at most a bounded number of
  messages: what it leaves makes the next wait return at once.
* **Units.**  Seconds, as floats, on ``time.monotonic()``; handlers given
  ``now`` get the turn's ``time.monotonic()`` (read after the wait).
* **Wakes coalesce.**  ``wake()`` writes at most one byte to the wake pipe per
  turn, however often it is called: a caller appends its work, then wakes.  A
  wake from the reactor thread itself (a handler handing work to the same loop)
  writes none: the next turn follows at once, without waiting.
* **A handler that raises** an ``Exception`` does not stop the loop: the error
  is counted (``errors``), logged with the handler's name and the reactor's (the
  first of each kind of error per handler with its traceback; repeats as one
  line at the 10th, 100th, 1000th... occurrence), and the turn goes on with the
  next handler.  A ``BaseException`` that is not an ``Exception``
  (``KeyboardInterrupt``, ``SystemExit``) ends ``run()``.
* **Stopping.**  ``stop()`` makes ``run()`` return after the current turn;
  before it returns, each function given to ``at_exit`` runs on the reactor
  thread (an owner sharing the reactor sends its last messages and closes its
  socket), whatever ended the loop, unless ``forget`` removed it first.  The reactor closes no socket (their owner
  does, after ``run()``); ``close()`` releases the wake pipe once the reactor
  thread has finished.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import zmq

from .sockets import WakePipe

log = logging.getLogger("qworker")

__all__ = ["Reactor", "Step"]

DEFAULT_MAX_WAIT_S = 1.0


@dataclass(slots=True, eq=False)
class _Step:
    name: str
    run: Callable[[float], None]
    sock: Optional[zmq.Socket] = None  # a socket handler: runs when this socket is readable
    every_s: float = 0.0  # a periodic callback: runs once this long has passed since it last ran
    due: float = 0.0  # when a periodic callback runs next (monotonic s)
    seen: dict[str, int] = field(default_factory=dict)  # kind of error -> times it was raised
    cancelled: bool = False


Step = _Step  # what the registering methods return, for ``cancel``


class Reactor:
    def __init__(self, *, name: str, max_wait_s: float = DEFAULT_MAX_WAIT_S) -> None:
        """``name`` appears in every log line (e.g. ``"dispatcher"``); ``max_wait_s``: the longest wait of a
        turn when no deadline is nearer."""
        self.name = name
        self.max_wait_s = max_wait_s
        self.errors = 0  # handler exceptions caught
        self._steps: list[_Step] = []
        self._deadlines: list[Callable[[float], Optional[float]]] = []
        self._at_exit: list[Callable[[], None]] = []
        self._deadline_seen: dict[str, int] = {}
        self._poller = zmq.Poller()
        self._pipe = WakePipe()
        self._poller.register(self._pipe.fd, zmq.POLLIN)
        self._woken = False  # a byte is in the pipe (or about to be), or ``_again`` is set, for this turn
        self._again = False  # a handler woke the reactor from its own thread: the next turn does not wait
        self._thread: Optional[int] = None  # the reactor thread's ident, while ``run()`` runs
        self._stopping = False

    # registering (the reactor thread, or before run) ------------------------------
    def on_readable(self, sock: zmq.Socket, handler: Callable[[], None], *, name: str) -> Step:
        """Run ``handler()`` on each turn that ``sock`` is readable; ``name`` (what it does) is logged if it raises."""
        self._poller.register(sock, zmq.POLLIN)
        return self._add(_Step(name, lambda now: handler(), sock=sock))

    def every(self, interval_s: float, fn: Callable[[float], None], *, name: str, first_in_s: float = 0.0) -> Step:
        """Run ``fn(now)`` every ``interval_s`` seconds (at the first turn past each due time); the first run is
        ``first_in_s`` after registering."""
        return self._add(_Step(name, fn, every_s=interval_s,
                               due=time.monotonic() + first_in_s))

    def each_turn(self, fn: Callable[[float], None], *, name: str) -> Step:
        """Run ``fn(now)`` on every turn."""
        return self._add(_Step(name, fn))

    def cancel(self, step: Step) -> None:
        """Stop running ``step`` (a turn in progress skips it too); its socket is no longer polled."""
        step.cancelled = True
        self._steps = [s for s in self._steps if s is not step]  # a new list: a turn in progress iterates the old one
        if step.sock is not None:
            self._poller.unregister(step.sock)

    def _add(self, step: _Step) -> Step:
        self._steps = [*self._steps, step]  # a new list: a turn in progress iterates the old one
        return step

    def at_exit(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on the reactor thread when ``run()`` ends (after its last turn; an exception is logged)."""
        self._at_exit = [*self._at_exit, fn]  # a new list: ``run`` may be iterating the old one

    def deadline(self, fn: Callable[[float], Optional[float]]) -> None:
        """Before each wait, ``fn(now)`` says in how many seconds a turn is needed (None: no need)."""
        self._deadlines = [*self._deadlines, fn]  # a new list: a turn in progress iterates the old one

    def forget(self, fn: Callable[..., object]) -> None:
        """Remove ``fn`` (given to ``at_exit`` or ``deadline``) from both: it is not called again, and the
        reactor no longer refers to it (an owner leaving a shared reactor).  An ``at_exit`` pass in progress
        still runs the functions it had started with."""
        self._at_exit = [f for f in self._at_exit if f != fn]
        self._deadlines = [f for f in self._deadlines if f != fn]

    # any thread ---------------------------------------------------------------------
    def wake(self) -> None:
        """Make the reactor thread take a turn soon (at once if it is waiting)."""
        if not self._woken:
            self._woken = True
            if threading.get_ident() == self._thread:  # a handler: no byte needed, its loop is not waiting
                self._again = True
            else:
                self._pipe.wake()

    def stop(self) -> None:
        """Make ``run()`` return after its current turn."""
        self._stopping = True
        self._woken = False  # this wake must not be coalesced away (from a handler, the loop sees ``_stopping`` next)
        self.wake()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def close(self) -> None:
        """Release the wake pipe (once ``run()`` has returned, or will never run)."""
        self._pipe.close()

    # the reactor thread -----------------------------------------------------------------
    def run(self) -> None:
        """Take turns until ``stop()``, then run the ``at_exit`` functions; see the module's contract."""
        self._thread = threading.get_ident()
        try:
            self._turns()
        finally:
            self._thread = None
            for fn in self._at_exit:
                try:
                    fn()
                except Exception as exc:
                    self._failed("at exit", exc, {})

    def _turns(self) -> None:
        poll = self._poller.poll
        pipe_fd = self._pipe.fd
        while not self._stopping:
            steps = self._steps  # registering or cancelling makes a new list, for the next turn
            now = time.monotonic()
            wait = self.max_wait_s
            for step in steps:
                if step.every_s and step.due - now < wait:
                    wait = step.due - now
            for fn in self._deadlines:
                try:
                    d = fn(now)
                except Exception as exc:
                    self._failed("deadline", exc, self._deadline_seen)
                    continue
                if d is not None and d < wait:
                    wait = d
            if self._again:
                wait = 0
            ready = dict(poll(max(0, int(wait * 1000 + 0.999))))  # ms, rounded up: never wakes just short of a due time
            if pipe_fd in ready:
                self._pipe.drain()  # drain first, then clear: a wake in between writes a fresh byte
            self._again = False
            self._woken = False
            now = time.monotonic()
            for step in steps:
                if step.cancelled:
                    continue
                if step.sock is not None:
                    if step.sock not in ready:
                        continue
                elif step.every_s:
                    if now < step.due:
                        continue
                    step.due = now + step.every_s
                try:
                    step.run(now)
                except Exception as exc:
                    self._failed(step.name, exc, step.seen)

    def _failed(self, where: str, exc: Exception, seen: dict[str, int]) -> None:
        self.errors += 1
        kind = type(exc).__name__
        n = seen[kind] = seen.get(kind, 0) + 1
        if n == 1:
            log.error("qworker %s: %s raised %s: %s (the loop goes on)", self.name, where, kind, exc, exc_info=exc)
        elif n in (10, 100, 1000) or n % 10_000 == 0:
            log.error("qworker %s: %s raised %s %d times so far (the loop goes on); latest: %s", self.name, where, kind, n, exc)
