"""Adversarial programs against ``code_tests``: each must score 0 and leak nothing.

``ATTEMPTS`` is data (the README's table is generated from it by
``python bench/sandbox.py --table``).  Each attempt runs in a real worker process
(``code_worker.CodeWorker``) that holds a secret in its environment, beside a
canary file and a live victim process of the worker's user, with TCP, UDP, Unix
and abstract-socket listeners open.  A ``score`` attempt is judged by the
add-function asserts; a ``leak`` attempt by stdin/stdout where the expected
output is what the program would print if the attack worked (the secret, the
canary's text, or ``PWNED``), so a leak would score 1.0.  After each attempt:
score 0, the secret and the canary's text appear nowhere in the result, the
canary is unchanged, no file was planted, the listeners received nothing and
the victim and the worker are alive.  Run as the worker's user and, when that
is root, again as an unprivileged user.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Optional

import psutil
import pytest

from qworker.rewards import _sandbox
from tests.contract.rewards.code_worker import SECRET_NAME, CodeWorker, UserCannotRun, as_user_prefix

ADD_TESTS = {"asserts": ["assert add(2, 3) == 5", "assert add(1, 1) == 2", "assert add(0, 0) == 0"]}
NOBODY = 65534


@dataclass(frozen=True)
class Attempt:
    name: str
    kind: str  # "score": tries to pass the asserts without adding; "leak": tries to read, reach or disturb
    what: str  # one line for the README's table
    code: str  # placeholders: @PID@ (worker), @VICTIM@, @CANARY@, @TOKEN@, @PORT@, @UDP_PORT@, @UNIX@, @ABSTRACT@, @CHILD@
    expect: str = "PWNED"  # leak attempts: the output that would prove the attack; "@SECRET@"/"@CANARY_TEXT@" substituted
    timeout_s: float = 2


_FIND_SECRET = f"""
def _secret(data):
    for kv in data.split(b'\\0'):
        if kv.startswith(b'{SECRET_NAME}='):
            return kv.split(b'=', 1)[1].decode()
