"""Run untrusted code confined, never in the worker: the trusted side of the sandbox.

Each worker process starts one fork server (``_sandbox_child``, a Python
interpreter with an empty environment that never sees a task's data) on first
use.  Every run is a fresh fork of it that applies the boundary and the limits
before it reads the program, so a run costs a fork (about a millisecond) rather
than an interpreter start, and no process state of one run reaches the next.
The runs of one task share its directory (the program file, and what a run
writes there); tasks never share one.

The boundary (see ``_sandbox_child``): no capabilities; Landlock: the
interpreter's paths and shared libraries read-only, the run's own temporary
directory read-write, the rest of the filesystem (``/proc``, ``/tmp``, home,
the result cache, other runs' directories) denied, TCP denied; a seccomp
filter: no sockets of any family, no fork (threads allowed), no exec for Python
runs, signals only to itself, no ptrace or other processes' memory, no mounts,
namespaces, bpf, io_uring or keyrings.  The limits: ``RLIMIT_CPU``,
``RLIMIT_AS`` (memory), ``RLIMIT_FSIZE`` (stdout and stderr are files in the run's
directory, so output stops at the cap), ``RLIMIT_NOFILE``, ``RLIMIT_NPROC`` (when
not root, and only where seccomp does not already stop forks: unconfined runs
and the compiler), and a wall-clock limit after which the run's process group is killed
(and whatever escaped it, the fork server being a child subreaper).

It needs x86_64 Linux with Landlock (5.13+, ``landlock`` in the kernel's LSM
list) and seccomp; it works the same for a root and a non-root worker and needs
no privilege.  Where the kernel lacks them, ``code_tests`` refuses to run with
one line naming the fix, unless ``QWORKER_CODE_SANDBOX=unconfined`` is set in
the worker's environment: then runs get the limits and a fresh fork, but no
boundary.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import platform
import select
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Optional

__all__ = ["Limits", "Run", "SandboxUnavailable", "ENV", "boundary_problem", "kernel_problem", "sandbox_dir", "run_python", "run_exec"]

ENV = "QWORKER_CODE_SANDBOX"  # "unconfined": run code without the boundary where the kernel lacks it
_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_child.py")
_START_S = 30.0  # bound on the fork server's start and on each control reply
_KILL_GRACE_S = 10.0  # bound on the fork server confirming a killed run


class SandboxUnavailable(RuntimeError):
    """The kernel lacks what the boundary needs and the unconfined mode was not chosen."""


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
    results: bytes = b""  # what the child sent on its result pipe (asserts' probe values)

    @property
    def failure(self) -> Optional[str]:
        """Why the run failed, in words, or None when it exited 0."""
        if self.timed_out:
            return f"wall-clock timeout after {self.wall_s:.1f} s"
        if self.returncode == 0:
            return None
        if self.returncode is not None and self.returncode < 0:
            names: dict[int, str] = {signal.SIGXCPU: "CPU time limit", signal.SIGXFSZ: "output size limit", signal.SIGKILL: "killed"}
            try:
                name = names.get(-self.returncode) or signal.Signals(-self.returncode).name
            except ValueError:  # a real-time signal has no name: the program may send one to itself
                name = f"signal {-self.returncode}"
            return f"stopped: {name}"
        last = self.stderr.strip().splitlines()[-1:] or [f"exit code {self.returncode}"]
        return last[0][:300]


def boundary_problem(info: dict) -> Optional[str]:
    """One line naming what the kernel lacks for the boundary and the fix, or None when it has it all."""
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return (f"code_tests: the sandbox's syscall filter is written for x86_64 Linux, this is {sys.platform}/"
                f"{platform.machine()}; run the pool on x86_64 Linux, or set {ENV}=unconfined to run generated code without a boundary")
    if info.get("landlock_abi", 0) < 1:
        return ("code_tests: this kernel has no Landlock (needs Linux 5.13+ with 'landlock' in the lsm= boot parameter, "
                f"e.g. lsm=landlock,lockdown,yama,apparmor,bpf); enable it, or set {ENV}=unconfined to run generated code without a boundary")
    if not info.get("seccomp"):
        return f"code_tests: this kernel has no seccomp filter (CONFIG_SECCOMP_FILTER); enable it, or set {ENV}=unconfined to run generated code without a boundary"
    return None


@contextlib.contextmanager
def sandbox_dir():
    """A fresh temporary directory for one task's runs, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="qworker-code-") as path:
        yield path


