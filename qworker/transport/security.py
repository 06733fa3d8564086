"""Authentication and encryption across hosts: ZeroMQ CURVE, and the rule for binding beyond loopback.

Keys are files made by ``qworker keys DIR --name NAME`` (``NAME.key`` public,
``NAME.key_secret`` secret; pyzmq's certificate format).  The binding side (a
producer, a reward service) holds a secret key and a directory of the public
keys it admits; the connecting side (a pool, its workers, a client) holds its
own secret key and the server's public key.  Only file *paths* travel in
options and argv; keys are read from the files when a socket is made, and no
key is ever logged.

A peer with an unknown key is refused by the ZAP handler and logged with its
address; a peer with no key (or a raw TCP client) fails the CURVE handshake and
is logged by a socket monitor (libzmq does not report its address there).
Nothing such a peer sends reaches the producer.

The allowed-keys directory is reread when it changes (checked every second;
``reload_all`` rereads at once), and a key removed from it stops being served
on connections already open (``allowlist``).

Binding a non-loopback address without CURVE is refused unless the caller says
``insecure`` explicitly.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Union

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

from .._exceptions import ConfigError
from .allowlist import RELOAD_EVERY_S, AllowList, GuardedRouter, reload_all
from .endpoint import check_endpoint, tcp_host_port

log = logging.getLogger("qworker")

__all__ = ["CurveServer", "CurveClient", "Curve", "create_keys", "handshake_problem", "check_bind", "is_loopback", "secure", "release", "reload_all"]


@dataclass(frozen=True)
class CurveServer:
    """The binding side: its secret key file and the directory of admitted public keys."""

    secret_key_file: str
    allowed_dir: str


@dataclass(frozen=True)
class CurveClient:
    """The connecting side: its secret key file and the server's public key file."""

    secret_key_file: str
    server_key_file: str


Curve = Union[CurveServer, CurveClient]


def create_keys(directory: str, name: str, *, force: bool = False) -> tuple[str, str]:
    """Write a new key pair; returns (public key file, secret key file).  The secret one is mode 0600.

    An existing pair of that name is a ``ConfigError`` unless ``force``: replacing it locks out every
    peer that holds the old public key.  So is a ``directory`` that cannot be made or written (one line naming it)."""
    existing = [p for p in (os.path.join(directory, f"{name}.key"), os.path.join(directory, f"{name}.key_secret")) if os.path.exists(p)]
    if existing and not force:
        raise ConfigError(f"{existing[0]} exists: a new key pair would lock out every peer holding the old public key; "
                          "pass --force to replace it, or another --name")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        public, secret = zmq.auth.create_certificates(directory, name)
        os.chmod(secret, 0o600)
    except OSError as exc:  # a file where the directory should be, no permission, a full disk
        raise ConfigError(f"cannot write a key pair in {directory}: {exc.strerror or exc}") from None
    return public, secret


def _load(path: str, *, secret: bool) -> tuple[bytes, Optional[bytes]]:
    """The (public, secret) keys of a key file ``qworker keys`` wrote (secret None in a public one); a ``ConfigError``
    naming the file and what is wrong for one that is missing or unreadable, holds no key, holds a damaged key (one a
    socket would refuse), or holds no secret key where ``secret`` asks for one."""
    try:
        os.stat(path)  # (pyzmq's own check reads a file it may not search for as missing)
        public_key, secret_key = zmq.auth.load_certificate(path)
    except FileNotFoundError:
        raise ConfigError(f"cannot read CURVE key file {path}: no such file") from None
    except (ValueError, IndexError):  # no public-key line; a key line without its '=' (pyzmq splits on it)
        raise ConfigError(f"cannot read CURVE key file {path}: it holds no key line as 'qworker keys' writes them") from None
    except OSError as exc:
        raise ConfigError(f"cannot read CURVE key file {path}: {exc.strerror or exc}") from None
    if not all(_is_key(k) for k in (public_key, secret_key) if k is not None):
        raise ConfigError(f"{path} holds a damaged key (a key is 40 Z85 characters): copy the file again, or make a new pair "
                          "with 'qworker keys'")
    if secret and secret_key is None:
        raise ConfigError(f"{path} holds no secret key: pass the NAME.key_secret file that 'qworker keys' wrote")
    return public_key, secret_key


def _is_key(key: bytes) -> bool:
    """Whether ``key`` is a CURVE key in Z85, as a socket takes one (40 characters for 32 bytes)."""
    try:
        return len(key) == 40 and len(z85.decode(key)) == 32
    except (ValueError, TypeError, KeyError, UnicodeError):
        return False


LOCAL_SCHEMES = ("ipc://", "inproc://")  # local by construction: a path on this host, or this process


