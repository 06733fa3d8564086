"""The inside of the code sandbox: a fork server, the boundary, and the program runner.

Run as a script (``python -I -S -B _sandbox_child.py FD [SITE_PACKAGES...]``)
with an empty environment and the control socket on fd ``FD``; it imports nothing from qworker, so nothing of
the worker is in its memory.  It never reads a task's data itself: per run it
forks a child, and only the child reads the program and its probes, after it
has applied the boundary.  Each run is a fresh fork, so no process state of a
run reaches the next one (the runs of one task share its directory).

Per run the child: leads a new session; gets the run's stdin, stdout and stderr
files as fds 0-2, the request pipe as fd 3, the result pipe as fd 4, and no other
fd; sets the rlimits; then, unless told to run unconfined:

* drops every capability and locks root's privileges out (a root worker's child
  keeps uid 0 but no capability, so it cannot override file permissions, kill,
  trace, mount or regain them through exec);
* sets ``no_new_privs`` and applies a Landlock ruleset: the interpreter's own
  paths and the shared libraries read-only, the run's directory read-write,
  everything else (``/proc``, ``/tmp``, home, the cache) denied; TCP bind and
  connect denied (ABI >= 4); abstract Unix sockets and signals scoped to the
  run (ABI >= 6);
* installs a seccomp filter: no ``socket`` (TCP, UDP, Unix, abstract, raw,
  netlink), no ``fork``/``vfork``/non-thread ``clone`` (threads stay allowed: a
  fork bomb stops at its first fork, as root too), no ``execve`` (Python runs),
  ``kill``/``tgkill`` only to itself, no ``ptrace``, ``process_vm_*``,
  ``pidfd_*``, ``mount``, namespaces, ``bpf``, ``perf_event_open``,
  ``io_uring``, keyrings, module loading.

Messages on the control socket are JSON (with fds as ``SCM_RIGHTS``); the
parent side is ``_sandbox.ForkServer``.
"""

from __future__ import annotations

import array
import builtins
import ctypes
import fcntl
import gc
import json
import os
import platform
import resource
import select
import signal
import socket
import struct
import sys
import traceback
import types
from typing import Any

REQUEST_FD = 3  # in the child
RESULT_FD = 4  # in the child

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int

# x86_64 syscall numbers (Landlock's are the same on every architecture).
_NR = {
    "socket": 41, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "kill": 62,
    "ptrace": 101, "syslog": 103, "rt_sigqueueinfo": 129, "personality": 135, "pivot_root": 155,
    "chroot": 161, "acct": 163, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169,
    "init_module": 175, "delete_module": 176, "quotactl": 179, "tkill": 200, "tgkill": 234,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "rt_tgsigqueueinfo": 297, "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "execveat": 322, "userfaultfd": 323,
    "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_open": 434, "clone3": 435, "pidfd_getfd": 438, "mount_setattr": 442,
}
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_SYS_CAPSET = 126
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _PR_GET_SECCOMP = 38, 22, 21
_PR_SET_SECUREBITS, _PR_CAP_AMBIENT, _PR_SET_CHILD_SUBREAPER = 28, 47, 36
_SECBITS_LOCKED_NOROOT = 0x2F  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED and their locks
_AUDIT_ARCH_X86_64 = 0xC000003E
_CLONE_THREAD = 0x00010000
_EPERM, _ENOSYS = 1, 38

