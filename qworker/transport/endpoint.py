"""The form of a ZeroMQ endpoint a user gives (``--connect``, ``--bind``, ``--listen``, ``Client(connect=)``).

``check_endpoint`` is called where the string enters, before anything starts, so a missing ``tcp://`` or a port
out of range is one ``ConfigError`` naming the option, not a ``ZMQError`` traceback from a socket later on.
"""

from __future__ import annotations

from .._exceptions import ConfigError

__all__ = ["check_endpoint"]

# libzmq's transports; qworker's own sockets use tcp, ipc and inproc, and the others are refused without CURVE
# or ``insecure`` where they are bound (``security.check_bind``), not here
SCHEMES = tuple(f"{name}://" for name in ("tcp", "ipc", "inproc", "pgm", "epgm", "tipc", "vmci", "udp", "ws", "wss", "norm"))
MAX_PORT = 65535


def check_endpoint(endpoint: object, *, what: str) -> str:
    """``endpoint`` when it names one of libzmq's transports (``tcp://HOST:PORT`` with PORT 0-65535 or ``*`` to
    bind any, ``ipc://PATH``, ``inproc://NAME``, ...); else ``ConfigError`` naming ``what`` (the option it came
    from) and what to write."""
    if not isinstance(endpoint, str) or not endpoint.startswith(SCHEMES):
        shown = endpoint if isinstance(endpoint, str) else type(endpoint).__name__
        hint = f"tcp://{endpoint}" if isinstance(endpoint, str) and "://" not in endpoint and ":" in endpoint else "tcp://HOST:PORT"
        raise ConfigError(f"{what} {shown!r} is not a ZeroMQ endpoint: write {hint} (or ipc://PATH)")
    if endpoint.startswith("tcp://"):
        host, _, port = endpoint[len("tcp://"):].rpartition(":")
        if not host or not (port == "*" or (port.isdigit() and int(port) <= MAX_PORT)):
            raise ConfigError(f"{what} {endpoint!r}: expected tcp://HOST:PORT with a port from 0 to {MAX_PORT} (or * to bind any)")
    return endpoint
