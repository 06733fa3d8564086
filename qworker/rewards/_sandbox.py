"""Run untrusted Python in a child process with limits, never in the worker.

Each run gets a fresh temporary directory as its working directory, an empty
environment (no secrets: the worker's API keys are not inherited), Python's
isolated mode (``-I``: no ``PYTHON*`` variables, no user site), and rlimits set
in the child before ``exec``:

* ``RLIMIT_CPU``: CPU seconds (the kernel kills the process past it);
* ``RLIMIT_AS``: address space, so a 10 GB allocation raises ``MemoryError``;
* ``RLIMIT_FSIZE``: bytes per file written; stdout and stderr are files in the
  temporary directory, so endless output stops at the cap (``SIGXFSZ``);
* ``RLIMIT_NOFILE``; and ``RLIMIT_NPROC`` (forks) when not running as root,
  where the kernel ignores it.

A wall-clock timeout covers sleeping and blocking.  The child leads a new
session; when it ends or times out, its process group is killed, and so are
processes that left the group (``setsid``): the worker is made a child
subreaper (Linux), so they become its children and are killed and reaped.

This is resource isolation for rewards, not a security boundary: code runs
with the worker's user.  Run pools that execute untrusted code as an
unprivileged user, in a container.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Optional

__all__ = ["Limits", "Run", "sandbox_dir", "run_python"]

_PR_SET_CHILD_SUBREAPER = 36
_subreaper = False


@dataclass(frozen=True, slots=True)
class Limits:
    wall_s: float = 5.0
    cpu_s: int = 5
    memory_mb: int = 1024
    output_bytes: int = 1 << 20
    max_procs: int = 32
    open_files: int = 64


@dataclass(frozen=True, slots=True)
class Run:
    returncode: Optional[int]  # negative: killed by that signal
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float

    @property
    def failure(self) -> Optional[str]:
        """Why the run failed, in words, or None when it exited 0."""
        if self.timed_out:
            return f"wall-clock timeout after {self.wall_s:.1f} s"
        if self.returncode == 0:
            return None
        if self.returncode is not None and self.returncode < 0:
            names: dict[int, str] = {signal.SIGXCPU: "CPU time limit", signal.SIGXFSZ: "output size limit", signal.SIGKILL: "killed"}
            name = names.get(
                -self.returncode, signal.Signals(-self.returncode).name
            )
            return f"stopped: {name}"
        last = self.stderr.strip().splitlines()[-1:] or [f"exit code {self.returncode}"]
        return last[0][:300]


def _become_subreaper() -> None:
    global _subreaper
    if _subreaper or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _subreaper = True


def _limit(limits: Limits):  # runs in the child between fork and exec: no locks, no allocation-heavy work
    def apply() -> None:
        mem = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_bytes, limits.output_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if os.geteuid() != 0:
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_procs, limits.max_procs))

    return apply


@contextlib.contextmanager
def sandbox_dir():
    """A fresh temporary directory, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="qworker-code-") as path:
        yield path


def _children() -> set[int]:
    try:
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
            return {int(p) for p in f.read().split()}
    except OSError:
        return set()


def _sweep(before: set[int]) -> None:
    """Kill and reap children that appeared during the run (escaped grandchildren).

    Killing one reparents its own children to us, so sweep again until a pass
    finds none (bounded: a process can fork only so fast once its parent is gone).
    """
    for _ in range(64):
        new = _children() - before
        if not new:
            return
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in new:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _read(path: str, cap: int) -> str:
    with open(path, "rb") as f:
        return f.read(cap).decode("utf-8", "replace")


def run_python(workdir: str, script: str, *, stdin: str = "", limits: Limits, args: tuple[str, ...] = ()) -> Run:
    """Run ``workdir/script`` with ``stdin``; waits at most ``limits.wall_s``."""
    _become_subreaper()
    before = _children()
    paths = {name: os.path.join(workdir, f".{name}") for name in ("stdin", "stdout", "stderr")}
    with open(paths["stdin"], "w", encoding="utf-8") as f:
        f.write(stdin)
    t0 = time.monotonic()
    timed_out = False
    with open(paths["stdin"], "rb") as fin, open(paths["stdout"], "wb") as fout, open(paths["stderr"], "wb") as ferr:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", script, *args], cwd=workdir, env={}, stdin=fin, stdout=fout, stderr=ferr,
            start_new_session=True, preexec_fn=_limit(limits), close_fds=True,
        )
        try:
            proc.wait(timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the child and whatever it forked in its group
            proc.wait()
            _sweep(before)
    cap = limits.output_bytes
    return Run(
        returncode=None if timed_out else proc.returncode, stdout=_read(paths["stdout"], cap), stderr=_read(paths["stderr"], cap),
        timed_out=timed_out, wall_s=time.monotonic() - t0,
    )