# Landlock access rights, by the ABI that introduced them.
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_FS_WORKDIR = (_FS_WRITE_FILE | _FS_READ_FILE | _FS_READ_DIR | 1 << 4 | 1 << 5 | 1 << 7 | 1 << 8 | 1 << 14)
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is absent or disabled."""
    abi = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(abi), 0)


def seccomp_available() -> bool:
    return platform.machine() == "x86_64" and _libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) >= 0


def _check(rc: int, what: str) -> None:
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _drop_privileges() -> None:
    """Drop every capability; for uid 0, also lock out regaining them (securebits)."""
    if os.geteuid() == 0:  # (the bounding set can stay: no_new_privs and NOROOT leave exec nothing to grant)
        _check(_libc.prctl(_PR_SET_SECUREBITS, _SECBITS_LOCKED_NOROOT, 0, 0, 0), "securebits")
    _libc.prctl(_PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.syscall(_SYS_CAPSET, header, data), "capset")


def _landlock(abi: int, readable: list[str], workdir: str, executable: list[str]) -> None:
    fs_rights = _FS_RIGHTS_BY_ABI[max(k for k in _FS_RIGHTS_BY_ABI if k <= abi)]
    attr = _RulesetAttr(fs_rights, _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
                        _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    _check(ruleset, "landlock_create_ruleset")
    try:
        rules = [(p, _FS_READ_FILE | _FS_READ_DIR) for p in readable]
        rules += [(p, _FS_READ_FILE | _FS_READ_DIR | _FS_EXECUTE) for p in executable]
        rules.append(("/dev/null", _FS_READ_FILE | _FS_WRITE_FILE))
        rules.append((workdir, _FS_WORKDIR | (_FS_EXECUTE if executable else 0)))
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(path):
                    rights &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | 1 << 14
                rule = _PathBeneath(rights & fs_rights, fd)
                _check(_libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0), f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        _check(_libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return (code, jt, jf, k & 0xFFFFFFFF)


_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000


def _errno(e: int) -> int:
    return 0x00050000 | e


def _pack(prog: list[tuple[int, int, int, int]]) -> bytes:
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def _only(nr: int, arg: int, values: list[int]) -> list[tuple[int, int, int, int]]:
    """A block: syscall ``nr`` is allowed only when argument ``arg`` is one of ``values`` (else EPERM)."""
    body = [_bpf(_LD, 16 + 8 * arg)]
    body += [_bpf(_JEQ, v, len(values) - i, 0) for i, v in enumerate(values)]
    body += [_bpf(_RET, _errno(_EPERM)), _bpf(_RET, _ALLOW)]
    return [_bpf(_LD, 0), _bpf(_JEQ, nr, 0, len(body))] + body


_STATIC_FILTERS: dict[tuple[bool, bool], tuple[bytes, bytes]] = {}


def _static_filter(allow_fork: bool, allow_exec: bool) -> tuple[bytes, bytes]:
    """The filter's parts that do not depend on the process: its head and its tail (packed; cached)."""
    key = (allow_fork, allow_exec)
    if key not in _STATIC_FILTERS:
        head = [_bpf(_LD, 4), _bpf(_JEQ, _AUDIT_ARCH_X86_64, 1, 0), _bpf(_RET, _KILL),
                _bpf(_LD, 0), _bpf(_JGE, 0x40000000, 0, 1), _bpf(_RET, _errno(_EPERM))]  # no x32 syscalls
        denied = [n for name, n in _NR.items() if name not in (
            "socketpair", "clone", "kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "clone3",
            "fork", "vfork", "execve", "execveat", "personality")]
        if not allow_fork:
            denied += [_NR["fork"], _NR["vfork"]]
        if not allow_exec:
            denied += [_NR["execve"], _NR["execveat"]]
        for nr in denied:
            head += [_bpf(_LD, 0), _bpf(_JEQ, nr, 0, 1), _bpf(_RET, _errno(_EPERM))]
        tail = _only(_NR["socketpair"], 0, [socket.AF_UNIX])
        if not allow_fork:
            clone = [_bpf(_LD, 16), _bpf(_JSET, _CLONE_THREAD, 1, 0), _bpf(_RET, _errno(_EPERM)), _bpf(_RET, _ALLOW)]
            tail += [_bpf(_LD, 0), _bpf(_JEQ, _NR["clone"], 0, len(clone))] + clone
        tail += [_bpf(_LD, 0), _bpf(_JEQ, _NR["clone3"], 0, 1), _bpf(_RET, _errno(_ENOSYS))]  # libc falls back to clone
        tail.append(_bpf(_RET, _ALLOW))
        _STATIC_FILTERS[key] = (_pack(head), _pack(tail))
    return _STATIC_FILTERS[key]


def _seccomp(*, allow_fork: bool, allow_exec: bool) -> None:
    """Install the filter (see the module's docstring); signals are allowed only to this process."""
    me = os.getpid()
    signals = _only(_NR["kill"], 0, [me, 0, -me])
    for name in ("tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        signals += _only(_NR[name], 0, [me])
    head, tail = _static_filter(allow_fork, allow_exec)
    program = head + _pack(signals) + tail
    packed = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(packed, ctypes.POINTER(_SockFilter)))
    _check(_libc.prctl(_PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0), "seccomp")


