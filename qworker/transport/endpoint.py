"""The form of a ZeroMQ endpoint a user gives (``--connect``, ``--bind``, ``--listen``, ``Client(connect=)``).

``check_endpoint`` is called where the string enters, before anything starts, so a missing ``tcp://``, a port
out of range or an ``ipc://`` path too long for a Unix socket is one ``ConfigError`` naming the option, not a
``ZMQError`` traceback from a socket later on.
"""

from __future__ import annotations

import re
from typing import Optional

from .._exceptions import ConfigError

__all__ = ["check_endpoint", "reachable", "tcp_host_port", "oversize_ipc_path", "IPC_PATH_MAX"]

# libzmq's transports; qworker's own sockets use tcp, ipc and inproc, and the others are refused without CURVE
# or ``insecure`` where they are bound (``security.check_bind``), not here
SCHEMES = tuple(f"{name}://" for name in ("tcp", "ipc", "inproc", "pgm", "epgm", "tipc", "vmci", "udp", "ws", "wss", "norm"))
MAX_PORT = 65535
# a scheme written wrong: a slash or the colon missing, or in capitals (``tcp:/H:P``, ``tcp:H:P``, ``tcp//H:P``, ``TCP://H:P``)
_MISWRITTEN_SCHEME = re.compile(r"(?i)(tcp|ipc|inproc)(:/?/?|//?)(.*)", re.DOTALL)
IPC_PATH_MAX = 107  # bytes of an ipc:// path: a Unix socket address holds 108 with its NUL (libzmq's IPC_PATH_MAX_LEN)


def oversize_ipc_path(path: str) -> Optional[int]:
    """The size in bytes of ``path`` (an ``ipc://`` endpoint's, as the system encodes file names) when it is over the
    ``IPC_PATH_MAX`` a Unix socket's address holds; None when it fits."""
    size = len(path.encode("utf-8", "surrogateescape"))
    return size if size > IPC_PATH_MAX else None


ANY_INTERFACE = ("*", "0.0.0.0", "[::]")  # hosts of a bind to every interface: one binds to them, never connects


def tcp_host_port(endpoint: str) -> Optional[tuple[str, str]]:
    """``(HOST, PORT)`` of a ``tcp://HOST:PORT`` endpoint, as written: split at its last colon, so an IPv6 host keeps
    its brackets (``[::1]``); either may be empty, and PORT may be ``*`` or no number (``check_endpoint`` judges them).
    None for another transport."""
    if not endpoint.startswith("tcp://"):
        return None
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    return host, port


def _port(text: str) -> Optional[int]:
    """A port written in ASCII digits, as libzmq reads one (None for anything else: ``*``, other digits, a name)."""
    return int(text) if text.isascii() and text.isdigit() else None


def _what_to_write(endpoint: object) -> str:
    """The endpoint a user most likely meant by ``endpoint`` (which names no transport), or the form to write."""
    if isinstance(endpoint, str):
        miswritten = _MISWRITTEN_SCHEME.fullmatch(endpoint)
        if miswritten is not None:
            scheme, sep, rest = miswritten.groups()
            scheme = scheme.lower()
            rest = rest if scheme == "ipc" else rest.lstrip("/")  # a tcp host or an inproc name has no leading slash
            if scheme == "tcp":
                return _what_to_write(rest)  # what follows the scheme: a host and port, or a port alone
            if scheme == "inproc":
                return f"inproc://{rest or 'NAME'}"
            if not rest:
                return "tcp://HOST:PORT"
            return f"ipc:///{rest}" if sep == ":/" else f"ipc://{rest}"  # ``ipc:/tmp/s`` meant the absolute path /tmp/s
        host, colon, port = endpoint.rpartition(":")
        if colon and host and "/" not in host and (port == "*" or _port(port) is not None):
            return f"tcp://{endpoint}"  # a host and port
    alone = endpoint if type(endpoint) is int else _port(endpoint) if isinstance(endpoint, str) else None
    if alone is not None and 0 < alone <= MAX_PORT:
        return f"tcp://127.0.0.1:{alone}"  # a port alone: this host's
    return "tcp://HOST:PORT"


def check_endpoint(endpoint: object, *, what: str, connect: bool = False) -> str:
    """``endpoint`` when it names one of libzmq's transports (``tcp://HOST:PORT`` with PORT 0-65535 or ``*`` to
    bind any, ``ipc://PATH`` with PATH at most ``IPC_PATH_MAX`` bytes, ``inproc://NAME``, ...); else ``ConfigError``
    naming ``what`` (the option it came from) and what to write.  With ``connect``, an address to connect to: not
    ``*`` (any interface, or any port) nor port 0, which only a bind can take."""
    if not isinstance(endpoint, str) or not endpoint.startswith(SCHEMES):
        shown = endpoint if isinstance(endpoint, str) else type(endpoint).__name__
        hint = _what_to_write(endpoint)
        raise ConfigError(f"{what} {shown!r} is not a ZeroMQ endpoint: write {hint} (or ipc://PATH)")
    tcp = tcp_host_port(endpoint)
    if tcp is not None:
        host, port = tcp
        if host.startswith("/"):
            raise ConfigError(f"{what} {endpoint!r}: a tcp host has no leading slash: write tcp://{host.lstrip('/')}:{port}")
        if any(c.isspace() or not c.isprintable() for c in host):  # (libzmq: a traceback, "Invalid argument")
            example = f"tcp://{''.join(c for c in host if c.isprintable() and not c.isspace())}:{port}"
            try:  # shown only if it passes every check itself
                check_endpoint(example, what=what, connect=connect)
                example = f", e.g. {example}"
            except ConfigError:
                example = ""
            raise ConfigError(f"{what} {endpoint!r}: a tcp host has no spaces or control characters: write tcp://HOST:PORT "
                              f"with HOST a name or an address{example}")
        number = _port(port)
        if not host or not (port == "*" or (number is not None and number <= MAX_PORT)):
            raise ConfigError(f"{what} {endpoint!r}: expected tcp://HOST:PORT with a port from 0 to {MAX_PORT} (or * to bind any)")
        if connect and (host in ANY_INTERFACE or port == "*" or number == 0):
            raise ConfigError(f"{what} {endpoint!r} is an address to bind, not to connect to: write the producer's or "
                              "service's host and port, e.g. tcp://127.0.0.1:5555")
    if endpoint.startswith("ipc://"):
        size = oversize_ipc_path(endpoint[len("ipc://"):])
        if size is not None:
            raise ConfigError(f"{what} {endpoint!r}: the path is {size} bytes, over the {IPC_PATH_MAX} a Unix socket can hold; "
                              "use a shorter path (or tcp://127.0.0.1:PORT)")
    return endpoint


def reachable(bound: str) -> str:
    """A bound endpoint as a peer is told to connect to it: as it is, or, bound to every interface
    (``tcp://*:P``, ``tcp://0.0.0.0:P``), "port P of this host (tcp://0.0.0.0:P)"."""
    tcp = tcp_host_port(bound)
    if tcp is not None and tcp[0] in ANY_INTERFACE:
        return f"port {tcp[1]} of this host ({bound})"
    return bound
