"""Which code a cached score belongs to: the versions the workers report, and the keys they give.

A task's cache key hashes the reward's name, its params, the payload and the
reward's *version*: its declared ``version``, else the fingerprint of its code
(``registry.fingerprint``).  That version must be the one of the code that computes
the score, which runs in the workers, not in the producer: a producer can
import another copy of a module than its workers (another ``sys.path``, an
installed copy beside a working one), or none at all.  So:

* each worker reports the version of every reward it has loaded (in READY)
  and of the code that computed each result (``wire.TaskResult``'s ``ran``);
* the producer caches each result under the key of the version that computed
  it (``TaskIdentity.key_for``, only when it differs from the version the task
  was hashed with: no per-task hashing otherwise);
* the producer looks a task up in the cache only under a version a worker has
  reported (``RunVersions``).  Until one has (no worker has said READY yet, or
  the reward is a ``module:function`` name a worker loads on first use), the
  reward's tasks are not looked up: they are hashed with ``UNCONFIRMED`` (a
  key no result is ever cached under, used only to share in-flight tasks),
  computed, and cached under the version that ran them;
* a reward whose code has no fingerprint where it runs (and no declared
  version) is never cached; a warning says so once.

Thread-safe: versions are learnt on the dispatcher thread and read by the
submitting threads.
"""

from __future__ import annotations

import logging
import threading
from typing import Mapping, Optional

from .hashing import key_prefix, task_key

__all__ = ["RunVersions", "TaskIdentity", "UNCONFIRMED", "NO_FINGERPRINT"]

log = logging.getLogger("qworker")

# hashed for a reward whose version no worker has reported yet; NUL cannot be in a declared version and a code
# fingerprint has another form, so no result is ever cached under this key
UNCONFIRMED = "\0unconfirmed"
NO_FINGERPRINT = ""  # RunVersions' record of a reward whose workers could take no fingerprint (a version is never "")


class TaskIdentity:
    """What the tasks of one submission hash besides their payload (shared by all of them)."""

    __slots__ = ("reward", "params_fp", "version", "prefix")

    def __init__(self, reward: str, params_fp: bytes, version: Optional[str]) -> None:
        """``version``: the version a worker reported for ``reward``; None when none has (``UNCONFIRMED``)."""
        self.reward = reward
        self.params_fp = params_fp
        self.version = UNCONFIRMED if version is None else version
        self.prefix = key_prefix(reward, params_fp, self.version)

    @property
    def confirmed(self) -> bool:
        """Whether the key is one results are cached under (so a lookup can find the score)."""
        return self.version != UNCONFIRMED

    def key_for(self, ran: Optional[str], payload: bytes) -> bytes:
        """The key to cache a result under, computed by code of version ``ran``; ``b""`` (not cached) for None."""
        if ran is None:
            return b""
        return task_key(self.reward, self.params_fp, payload, ran)


class RunVersions:
    """The version of each reward's code as the workers report it (the last report wins)."""

    def __init__(self) -> None:
        self._ran: dict[str, str] = {}  # reward -> the version a worker reported (NO_FINGERPRINT: none could be taken)
        self._local: dict[str, Optional[str]] = {}  # reward -> the version of the producer's own copy (None: none here)
        self._changed: set[str] = set()  # rewards whose reported version changed (pools differ, or the code did)
        self._warned: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def for_lookup(self, reward: str, local: Optional[str]) -> Optional[str]:
        """The version to hash ``reward``'s tasks with, for a cache lookup: the one its workers reported;
        None when none has yet, or when they can take none.  ``local`` is the producer's own copy's (compared
        with the workers', with a warning when they run other code)."""
        if reward not in self._local:
            with self._lock:
                self._local[reward] = local
            self._check(reward)
        ran = self._ran.get(reward)
        return ran if ran else None

    def learn(self, reward: str, ran: Optional[str]) -> None:
        """A worker reported that its code of ``reward`` has version ``ran`` (None: it could take none)."""
        value = NO_FINGERPRINT if ran is None else ran
        before = self._ran.get(reward)
        if before == value:
            return
        with self._lock:
            self._ran[reward] = value
            if before is not None:
                self._changed.add(reward)
        if reward in self._local:  # a reward this producer submits (the others' reports are not its concern)
            self._check(reward)

    def learn_many(self, versions: Mapping[str, Optional[str]]) -> None:
        """A worker's READY: the version of every reward it has loaded."""
        ran = self._ran
        for reward, version in versions.items():
            if ran.get(reward) != (NO_FINGERPRINT if version is None else version):
                self.learn(reward, version)

    def _check(self, reward: str) -> None:
        """Warn (once per reward and kind) about what the reports say of a reward this producer submits."""
        local, ran = self._local.get(reward), self._ran.get(reward)
        if ran == NO_FINGERPRINT:
            self._warn(reward, "none", "qworker: reward %r has no code fingerprint where it runs (it is not Python "
                       "code with a source file); its results are not cached: declare @reward(..., version=...) to "
                       "cache them", reward)
        elif local is not None and ran is not None and local != ran:
            self._warn(reward, "local", "qworker: the producer's copy of reward %r is not the code its workers run (it "
                       "imports another copy of the module); cached scores follow the workers' code", reward)
        if reward in self._changed:
            self._warn(reward, "differ", "qworker: workers report different code for reward %r (pools running other "
                       "copies of it, or a worker restarted after its module changed); each result is cached under "
                       "the code that computed it", reward)

    def _warn(self, reward: str, what: str, message: str, *args: object) -> None:
        with self._lock:
            if (reward, what) in self._warned:
                return
            self._warned.add((reward, what))
        log.warning(message, *args)