def _readable_paths() -> list[str]:
    """What the interpreter needs to read: its import path and the shared libraries."""
    paths = [p for p in sys.path if p and os.path.exists(p)]
    paths += ["/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib", "/etc/ld.so.cache",
              "/dev/null", "/dev/urandom", "/dev/zero"]
    return [p for p in dict.fromkeys(paths) if os.path.exists(p)]


_READABLE: list[str] = []  # filled once by the fork server before it forks


def apply_boundary(workdir: str, *, mode: str) -> None:
    """Confine this process (see the module's docstring).

    ``mode``: ``python`` (no exec at all), ``exec`` (a binary in the run's directory; it may not fork),
    ``compile`` (a compiler from ``/usr/bin``; it may fork and exec its passes, and read the headers).
    """
    _drop_privileges()
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    abi = landlock_abi()
    readable = list(_READABLE or _readable_paths())
    loader = ["/usr/lib", "/usr/lib64", "/lib", "/lib64"]  # the dynamic loader and shared libraries of a binary
    executable = {"python": [], "exec": loader, "compile": loader + ["/usr/bin", "/bin", "/usr/libexec"]}[mode]
    if mode == "compile":
        readable += ["/usr/include", "/usr/local/include"]
    _landlock(abi, [p for p in readable if os.path.exists(p)], workdir, [p for p in executable if os.path.exists(p)])
    _seccomp(allow_fork=mode == "compile", allow_exec=mode != "python")


def _limits(limits: dict, *, count_processes: bool) -> None:
    mem = limits["memory_mb"] * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["output_bytes"], limits["output_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"], limits["open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if count_processes and os.geteuid() != 0:  # counts every process of the user; seccomp stops forks otherwise
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_procs"], limits["max_procs"]))


def encode(value: Any, depth: int = 0) -> list:
    """``value`` as tagged JSON data (see ``_asserts.decode``), when it is built of builtin values.

    A subclass of a builtin (``Counter``, ``OrderedDict``, a namedtuple, an ``int`` subclass)
    is sent as its builtin value, read with the builtin's own methods: its Python-level methods
    (``__eq__``, ``__iter__``, ``__str__``, ...) do not run, and what the worker compares is a
    plain value.  A numpy scalar is sent as its ``item()``.  Other objects are refused.  (This runs in the sandbox: the worker trusts none
    of it, and decodes strictly.)
    """
    if depth > 64:
        raise ValueError("value nested too deeply")
    t = type(value)
    if value is None:
        return ["n"]
    if t is bool:
        return ["b", value]
    if issubclass(t, int):
        return ["i", hex(int.__int__(value))]
    if issubclass(t, float):
        return ["f", float.hex(float.__float__(value))]
    if issubclass(t, complex):
        return ["c", float.hex(complex.real.__get__(value)), float.hex(complex.imag.__get__(value))]
    if issubclass(t, str):
        return ["s", str.__str__(value)]
    if issubclass(t, bytes):
        return ["y", bytes.hex(value)]
    if issubclass(t, dict):
        return ["d", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]]
    for base, tag in ((list, "l"), (tuple, "t"), (set, "set"), (frozenset, "fs")):
        if issubclass(t, base):
            return [tag, [encode(item, depth + 1) for item in base.__iter__(value)]]
    if t.__module__ == "numpy" and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return encode(value.item(), depth + 1)  # a numpy scalar (np.int64, np.float64, np.bool_) as its Python value
    raise TypeError(f"returned a {t.__name__}: only builtin values (numbers, str, bytes, None, containers) are compared")


def _send(message: list) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(RESULT_FD, data):]


def _exit_status(e: SystemExit) -> int:
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finish(status: int) -> None:
    if "threading" in sys.modules:
        try:
            sys.modules["threading"]._shutdown()
        except BaseException:  # noqa: BLE001 - the program's threads may raise anything
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            status = status or 1
    os._exit(status)


def run_program(request: dict) -> None:
    """Run ``solution.py`` as ``__main__``; with ``probes``, then evaluate each and send its value."""
    probes = request.get("probes")
    main = types.ModuleType("__main__")
    main.__dict__.update({"__file__": "solution.py", "__builtins__": builtins})
    sys.modules["__main__"] = main
    sys.argv = ["solution.py"]
    try:
        with open("solution.py", encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, "solution.py", "exec"), main.__dict__)  # noqa: S102 - the point; confined
    except SystemExit as e:
        _finish(_exit_status(e))
    except BaseException as e:  # noqa: BLE001
        if probes is None:
            traceback.print_exc()
        else:
            print(f"program: {type(e).__name__}: {e}", file=sys.stderr)
        _finish(1)
    if probes is None:
        _finish(0)
        return
    _send(["loaded"])
    for i, probe in enumerate(probes):
        try:
            message = ["value", i, encode(eval(compile(probe, f"assert{i}", "eval"), main.__dict__))]  # noqa: S307
        except BaseException as e:  # noqa: BLE001
            message = ["raised", i, f"{type(e).__name__}: {e}"[:300]]
        _send(message)
    _finish(0)