def _site_packages() -> list[str]:
    """This interpreter's site-packages: importable by programs (read-only), without running their ``.pth`` files."""
    return [p for p in site.getsitepackages() if os.path.isdir(p)]


class _ForkServer:
    """This process's fork server and the control socket to it (one run at a time)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.owner = os.getpid()
        self.sock = ours
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", _CHILD, str(theirs.fileno()), *_site_packages()], pass_fds=[theirs.fileno()], env={},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.info = self.receive(_START_S)
        if not self.info.get("ready"):
            raise RuntimeError("code_tests: the sandbox's fork server did not start")

    def receive(self, timeout_s: float) -> dict:
        ready, _, _ = select.select([self.sock], [], [], timeout_s)
        if not ready:
            raise TimeoutError(f"code_tests: the sandbox's fork server did not answer within {timeout_s:.0f} s")
        data = self.sock.recv(1 << 16)
        if not data:
            raise EOFError("code_tests: the sandbox's fork server ended")
        return json.loads(data)

    def send(self, message: dict, fds: tuple[int, ...] = ()) -> None:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        self.sock.sendmsg([json.dumps(message).encode()], ancillary)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(timeout=_START_S)


_server: Optional[_ForkServer] = None
_server_lock = threading.Lock()


def _get_server() -> _ForkServer:
    global _server
    if _server is not None and (_server.owner != os.getpid() or _server.proc.poll() is not None):
        if _server.owner == os.getpid():
            _server.close()
        else:  # a forked copy of the owner: let go of its socket, so the owner's server still ends with the owner
            with contextlib.suppress(OSError):
                _server.sock.close()
        _server = None
    if _server is None:
        _server = _ForkServer()
    return _server


def _drop_server() -> None:
    global _server
    if _server is not None:
        _server.close()
        _server = None


def _isolate(requested: Optional[bool], info: dict) -> bool:
    problem = boundary_problem(info)
    if requested is not None:
        if requested and problem:
            raise SandboxUnavailable(problem)
        return requested
    if os.environ.get(ENV, "").strip().lower() == "unconfined":
        return False
    if problem is None:
        return True
    raise SandboxUnavailable(problem)


def kernel_problem() -> Optional[str]:
    """The one-line problem ``code_tests`` will refuse with on this host, probed in this process without starting a
    fork server (two system calls); None when the boundary is available or ``QWORKER_CODE_SANDBOX=unconfined``."""
    if os.environ.get(ENV, "").strip().lower() == "unconfined":
        return None
    from . import _sandbox_child  # ctypes only: loading it runs no program

    return boundary_problem({"landlock_abi": _sandbox_child.landlock_abi(), "seccomp": _sandbox_child.seccomp_available()})


def check() -> Optional[str]:
    """Start this process's fork server; the one-line problem when the boundary is unavailable and not opted out of."""
    with _server_lock:
        try:
            _isolate(None, _get_server().info)
        except SandboxUnavailable as e:
            return str(e)
    return None


def _read_file(path: str, cap: int) -> str:
    with open(path, "rb") as f:
        return f.read(cap).decode("utf-8", "replace")


def _run(workdir: str, *, mode: str, request: dict, stdin: str, limits: Limits, isolate: Optional[bool]) -> Run:
    paths = {name: os.path.join(workdir, f".{name}") for name in ("stdin", "stdout", "stderr")}
    with open(paths["stdin"], "w", encoding="utf-8") as f:
        f.write(stdin)
    with _server_lock:
        server = _get_server()
        header = {"op": "run", "mode": mode, "workdir": os.path.abspath(workdir), "isolate": _isolate(isolate, server.info),
                  "limits": {f.name: getattr(limits, f.name) for f in fields(Limits)}}
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        t0 = time.monotonic()
        try:
            pending = json.dumps(request).encode()  # into the pipe now: the child reads it without a round trip
            os.set_blocking(req_w, False)
            with contextlib.suppress(BlockingIOError):
                pending = pending[os.write(req_w, pending):]
            if not pending:
                os.close(req_w)
                req_w = -1
            with open(paths["stdin"], "rb") as fin, open(paths["stdout"], "wb") as fout, open(paths["stderr"], "wb") as ferr:
                try:
                    server.send(header, (fin.fileno(), fout.fileno(), ferr.fileno(), req_r, res_w))
                except OSError:
                    _drop_server()
                    raise
            os.close(req_r)
            os.close(res_w)
            req_r = res_w = -1
            owned_by_wait, req_w, res_r = (req_w, res_r), -1, -1  # _wait closes them, whatever happens
            returncode, timed_out, results = _wait(server, *owned_by_wait, pending, limits, t0)
        finally:
            for fd in (req_r, req_w, res_r, res_w):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
    cap = limits.output_bytes
    return Run(returncode=returncode, stdout=_read_file(paths["stdout"], cap), stderr=_read_file(paths["stderr"], cap),
               timed_out=timed_out, wall_s=time.monotonic() - t0, results=results)


