"""The one place qworker creates ZeroMQ sockets.

Options are set before bind/connect.  The default endpoint is an ``ipc://`` path
in a private directory; binding beyond loopback needs CURVE or an explicit
``insecure`` (``security``).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import tempfile
import time
from typing import Optional

import zmq

from .._exceptions import ConfigError
from . import security
from .allowlist import POLLIN, GuardedRouter
from .endpoint import IPC_PATH_MAX, oversize_ipc_path
from .security import Curve

log = logging.getLogger("qworker")

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # the frame size cap (``max_message_bytes``'s default), bytes


def runtime_dir() -> str:
    """A per-user directory (mode 0700) for ipc sockets and the producer registry."""
    base = os.environ.get("QWORKER_RUNTIME_DIR") or os.path.join(
        os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir(), f"qworker-{os.getuid()}"
    )
    os.makedirs(base, mode=0o700, exist_ok=True)
    return base


def new_ipc_endpoint() -> str:
    """A fresh ``ipc://`` endpoint that no other process uses; ``ConfigError`` when the runtime directory's path is
    too long for a Unix socket's (``endpoint.oversize_ipc_path``), naming the variable that sets it."""
    base = runtime_dir()
    path = f"{base}/p{os.getpid()}-{secrets.token_hex(4)}.sock"
    size = oversize_ipc_path(path)
    if size is not None:
        source = next((name for name in ("QWORKER_RUNTIME_DIR", "XDG_RUNTIME_DIR", "TMPDIR") if os.environ.get(name)),
                      "the temporary directory")
        raise ConfigError(f"qworker's runtime directory {base} (from {source}) makes socket paths of {size} bytes, over the "
                          f"{IPC_PATH_MAX} a Unix socket can hold; set QWORKER_RUNTIME_DIR to a shorter directory")
    return f"ipc://{path}"


CURVE_FRAME_BYTES = 33  # bytes CURVE's MESSAGE command adds to each frame on the wire; MAXMSGSIZE counts them, so a
# sender fitting a frame to its peer's ``max_message_bytes`` leaves this much room (measured with libzmq over CURVE:
# at a limit of 1000, a 967-byte frame passes and a 968-byte one is dropped with the link)


def make_socket(
    ctx: zmq.Context,
    kind: int,
    *,
    bind: Optional[str] = None,
    connect: Optional[str] = None,
    identity: Optional[bytes] = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    linger_ms: int = 0,
    curve: Optional[Curve] = None,
    insecure: bool = False,
    reconnect_max_ms: int = 5000,
    on_link: Optional[security.LinkCallback] = None,
) -> zmq.Socket:
    """Create a socket of ``kind`` and bind or connect it.

    ``max_message_bytes`` becomes ``MAXMSGSIZE``: a peer sending a larger message
    is disconnected by libzmq before the message reaches Python.  ``curve``
    authenticates and encrypts (``security``); binding beyond loopback without it
    raises ``ConfigError`` unless ``insecure``.  An IPv6 address is written in brackets (``tcp://[::1]:5557``).  A
    connecting socket retries a lost
    connection after 100 ms, backing off to ``reconnect_max_ms``; ``on_link`` is told, from a thread of its own,
    when a peer takes its connection (True) and when that link drops (False) (``security.watch_link``, which also
    logs a CURVE client's failed handshakes).  A socket bound with CURVE needs ``security.release(ctx)`` before its
    context terminates.
    """
    if (bind is None) == (connect is None):
        raise ValueError("give exactly one of bind= or connect=")
    if kind == zmq.ROUTER and isinstance(curve, security.CurveServer):
        sock: zmq.Socket = ctx.socket(kind, socket_class=GuardedRouter)  # stops serving keys revoked while it runs
    else:
        sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, linger_ms)
    sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.SNDHWM, 0)  # credit bounds what is queued, not the HWM
    if identity is not None:
        sock.setsockopt(zmq.ROUTING_ID, identity)
    if kind == zmq.ROUTER:
        # An unroutable send raises EHOSTUNREACH instead of vanishing.
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    if (bind or connect or "").startswith("tcp://["):  # an IPv6 address (tcp://[::1]:P): libzmq takes one only with IPV6 set
        sock.setsockopt(zmq.IPV6, 1)
    try:
        if connect is not None:
            sock.setsockopt(zmq.RECONNECT_IVL, 100)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, reconnect_max_ms)
            security.secure(ctx, sock, curve, connect)
            security.watch_link(sock, connect, curve, on_link)
            sock.connect(connect)
        else:
            assert bind is not None
            security.check_bind(bind, curve, insecure=insecure)
            security.secure(ctx, sock, curve, bind)
            _bind(sock, bind)
    except BaseException:
        sock.close(linger=0)
        raise
    return sock