def _place_fds(fds: list[int]) -> None:
    """Make ``fds`` the child's 0..n-1 and close every other fd."""
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]  # above every target: no dup2 clobbers a source
    for target, fd in enumerate(moved):
        os.dup2(fd, target, inheritable=True)
    os.closerange(len(fds), 1 << 16)


def child_main(header: dict, fds: list[int]) -> None:
    """In the forked child: place fds, set limits, confine, read the request, run."""
    try:
        os.setsid()
        _place_fds(fds)
        os.chdir(header["workdir"])
        mode = header["mode"]
        _limits(header["limits"], count_processes=not header["isolate"] or mode == "compile")
        if header["isolate"]:
            apply_boundary(header["workdir"], mode=mode)
        chunks = []
        while chunk := os.read(REQUEST_FD, 1 << 16):
            chunks.append(chunk)
        os.close(REQUEST_FD)
        request = json.loads(b"".join(chunks) or b"{}")
    except BaseException as e:  # noqa: BLE001 - report and end, never return into the server's loop
        try:
            os.write(2, f"sandbox: {type(e).__name__}: {e}\n".encode())
        finally:
            os._exit(125)
    try:
        if mode == "python":
            run_program(request)
        else:
            os.execve(request["argv"][0], request["argv"], request.get("env") or {})
    except BaseException as e:  # noqa: BLE001
        try:
            os.write(2, f"{type(e).__name__}: {e}\n".encode())
        finally:
            os._exit(126)
    os._exit(0)


def _children() -> set[int]:
    try:
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
            return {int(p) for p in f.read().split()}
    except OSError:
        return set()


def _sweep() -> None:
    """Kill and reap whatever is left of a run (escaped descendants reparented to us)."""
    for _ in range(64):
        left = _children()
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in left:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _recv(sock: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    msg, ancdata, _flags, _addr = sock.recvmsg(1 << 16, socket.CMSG_LEN(16 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    if not msg:
        raise EOFError
    return json.loads(msg), list(fds)


def _send_ctrl(sock: socket.socket, message: dict) -> None:
    sock.sendall(json.dumps(message).encode())


def serve(sock: socket.socket) -> None:
    """Fork one child per ``run`` request and report its wait status; a ``kill`` request meanwhile kills its group."""
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _READABLE.extend(_readable_paths())
    for fork_ok, exec_ok in ((False, False), (False, True), (True, True)):
        _static_filter(fork_ok, exec_ok)
    exec(compile("import sys\nx = [i for i in range(3)]\n", "warm-up", "exec"), {})  # the compiler's first use costs ~2 ms
    gc.collect()
    gc.freeze()  # the server's own objects: a child's collections never touch (and copy) their pages
    _send_ctrl(sock, {"ready": True, "landlock_abi": landlock_abi(), "seccomp": seccomp_available(),
                      "uid": os.geteuid()})
    while True:
        try:
            header, fds = _recv(sock)
        except EOFError:
            return
        if header.get("op") != "run":
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            sock.close()
            child_main(header, fds)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        status = None
        while status is None:
            waiting: list[Any] = [sock, pidfd]
            ready, _, _ = select.select(waiting, [], [])
            if sock in ready:
                try:
                    op, extra = _recv(sock)
                except EOFError:
                    os.killpg(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    _sweep()
                    return
                for fd in extra:
                    os.close(fd)
                if op.get("op") == "kill":
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        os.kill(pid, signal.SIGKILL)
            if pidfd in ready:
                _, status = os.waitpid(pid, 0)
        os.close(pidfd)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _sweep()
        _send_ctrl(sock, {"status": status})


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path.extend(sys.argv[2:])  # site-packages, given by the worker (started with -S: no .pth file runs here)
    import _sitebuiltins  # what -S leaves out and programs use: exit() and quit()

    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    serve(socket.socket(fileno=int(sys.argv[1])))
