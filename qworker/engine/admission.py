"""Admission policies: what holds a task between its submission and its dispatch, and decides after its result.

Most tasks need no policy: they go straight to the scheduler's queue and wait
only for a worker's credit.  A task that calls something with a capacity of
its own (an LLM judge's endpoints, a remote sandbox, an external verifier)
waits in its policy until that capacity has room; the policy then says which
part of it the call uses (``meta``, carried to the worker with the task) and,
from what the call reports back (the result's ``meta``), whether the task is
tried again.  The scheduler knows policies only through ``AdmissionPolicy``
below; it names no kind of policy.

**Choosing a policy.**  A reward declares the provider of its policy
(``@reward(..., admission="package.module:Factory")``, a ``PolicySource``); the
producer makes one source per declared path, lazily, and asks it
``submission(params)`` at each submission: the policy the submission's tasks
get, the params that go into their hash (what chooses *where* a call goes is
not *what* it scores), the hard limit their tasks need, and the params they
carry to the worker (the policy's own settings stay in the producer).  A reward that
declares none gets no policy: straight to the queue.

**The hooks** (all called on the dispatcher thread; ``now`` is monotonic seconds):

* ``add(tasks)``: new tasks to hold until admitted (in order).
* ``admit(now, budget) -> (send, fail)``: at most ``budget`` tasks to dispatch
  now, in order, and ``(task, error)`` pairs to fail now (``error`` a ``Fault``:
  an ``ErrorKind`` and a detail).  A task returned in either is no longer in the policy's
  queue; the policy keeps what it knows of a sent task until ``on_result``
  resolves it or ``forget``, and forgets a failed one at once.  The scheduler
  puts ``send`` at the front of its queue (ahead of tasks with no policy) and
  resolves ``fail``.  A resolved task found in the policy's queue is dropped
  and forgotten.
* ``meta(task) -> dict``: the metadata this delivery of an admitted task carries
  to the worker (the wire's ``Task.meta``), which hands it to the reward
  unchanged (``EndpointCall.meta``).  Called when the task is sent.  Keep it to
  a few small values: the scheduler bounds a task's size in a message with a
  fixed allowance of 64 bytes (``TASK_OVERHEAD``) besides its payload, reward
  name and params, and a larger meta is not counted in it.
* ``next_wake(now) -> seconds or None``: the monotonic time at which ``admit``
  may let a held task go although nothing else happens (a delay, a cooldown);
  None when only a result or a new task can.
* ``tick(now)``: housekeeping, every dispatcher turn, before ``admit``.
* ``on_result(task, meta, error, now) -> Decision``: a delivered task's result
  came back with the reward's reported ``meta`` (None when it reported none)
  and ``error``, the worker's ``Fault`` (None on success).  ``Decision.retry``: the policy has queued
  the task again (the delivery is not charged to the task: the call, not the
  worker, is what is retried); else the task resolves with ``Decision.error``
  (the worker's error, possibly with the policy's account added) and the
  policy has dropped its state for it.
* ``give_back(tasks)``: delivered tasks came back unanswered (their worker
  was lost, or handed them back unrun) and are to be sent again: the policy
  releases their calls and queues them at its front, keeping what it counts
  across calls (retries so far).
* ``forget(task)``: the task leaves for good without a result for the policy
  (resolved elsewhere, failed with its worker, too large to send): drop every
  trace of it.  Forgetting a task the policy does not hold is harmless.
* ``waiting() -> int``: tasks held (not yet admitted), for status.
* ``snapshot(now)``: the policy's status row (``qworker status``'s ``judges``).

Errors cross this interface as ``Fault`` values, ``(kind, detail)``, as they cross
the wire: a policy reads a failure's kind without parsing text, and builds its
own as ``Fault(ErrorKind.X, detail)``.  They become ``Result.error``'s
``"kind: detail"`` text only as the result is made (``PendingTable.resolve``).

A policy never resolves a task itself; it holds no lock (one thread drives it)
and keeps its per-task state in its own tables, keyed by the task object,
never on ``Pending``.  The default is no policy (``Pending.policy`` None): the
task goes straight to the scheduler's queue.  The one policy today is the LLM
judge's gate (``qworker.judge.control.gate.Gate``, source ``judge.control.registry.JudgeGates``).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any, Optional, Protocol

from .._exceptions import ConfigError
from .status import JudgeStatus as PolicyStatus  # the one kind of status row a policy gives today
from .task import RESOLVE, AdmissionPolicy, Decision, Fault

__all__ = ["AdmissionPolicy", "Decision", "Fault", "PolicySource", "PolicyStatus", "Sources", "Submission", "RESOLVE"]


@dataclass(frozen=True, slots=True)
class Submission:
    """How one submission's tasks are admitted: their ``policy``, the params their key hashes, their hard limit, and
    the params they carry to the worker (the policy's own settings need not travel)."""

    policy: AdmissionPolicy
    hashed_params: dict
    timeout_s: Optional[float] = None  # None: the reward's own or the producer's default
    task_params: Optional[dict] = None  # None: the params as submitted


class PolicySource(Protocol):
    """Made once per producer for a reward's declared ``admission`` path (called with no arguments)."""

    def submission(self, params: dict) -> Submission:
        """The policy for tasks with these params; a bad config is a ``ConfigError`` naming it."""
        ...

    def close(self) -> None:
        """The producer closes (after its dispatcher stopped)."""
        ...


class Sources:
    """The producer's policy sources, one per declared ``admission`` path, made on first use."""

    def __init__(self) -> None:
        self._sources: dict[str, PolicySource] = {}
        self._lock = threading.Lock()

    def submission(self, admission: Optional[str], params: dict) -> Optional[Submission]:
        """The ``Submission`` for a reward declaring ``admission`` ("module:attr"), or None when it declares none."""
        if admission is None:
            return None
        with self._lock:
            source = self._sources.get(admission)
            if source is None:
                source = self._sources[admission] = _load(admission)()
        return source.submission(params)

    def close(self) -> None:
        with self._lock:
            sources = list(self._sources.values())
        for source in sources:
            source.close()


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"admission policy {path!r} does not import: {exc}") from None