def _wait(server: _ForkServer, req_w: int, res_r: int, request: bytes, limits: Limits, t0: float) -> tuple[Optional[int], bool, bytes]:
    """Feed the request, collect results, until the fork server reports the run's status (kill it at the wall limit)."""
    results = bytearray()
    status: Optional[int] = None
    timed_out = killed = False
    deadline = t0 + limits.wall_s
    res_open = True
    try:
        while status is None or res_open:
            now = time.monotonic()
            if status is None and not killed and now >= deadline:
                timed_out = killed = True
                server.send({"op": "kill"})
                deadline = now + _KILL_GRACE_S
            elif now >= deadline:
                if status is None:  # the server did not confirm the kill: replace it
                    _drop_server()
                    return None, True, bytes(results)
                break  # status known; results still open only if something holds the pipe: stop reading
            readers: list[Any] = [server.sock] if status is None else []
            if res_open:
                readers.append(res_r)
            writers = [req_w] if req_w >= 0 and request else []
            ready_r, ready_w, _ = select.select(readers, writers, [], max(0.0, deadline - now))
            if req_w in ready_w:
                try:
                    request = request[os.write(req_w, request[: 1 << 16]):]
                except BlockingIOError:
                    pass
                except BrokenPipeError:  # the child ended before reading it all
                    request = b""
                if not request:
                    os.close(req_w)
                    req_w = -1
            if res_r in ready_r:
                chunk = os.read(res_r, 1 << 16)
                if not chunk:
                    res_open = False
                elif len(results) + len(chunk) > limits.output_bytes:
                    res_open = False
                    if status is None and not killed:
                        killed = True
                        server.send({"op": "kill"})
                        deadline = time.monotonic() + _KILL_GRACE_S
                else:
                    results += chunk
            if server.sock in ready_r:
                try:
                    message = server.receive(_START_S)
                except (OSError, TimeoutError, EOFError, ValueError):
                    _drop_server()
                    return None, timed_out, bytes(results)
                if "status" not in message:
                    continue
                status = message["status"]
                if timed_out:
                    break
    finally:
        for fd in (req_w, res_r):
            if fd >= 0:
                os.close(fd)
    returncode = None if timed_out or status is None else os.waitstatus_to_exitcode(status)
    return returncode, timed_out, bytes(results)


def run_python(workdir: str, *, stdin: str = "", limits: Limits, probes: Optional[list[str]] = None,
               isolate: Optional[bool] = None) -> Run:
    """Run ``workdir/solution.py`` as ``__main__`` with ``stdin``, confined; waits at most ``limits.wall_s``.

    With ``probes`` (expressions), each is evaluated after the program and its
    value sent back as plain data in ``Run.results`` (see ``_asserts``).
    ``isolate``: None applies the boundary (or the unconfined mode chosen by
    ``QWORKER_CODE_SANDBOX``, or raises ``SandboxUnavailable``); False runs
    with the limits only (benchmarks).
    """
    return _run(workdir, mode="python", request={"probes": probes}, stdin=stdin, limits=limits, isolate=isolate)


def run_exec(workdir: str, argv: list[str], *, stdin: str = "", limits: Limits, compile_step: bool = False,
             env: Optional[dict[str, str]] = None, isolate: Optional[bool] = None) -> Run:
    """Run a program (``argv[0]`` an absolute path) confined to ``workdir``, with ``env`` (default: empty).

    ``compile_step``: a compiler from ``/usr/bin``, which may fork and exec its own passes and read
    the system headers; otherwise a binary in ``workdir``, which may not fork or exec anything else.
    """
    return _run(workdir, mode="compile" if compile_step else "exec", request={"argv": argv, "env": env or {}},
                stdin=stdin, limits=limits, isolate=isolate)