"""

ATTEMPTS: list[Attempt] = [
    # --- forging the verdict ---
    Attempt("forge-results-file", "score", "forge the old harness's results file with the nonce from argv, then exit",
            "import sys, os\nopen('.results', 'a').write(''.join(f'{sys.argv[1]} {i}\\n' for i in range(int(sys.argv[2]))))\nos._exit(0)\n"),
    Attempt("print-fake-records", "score", "print pass records for every assert on stdout and stderr, then exit 0",
            "import sys, os\nfor i in range(3):\n    print(f'ok {i}'); print(f'assert {i}: passed', file=sys.stderr)\nos._exit(0)\n"),
    Attempt("forge-result-pipe", "score", "write 'loaded' and a True value for every probe to every open fd, then exit",
            "import os\nmsg = b'[\"loaded\"]\\n' + b''.join(b'[\"value\", %d, [\"b\", true]]\\n' % i for i in range(3))\n"
            "for fd in range(3, 64):\n    try: os.write(fd, msg)\n    except OSError: pass\nos._exit(0)\n"),
    Attempt("forge-right-values-then-hang", "score", "write the right values on the result pipe, then never finish",
            "import os\nmsg = b'[\"loaded\"]\\n' + b''.join(b'[\"value\", %d, [\"i\", \"%s\"]]\\n' % (i, v) "
            "for i, v in enumerate([b'0x5', b'0x2', b'0x0']))\nfor fd in range(3, 64):\n    try: os.write(fd, msg)\n"
            "    except OSError: pass\nwhile True: pass\n", timeout_s=1),
    Attempt("forge-right-values-then-crash", "score", "write the right values on the result pipe, then exit 3",
            "import os\nmsg = b'[\"loaded\"]\\n' + b''.join(b'[\"value\", %d, [\"i\", \"%s\"]]\\n' % (i, v) "
            "for i, v in enumerate([b'0x5', b'0x2', b'0x0']))\nfor fd in range(3, 64):\n    try: os.write(fd, msg)\n"
            "    except OSError: pass\nos._exit(3)\n"),
    Attempt("patch-encoder", "score", "patch the child's value encoder (found through frames) to claim every value is True",
            "import sys\ndef add(a, b):\n    return None\nf = sys._getframe()\nwhile f is not None:\n"
            "    if 'encode' in f.f_globals:\n        f.f_globals['encode'] = lambda v, d=0: ['b', True]\n    f = f.f_back\n"),
    # --- dunder and type tricks ---
    Attempt("always-equal", "score", "return an object whose `__eq__` is always True",
            "class E:\n    def __eq__(self, o): return True\n    __hash__ = object.__hash__\ndef add(a, b):\n    return E()\n"),
    Attempt("int-subclass-eq", "score", "return an `int` subclass whose `__eq__` is always True",
            "class I(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\ndef add(a, b):\n    return I(7)\n"),
    Attempt("str-subclass-eq", "score", "return a `str` subclass whose `__eq__` is always True",
            "class S(str):\n    def __eq__(self, o): return True\n    __hash__ = str.__hash__\ndef add(a, b):\n    return S('x')\n"),
    Attempt("bool-dunder", "score", "`__eq__` returns an object whose `__bool__` is True",
            "class T:\n    def __bool__(self): return True\nclass E:\n    def __eq__(self, o): return T()\n    __ne__ = __eq__\n"
            "def add(a, b):\n    return E()\n"),
    Attempt("reflected-eq", "score", "an `int` subclass that wins the reflected comparison (`__eq__`, `__ne__` on the right)",
            "class R(int):\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n    __hash__ = int.__hash__\n"
            "def add(a, b):\n    return R(-1)\n"),
    Attempt("list-subclass", "score", "a `list` subclass whose `__eq__` is always True",
            "class L(list):\n    def __eq__(self, o): return True\ndef add(a, b):\n    return L()\n"),
    # --- early exits ---
    Attempt("sys-exit-0", "score", "`sys.exit(0)` before defining anything", "import sys\nsys.exit(0)\ndef add(a, b): return None\n"),
    Attempt("os-exit-0", "score", "`os._exit(0)` before the asserts", "import os\nos._exit(0)\n"),
    Attempt("raise-systemexit", "score", "raise `SystemExit` from inside the function under test",
            "def add(a, b):\n    raise SystemExit(0)\n"),
    Attempt("kill-self", "score", "SIGKILL itself", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
    Attempt("abort", "score", "`os.abort()` (SIGABRT)", "import os\nos.abort()\n"),
    Attempt("atexit-forge", "score", "register an `atexit` handler that prints pass records and exits 0",
            "import atexit, os\natexit.register(lambda: (print('ok 0\\nok 1\\nok 2'), os._exit(0)))\ndef add(a, b): return None\n"),
    # --- patching the harness ---
    Attempt("patch-builtins", "score", "replace `builtins` `eval`, `exec`, `compile` and `AssertionError`",
            "import builtins\nbuiltins.eval = lambda *a, **k: True\nbuiltins.exec = lambda *a, **k: None\n"
            "builtins.compile = lambda *a, **k: compile('True', 'x', 'eval')\nbuiltins.AssertionError = type('X', (Exception,), {})\n"),
    Attempt("patch-sys-modules", "score", "replace `json` in `sys.modules` with a fake that reports success",
            "import sys, types\nfake = types.ModuleType('json')\nfake.dumps = lambda *a, **k: '[\"value\", 0, [\"b\", true]]'\n"
            "fake.loads = lambda *a, **k: {}\nsys.modules['json'] = fake\ndef add(a, b): return None\n"),
    Attempt("plant-conftest", "score", "write a `conftest.py` and `sitecustomize.py`",
            "open('conftest.py', 'w').write('import pytest\\n')\nopen('sitecustomize.py', 'w').write('print(1)\\n')\n"
            "def add(a, b): return None\n"),
    Attempt("answers-from-memory", "score", "search `gc` objects for the asserts' expected values",
            "import gc, re, sys\nhits = {}\nfor o in gc.get_objects():\n    for s in (o if isinstance(o, (list, tuple)) else [o]):\n"
            "        if isinstance(s, str):\n            for m in re.finditer(r'add\\((\\d+), (\\d+)\\) == (\\d+)', s):\n"
            "                hits[(int(m[1]), int(m[2]))] = int(m[3])\n"
            "def add(a, b):\n    return hits.get((a, b))\n"),
    Attempt("answers-from-disk", "score", "search the working directory and /tmp for the test snippets",
            "import os, re\nhits = {}\nfor d in ('.', '/tmp', os.path.expanduser('~')):\n    try: names = os.listdir(d)\n    except OSError: continue\n"
            "    for n in names:\n        try: text = open(os.path.join(d, n)).read()\n        except OSError: continue\n"
            "        for m in re.finditer(r'add\\((\\d+), (\\d+)\\) == (\\d+)', text):\n            hits[(int(m[1]), int(m[2]))] = int(m[3])\n"
            "def add(a, b):\n    return hits.get((a, b))\n"),
    Attempt("slow-probe", "score", "sleep past the wall limit inside the function under test",
            "import time\ndef add(a, b):\n    time.sleep(30)\n    return a + b + 1\n", timeout_s=1),
    # --- reading secrets and other tasks' data ---
    Attempt("env-var", "leak", "read the worker's API key from the environment",
            f"import os\nprint(os.environ.get('{SECRET_NAME}', ''))\n", expect="@SECRET@"),
    Attempt("proc-ppid-environ", "leak", "read `/proc/<ppid>/environ` and its parent's",
            _FIND_SECRET + "import os\npid = os.getppid()\nfor _ in range(3):\n    try:\n"
            "        s = _secret(open(f'/proc/{pid}/environ', 'rb').read())\n        if s: print(s); break\n"
            "        pid = int(open(f'/proc/{pid}/stat').read().split(')')[1].split()[1])\n    except OSError: break\n",
            expect="@SECRET@"),
    Attempt("proc-worker-environ", "leak", "read the worker's `/proc/<pid>/environ` by its pid",
            _FIND_SECRET + "print(_secret(open('/proc/@PID@/environ', 'rb').read()))\n", expect="@SECRET@"),
    Attempt("proc-scan-environ", "leak", "scan every `/proc/*/environ` for the key",
            _FIND_SECRET + "import os\nfor p in os.listdir('/proc'):\n    try: s = _secret(open(f'/proc/{p}/environ', 'rb').read())\n"
            "    except OSError: continue\n    if s: print(s); break\n", expect="@SECRET@"),
    Attempt("proc-worker-mem", "leak", "read the worker's memory through `/proc/<pid>/mem`",
            f"import re\nfound = ''\nfor line in open('/proc/@PID@/maps'):\n    lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
            f"    try:\n        with open('/proc/@PID@/mem', 'rb') as m:\n            m.seek(lo); data = m.read(min(hi - lo, 1 << 24))\n"
            f"    except OSError: continue\n    hit = re.search(rb'{SECRET_NAME}=([^\\0]+)', data)\n"
            f"    if hit: found = hit[1].decode(); break\nprint(found)\n", expect="@SECRET@"),
    Attempt("process-vm-readv", "leak", "read the worker's memory with `process_vm_readv`",
            "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = ctypes.create_string_buffer(16)\n"
            "class IOV(ctypes.Structure): _fields_ = [('b', ctypes.c_void_p), ('n', ctypes.c_size_t)]\n"
            "local = IOV(ctypes.cast(buf, ctypes.c_void_p), 16)\nok = False\n"
            "for addr in (0x400000, 0x555555554000):\n    remote = IOV(addr, 16)\n"
            "    ok = ok or libc.process_vm_readv(@PID@, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) > 0\n"
            "print('PWNED' if ok else '')\n"),
    Attempt("worker-fds", "leak", "open the worker's fds (the cache's SQLite) through `/proc/<pid>/fd`",
            "import os\nfds = os.listdir('/proc/@PID@/fd')\nfor fd in fds:\n    try: open(f'/proc/@PID@/fd/{fd}', 'rb').close()\n"
            "    except OSError: pass\nprint('PWNED' if fds else '')\n"),
    Attempt("read-canary", "leak", "read another task's file (a canary outside the run's directory)",
            "print(open('@CANARY@').read())\n", expect="@CANARY_TEXT@"),
    Attempt("write-canary", "leak", "append to another task's file (a cache entry could be planted so)",
            "open('@CANARY@', 'a').write('planted')\nprint('PWNED')\n"),
    Attempt("plant-tmp", "leak", "create files in `/tmp`, `/var/tmp`, `/dev/shm` for a later run",
            "ok = False\nfor d in ('/tmp', '/var/tmp', '/dev/shm'):\n    try: open(f'{d}/@TOKEN@', 'w').write('x'); ok = True\n"
            "    except OSError: pass\nprint('PWNED' if ok else '')\n"),
    Attempt("other-runs", "leak", "list other runs' directories under `/tmp`",
            "import glob, os\nmine = os.getcwd()\nprint('PWNED' if [p for p in glob.glob('/tmp/*') if p != mine] else '')\n"),
    Attempt("patch-sandbox-code", "leak", "open the sandbox's own code for writing (to change later runs)",
            "open('@CHILD@', 'a').close()\nprint('PWNED')\n"),
    Attempt("subprocess-cat", "leak", "run `/bin/cat` on the canary through `subprocess`",
            "import subprocess\nprint(subprocess.run(['/bin/cat', '@CANARY@'], capture_output=True, text=True).stdout)\n",
            expect="@CANARY_TEXT@"),
    Attempt("execve-shell", "leak", "replace itself with `/bin/sh`", "import os\nos.execv('/bin/sh', ['sh', '-c', 'echo PWNED'])\n"),
    # --- network ---
    Attempt("tcp-connect", "leak", "TCP connect to a listener on 127.0.0.1 (a serve port, a local judge)",
            "import socket\nsocket.create_connection(('127.0.0.1', @PORT@), timeout=1)\nprint('PWNED')\n"),
    Attempt("udp-send", "leak", "send a UDP datagram to a listener on 127.0.0.1",
            "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'@TOKEN@', ('127.0.0.1', @UDP_PORT@))\nprint('PWNED')\n"),
    Attempt("unix-connect", "leak", "connect to a Unix socket by path (the producer's ipc socket)",
            "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('@UNIX@')\nprint('PWNED')\n"),
    Attempt("abstract-connect", "leak", "connect to an abstract Unix socket",
            "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0@ABSTRACT@')\nprint('PWNED')\n"),
    Attempt("raw-syscall-socket", "leak", "`socket()` and `connect()` through `ctypes`",
            "import ctypes, struct\nlibc = ctypes.CDLL(None)\nfd = libc.socket(2, 1, 0)\n"
            "addr = struct.pack('<H', 2) + struct.pack('>H', @PORT@) + bytes([127, 0, 0, 1]) + bytes(8)\n"
            "print('PWNED' if fd >= 0 and libc.connect(fd, addr, 16) == 0 else '')\n"),
    # --- other processes ---
    Attempt("kill-victim", "leak", "SIGKILL another process of the worker's user",
            "import os, signal\nos.kill(@VICTIM@, signal.SIGKILL)\nprint('PWNED')\n"),
    Attempt("stop-parent", "leak", "SIGSTOP its parent (the fork server; before, the worker)",
            "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nprint('PWNED')\n"),
    Attempt("stop-worker", "leak", "SIGSTOP the worker by its pid (the pool would lose it)",
            "import os, signal\nos.kill(@PID@, signal.SIGSTOP)\nprint('PWNED')\n"),
    Attempt("signal-group-and-all", "leak", "signal every process it may (`kill -1`) and the parent's group",
            "import os, signal\nok = False\nfor target in (-1, -os.getpgid(os.getppid())):\n"
            "    try: os.kill(target, 0); ok = True\n    except OSError: pass\nprint('PWNED' if ok else '')\n"),
    Attempt("ptrace-victim", "leak", "ptrace-attach to another process of the worker's user",
            "import ctypes\nlibc = ctypes.CDLL(None)\nprint('PWNED' if libc.ptrace(16, @VICTIM@, 0, 0) == 0 else '')\n"),
    Attempt("unshare-namespaces", "leak", "enter new user and network namespaces (to get capabilities back)",
            "import ctypes\nlibc = ctypes.CDLL(None)\nprint('PWNED' if libc.unshare(0x10000000 | 0x40000000) == 0 else '')\n"),
    Attempt("io-uring", "leak", "set up an `io_uring` (its operations bypass per-syscall filters)",
            "import ctypes\nlibc = ctypes.CDLL(None)\nparams = ctypes.create_string_buffer(120)\n"
            "print('PWNED' if libc.syscall(425, 8, params) >= 0 else '')\n"),
    Attempt("raise-limits", "leak", "raise its own CPU, memory and file-size limits",
            "import resource\nok = False\nfor r in (resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_FSIZE):\n"
            "    try: resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)); ok = True\n"
            "    except (ValueError, OSError): pass\nprint('PWNED' if ok else '')\n"),
    Attempt("inherited-fds", "leak", "look for fds inherited from the worker (sockets, the cache)",
            "import os\ndef ok(fd):\n    try: os.fstat(fd); return True\n    except OSError: return False\n"
            "print('PWNED' if [fd for fd in range(5, 1024) if ok(fd)] else '')\n"),
    # --- resources ---
    Attempt("fork-bomb", "leak", "an unbounded fork bomb (`RLIMIT_NPROC` does not bind root)",
            "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n", timeout_s=1),
    Attempt("thread-bomb", "leak", "start threads without end (threads are allowed; memory bounds them)",
            "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(100,)).start()\n", timeout_s=1),
    Attempt("giant-output", "leak", "write output without end", "import sys\nwhile True:\n    sys.stdout.write('PWNED' * 20000)\n"),
    Attempt("sleep-past-wall", "leak", "print the proof only after the wall limit", "import time\ntime.sleep(30)\nprint('PWNED')\n",
            timeout_s=1),
]


def _fill(text: str, env: dict[str, str]) -> str:
    for key, value in env.items():
        text = text.replace(f"@{key}@", value)
    return text


@pytest.fixture(scope="module", params=["worker", "unprivileged"])
def rig(request, tmp_path_factory):
    """A worker with a secret, a canary, a victim and listeners, as this process's user or as uid 65534."""
    as_user: Optional[int] = None
    if request.param == "unprivileged":
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            pytest.skip("the unprivileged run needs root (to drop to uid 65534) and setpriv")
        as_user = NOBODY
    boundary = _sandbox.check()
    if boundary is not None:
        pytest.skip(boundary)
    base = tempfile.mkdtemp(prefix="qw-adversarial-")
    os.chmod(base, 0o755)
    tmp = os.path.join(base, "tmp")
    os.mkdir(tmp)
    os.chmod(tmp, 0o1777)  # the worker's TMPDIR, so its sandboxes are found (and are ours)
    canary = os.path.join(base, "cache.sqlite")
    canary_text = f"canary-{secrets.token_hex(8)}"
    with open(canary, "w") as f:
        f.write(canary_text)
    os.chmod(canary, 0o666)
    secret = f"sk-qw-{secrets.token_hex(16)}"
    prefix = as_user_prefix(as_user) if as_user is not None else []
    victim = subprocess.Popen([*prefix, "sleep", "600"])
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix_path = os.path.join(base, "ipc.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    os.chmod(unix_path, 0o777)
    unix.listen()
    abstract_name = f"qw-adversarial-{secrets.token_hex(6)}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + abstract_name)
    abstract.listen()
    for s in (tcp, udp, unix, abstract):
        s.setblocking(False)
    try:
        worker = CodeWorker(secret=secret, env={"TMPDIR": tmp}, as_user=as_user)
    except UserCannotRun as e:
        victim.kill()
        victim.wait()
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(str(e))
    env = {"PID": str(worker.pid), "VICTIM": str(victim.pid), "CANARY": canary, "TOKEN": f"qw-planted-{secrets.token_hex(6)}",
           "PORT": str(tcp.getsockname()[1]), "UDP_PORT": str(udp.getsockname()[1]), "UNIX": unix_path,
           "ABSTRACT": abstract_name, "CHILD": os.path.join(os.path.dirname(_sandbox.__file__), "_sandbox_child.py")}
    yield {"worker": worker, "env": env, "secret": secret, "canary": canary, "canary_text": canary_text, "victim": victim,
           "listeners": (tcp, udp, unix, abstract), "tmp": tmp}
    worker.close()
    victim.kill()
    victim.wait()
    for s in (tcp, udp, unix, abstract):
        s.close()
    shutil.rmtree(base, ignore_errors=True)


def _received_nothing(listeners) -> bool:
    tcp, udp, unix, abstract = listeners
    for s in (tcp, unix, abstract):
        try:
            s.accept()[0].close()
            return False
        except BlockingIOError:
            pass
    try:
        udp.recv(100)
        return False
    except BlockingIOError:
        return True


def _sandboxes_left(root: str) -> list[int]:
    out = []
    for p in psutil.process_iter():
        try:
            if p.cwd().startswith(root):
                out.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return out


def test_the_attempts_cover_the_kinds_the_suite_promises():
    assert len(ATTEMPTS) >= 30
    assert len({a.name for a in ATTEMPTS}) == len(ATTEMPTS)
    assert {a.kind for a in ATTEMPTS} == {"score", "leak"}


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=[a.name for a in ATTEMPTS])
def test_an_adversarial_program_scores_zero_and_leaks_nothing(rig, attempt: Attempt):
    env = rig["env"]
    code = _fill(attempt.code, env)
    if attempt.kind == "score":
        tests: object = ADD_TESTS
    else:
        expect = attempt.expect.replace("@SECRET@", rig["secret"]).replace("@CANARY_TEXT@", rig["canary_text"])
        tests = {"inputs": [""], "outputs": [_fill(expect, env)]}
    out = rig["worker"].score(code, tests, timeout_s=attempt.timeout_s, cpu_s=2)
    assert "error" not in out, out
    assert out["score"] == 0.0 and out["passed"] == 0, out
    text = json.dumps(out)
    assert rig["secret"] not in text and rig["canary_text"] not in text
    with open(rig["canary"]) as f:
        assert f.read() == rig["canary_text"]
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        assert not os.path.exists(os.path.join(d, env["TOKEN"]))
    assert _received_nothing(rig["listeners"])
    assert rig["victim"].poll() is None
    assert psutil.Process(rig["worker"].pid).status() != psutil.STATUS_STOPPED
    assert _sandboxes_left(rig["tmp"]) == []