def is_loopback(endpoint: str) -> bool:
    """True for ``ipc://`` and ``inproc://`` endpoints and TCP on 127.0.0.0/8, localhost or ::1.

    Every other transport (``tipc://``, ``pgm://``, ``epgm://``, ``vmci://``, ``udp://``, ...) reaches
    beyond this host, or may: it needs CURVE or ``insecure`` like a non-loopback TCP address.
    """
    if endpoint.startswith(LOCAL_SCHEMES):
        return True
    tcp = tcp_host_port(endpoint)
    if tcp is None:
        return False
    host = tcp[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback  # 127.0.0.0/8 and ::1; not a name like 127.example.com
    except ValueError:
        return False  # "*", an interface name, or a host name: it may reach beyond this host


def _addresses(host: str) -> list[str]:
    """The addresses ``host`` (a name) resolves to on this host, as ``getaddrinfo`` gives them; [] when it does not."""
    try:
        return [str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]
    except (OSError, UnicodeError):
        return []


def _loopback_name(host: str) -> Optional[str]:
    """For a ``tcp://`` endpoint's ``host`` that is a name (not ``localhost``) resolving only to loopback addresses
    on this host (``vm`` in ``/etc/hosts`` as 127.0.0.1, Debian's 127.0.1.1 for the host's own name): the first of
    them; else None.  Such a name is not taken as loopback (``is_loopback``): this only names what it is."""
    if host in ("*", "localhost") or host.startswith("["):
        return None
    try:
        ipaddress.ip_address(host)
        return None  # an address, not a name
    except ValueError:
        pass
    found = _addresses(host)
    return found[0] if found and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in found) else None


def check_bind(endpoint: str, curve: Optional[Curve], *, insecure: bool) -> None:
    """Refuse an endpoint that is not one (``check_endpoint``), and binding beyond loopback without CURVE
    unless ``insecure``; a host name that resolves to loopback only is refused with a line saying so (no other host
    reaches it, and only ``localhost`` or an address counts as loopback)."""
    check_endpoint(endpoint, what="bind endpoint")
    if is_loopback(endpoint) or isinstance(curve, CurveServer):
        return
    if not insecure:
        tcp = tcp_host_port(endpoint)
        address = _loopback_name(tcp[0]) if tcp is not None else None
        if tcp is not None and address is not None:
            host, port = tcp
            shown = f"[{address}]" if ":" in address else address
            raise ConfigError(
                f"refusing to bind {endpoint}: {host!r} names this host's loopback address {address}, which no other host "
                f"reaches, and only localhost or an address counts as loopback: write tcp://{shown}:{port} to serve this "
                "host alone; for other hosts, bind an address they reach, with CURVE keys ('qworker keys') or --insecure"
            )
        raise ConfigError(
            f"refusing to bind {endpoint} without authentication: any process that can reach it could join and feed "
            "results into the cache. Give CURVE keys (curve_secret_key + curve_allowed_keys; see 'qworker keys'), "
            "or say insecure=True / --insecure on a network you trust"
        )
    log.warning("qworker: binding %s without authentication or encryption (insecure, as asked)", endpoint)


REFUSAL_LOG_EVERY_S = 60.0  # refusals of one address are logged at WARNING at most this often (refused peers re-dial)


class _Authenticator(ThreadAuthenticator):
    """pyzmq's ZAP handler, logging refusals at WARNING with the peer's address (once a minute per address)."""

    _address = ""
    _logged: dict[str, float]

    async def handle_zap_message(self, msg: list[bytes]) -> None:  # a coroutine since pyzmq 25
        self._address = msg[3].decode(errors="replace") if len(msg) > 3 else "?"
        await super().handle_zap_message(msg)

    def _send_zap_reply(self, request_id: bytes, status_code: bytes, status_text: bytes, user_id: str = "anonymous") -> None:
        if status_code != b"200":
            now = time.monotonic()
            logged = self.__dict__.setdefault("_logged", {})
            last = logged.get(self._address)
            level = logging.WARNING if last is None or now - last >= REFUSAL_LOG_EVERY_S else logging.DEBUG
            if level == logging.WARNING:
                if len(logged) > 10_000:
                    logged.clear()
                logged[self._address] = now
            log.log(level, "qworker: refused a peer from %s: %s (its key is not among the allowed keys)", self._address,
                    status_text.decode(errors="replace"))
        super()._send_zap_reply(request_id, status_code, status_text, user_id)


_FAILED = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_AUTH


@dataclass
class _Guard:
    """What guards one context's CURVE server sockets: the ZAP handler, its allow-list and the list's reloader."""

    auth: _Authenticator
    allow: AllowList
    stop: threading.Event
    threads: list[threading.Thread]


_guards: dict[int, _Guard] = {}  # id(context) -> its guard
_lock = threading.Lock()


def _reload_every(allow: AllowList, stop: threading.Event) -> None:
    while not stop.wait(RELOAD_EVERY_S):
        try:
            allow.reload()
        except Exception:  # a bug here must not end the rereading
            log.exception("qworker: rereading the allowed CURVE keys in %s failed", allow.directory)


def _watch(sock: zmq.Socket, endpoint: str) -> threading.Thread:
    """Log handshakes that fail before the ZAP handler sees them (no key, not ZMTP)."""
    monitor = sock.get_monitor_socket(_FAILED)

    def run() -> None:
        try:
            while True:
                event = recv_monitor_message(monitor)
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    return
                if event["event"] != zmq.EVENT_HANDSHAKE_FAILED_AUTH:  # those are logged with their address above
                    log.warning("qworker: refused a connection to %s: CURVE handshake failed (%s; a peer with no key, "
                                "or not a ZeroMQ peer)", endpoint, zmq.Event(event["value"]).name if event["value"] in
                                zmq.Event._value2member_map_ else event["value"])
        except zmq.ZMQError:
            return
        finally:
            monitor.close(linger=0)

    t = threading.Thread(target=run, name="qworker-curve-monitor", daemon=True)
    t.start()
    return t


