"""The unit tier's purity guard: what a pure test may not do, and how a violation is reported.

A pure test starts no process (``subprocess.Popen``, ``os.fork``/``posix_spawn``, a
``multiprocessing`` process) and opens no network socket (``socket.socket`` ``connect``/``bind``,
a ``zmq`` socket).  :func:`forbid_impure_calls` replaces those entry points, for the duration of one
test, with ones that call ``on_violation(what)`` first; the unit tier's conftest passes a function
that fails the test with a message naming the call.  Sockets from ``socket.socketpair`` (an asyncio
event loop's self-pipe) are allowed: they reach no network.  So are calls made on a thread that was
already running when the guard was installed (a thread an earlier, non-unit test left in this process,
such as a closed producer's metrics poller): they are not the guarded test's doing.
"""

from __future__ import annotations

import multiprocessing.process
import os
import socket
import subprocess
import threading
from collections.abc import Callable
from typing import Any

import pytest

OnViolation = Callable[[str], None]


def forbid_impure_calls(monkeypatch: pytest.MonkeyPatch, on_violation: OnViolation) -> None:
    """Route every process start and network socket made by the calling thread, or by a thread started after
    this call, through ``on_violation`` until ``monkeypatch`` undoes it."""
    here = threading.current_thread()
    earlier = {t for t in threading.enumerate() if t is not here}

    def wrap(owner: Any, name: str, what: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() not in earlier:
                on_violation(what)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, guarded)

    wrap(subprocess.Popen, "__init__", "subprocess.Popen (a child process)")
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        wrap(os, name, f"os.{name} (a child process)")
    wrap(multiprocessing.process.BaseProcess, "start", "multiprocessing Process.start (a child process)")
    for name in ("connect", "connect_ex", "bind"):
        wrap(socket.socket, name, f"socket.{name} (a network socket)")
    try:
        import zmq
    except ImportError:  # pragma: no cover - zmq is a dependency
        return
    wrap(zmq.Context, "socket", "zmq.Context.socket (a ZeroMQ socket)")