_BIND_HINTS = {
    errno.EADDRINUSE: "another process holds it (another qworker? 'qworker status --connect {endpoint}' asks it); pick another port",
    errno.EADDRNOTAVAIL: "no interface of this host has that address; bind one of its own (or 0.0.0.0 / * for all)",
}


def bind_refusal(endpoint: str, code: int, text: Optional[str] = None) -> str:
    """The line that says why ``endpoint`` cannot be bound: the error number ``code`` (``errno``), described by ``text``
    (default: the system's words for it) and, for the usual ones, what to do."""
    hint = _BIND_HINTS.get(code)
    reach = re.sub(r"^tcp://(\*|0\.0\.0\.0):", "tcp://127.0.0.1:", endpoint)  # one can bind to all, not connect to all
    return f"cannot bind {endpoint}: {text or zmq.strerror(code)}" + (": " + hint.format(endpoint=reach) if hint else "")


def _bind(sock: zmq.Socket, endpoint: str) -> None:
    """``sock.bind(endpoint)``; a failure the user can fix (a port in use, an address of another host, a name that does
    not resolve, no permission) is a ``ConfigError`` naming the endpoint (``bind_refusal``), not a ``ZMQError``."""
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as exc:
        raise ConfigError(bind_refusal(endpoint, exc.errno or 0)) from None


REDIAL_EVERY_S = 5.0  # a connecting socket with no connection is re-dialled at most this often


class Redialer:
    """Re-dials a connecting socket that libzmq has given up on.

    libzmq retries a connection that fails or drops, but not one whose handshake the
    server refused (a CURVE key not, or not yet, in its allow-list): that connection's
    session ends for good, and non-blocking sends raise ``zmq.Again``.  Call
    ``no_peer()`` on each such send; every ``REDIAL_EVERY_S`` it disconnects and
    connects again, so a key added to the server's allow-list is taken up without a
    restart.  While the server is merely down, sends queue and this is not called.
    """

    def __init__(self, sock: zmq.Socket, endpoint: str) -> None:
        self.sock = sock
        self.endpoint = endpoint
        self.last = time.monotonic()

    def no_peer(self) -> None:
        now = time.monotonic()
        if now - self.last < REDIAL_EVERY_S:
            return
        self.last = now
        try:
            self.sock.disconnect(self.endpoint)
        except zmq.ZMQError:
            pass  # nothing left to disconnect
        self.sock.connect(self.endpoint)
        log.debug("qworker: no connection to %s; dialled again", self.endpoint)


def readable(sock: zmq.Socket) -> bool:
    """Whether a message is waiting (``ZMQ_EVENTS``: cheaper than a poll, though libzmq may read its command pipe).

    On a CURVE server's ROUTER, messages from peers whose key was revoked are dropped here."""
    if isinstance(sock, GuardedRouter):
        return sock.poll_allowed()
    return bool(int(sock.getsockopt(zmq.EVENTS)) & POLLIN)


def bound_endpoint(sock: zmq.Socket) -> str:
    """The endpoint a socket actually bound (resolves ``tcp://127.0.0.1:0``)."""
    ep = sock.getsockopt(zmq.LAST_ENDPOINT)
    return ep.decode() if isinstance(ep, bytes) else str(ep)


class WakePipe:
    """A self-pipe that wakes a thread polling sockets: other threads ``wake()`` it; the
    polling thread registers ``fd`` with its poller and ``drain()``\\s it after each poll.

    Writes never block: a full pipe means the thread is awake anyway.
    """

    def __init__(self) -> None:
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write_fd, False)

    def wake(self) -> None:
        try:
            os.write(self._write_fd, b"x")
        except (BlockingIOError, OSError):
            pass  # full (the thread is awake anyway), or closed (it has stopped)

    def drain(self) -> None:
        try:
            while os.read(self.fd, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)
        os.close(self._write_fd)


def bind_server(bind: str, *, max_message_bytes: int, curve: Optional[Curve], insecure: bool) -> tuple[zmq.Context, zmq.Socket]:
    """A ROUTER bound to ``bind`` in a context of its own (CURVE set up when given).

    For the producer's dispatcher and a reward service, which own their socket from start
    to close; a failed bind leaves nothing behind.  Close both with ``close_server``.
    """
    ctx: zmq.Context = zmq.Context(io_threads=1)
    try:
        sock = make_socket(ctx, zmq.ROUTER, bind=bind, max_message_bytes=max_message_bytes, curve=curve, insecure=insecure)
    except BaseException:
        security.release(ctx)
        ctx.term()
        raise
    return ctx, sock


def close_server(ctx: zmq.Context, sock: zmq.Socket, *, linger_ms: int = 0) -> None:
    """Close a socket from ``bind_server``, its CURVE authenticator and its context; ``linger_ms``: how long
    messages still queued may take to leave."""
    sock.close(linger=linger_ms)
    security.release(ctx)
    ctx.term()