def secure(ctx: zmq.Context, sock: zmq.Socket, curve: Optional[Curve], endpoint: str) -> None:
    """Set CURVE options on ``sock`` before it binds or connects (a no-op for ``None``)."""
    if curve is None:
        return
    if isinstance(curve, CurveServer):
        public_key, secret_key = _load(curve.secret_key_file, secret=True)
        if not os.path.isdir(curve.allowed_dir):
            raise ConfigError(f"CURVE allowed-keys directory {curve.allowed_dir} does not exist")
        with _lock:
            guard = _guards.get(id(ctx))
            if guard is None:
                allow = AllowList(curve.allowed_dir, public_key)  # with its own key: a producer's local pool connects with it
                auth = _Authenticator(ctx, log=logging.getLogger("qworker.zap"))
                auth.start()
                auth.configure_curve_callback(domain="*", credentials_provider=allow)
                stop = threading.Event()
                reloader = threading.Thread(target=_reload_every, args=(allow, stop), name="qworker-allowlist", daemon=True)
                reloader.start()
                guard = _guards[id(ctx)] = _Guard(auth, allow, stop, [reloader])
        sock.curve_secretkey = secret_key
        sock.curve_publickey = public_key
        sock.curve_server = True
        if isinstance(sock, GuardedRouter):
            sock.guard(guard.allow)
        guard.threads.append(_watch(sock, endpoint))
    else:
        public_key, secret_key = _load(curve.secret_key_file, secret=True)
        server_key, _ = _load(curve.server_key_file, secret=False)
        sock.curve_secretkey = secret_key
        sock.curve_publickey = public_key
        sock.curve_serverkey = server_key


LinkCallback = Callable[[bool], None]  # a connecting socket's link: True when a peer completes the handshake, False when it drops
_problems: dict[str, str] = {}  # endpoint -> why this process's last CURVE handshake with it failed (cleared on success)


def handshake_problem(endpoint: str) -> Optional[str]:
    """Why this process's last CURVE handshake with ``endpoint`` failed, or None (none failed, or the last succeeded)."""
    return _problems.get(endpoint)


def _client_problem(event: int, endpoint: str, curve: CurveClient) -> str:
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return (f"CURVE handshake with {endpoint} failed: the server refused this process's key. A key problem: add its public "
                f"key (the .key file next to {curve.secret_key_file}) to the server's allowed-keys directory")
    return (f"CURVE handshake with {endpoint} failed: a key problem. The server key {curve.server_key_file} is not the public "
            "key the server holds (or the server does not use CURVE): pass the server's NAME.key as --curve-server-key")


def watch_link(sock: zmq.Socket, endpoint: str, curve: Optional[Curve], on_link: Optional[LinkCallback]) -> None:
    """Watch a connecting socket's link from a thread of its own (libzmq gives a socket one monitor, so this is the
    only one): with a ``CurveClient``, log a CURVE handshake that fails, the server refusing our key or our holding
    the wrong server key (at ERROR, once per minute; ``handshake_problem`` reports it to callers that time out
    waiting); with ``on_link``, call it, on that thread, with True when a peer completes the handshake and False
    when an established link drops.  Call it before the socket connects; a no-op when there is nothing to watch."""
    client = curve if isinstance(curve, CurveClient) else None
    if client is None and on_link is None:
        return
    events = zmq.EVENT_HANDSHAKE_SUCCEEDED | (_FAILED if client is not None else 0) | (zmq.EVENT_DISCONNECTED if on_link else 0)
    monitor = sock.get_monitor_socket(events)

    def run() -> None:
        last = 0.0
        try:
            while True:
                event = recv_monitor_message(monitor)["event"]
                if event == zmq.EVENT_MONITOR_STOPPED:
                    return
                if event in (zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_DISCONNECTED):
                    if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                        _problems.pop(endpoint, None)
                    if on_link is not None:
                        on_link(event == zmq.EVENT_HANDSHAKE_SUCCEEDED)
                    continue
                assert client is not None  # the handshake failures are watched only with CURVE
                why = _problems[endpoint] = _client_problem(event, endpoint, client)
                if time.monotonic() - last >= REFUSAL_LOG_EVERY_S:
                    last = time.monotonic()
                    log.error("qworker: %s", why)
        except zmq.ZMQError:
            return
        finally:
            monitor.close(linger=0)

    threading.Thread(target=run, name="qworker-link-monitor", daemon=True).start()


def release(ctx: zmq.Context) -> None:
    """Stop the authenticator of ``ctx`` and its allow-list's reloader (before its sockets close and it terminates)."""
    with _lock:
        guard = _guards.pop(id(ctx), None)
    if guard is not None:
        guard.stop.set()
        guard.auth.stop()
