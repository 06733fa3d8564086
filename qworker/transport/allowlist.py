"""CURVE allow-lists that change while a server runs, and a ROUTER that stops serving revoked keys.

``AllowList`` holds the public keys (z85) in the allowed-keys directory, plus the
server's own.  It is reread when the directory changes: a thread checks the
directory's listing (names, sizes, modification times) every ``RELOAD_EVERY_S``
seconds, and ``reload_all()`` rereads every live list at once (for a SIGHUP
handler).  The ZAP handler consults it for each new connection.

ZAP only authenticates a connection's handshake: a connection made with a key
that is later removed stays open.  ``GuardedRouter`` closes that gap on the
server's side: libzmq stamps every message with the ``User-Id`` ZAP gave its
connection (the z85 public key), and the router drops every message whose key
is no longer allowed and refuses to send to a peer identity that last spoke
with such a key (``EHOSTUNREACH``, as for a peer that is gone).  So a revoked
pool's workers fall silent to the producer, which loses them (and redelivers
what they held) at once when it next tries to send to them, or after its
heartbeat timeout.  Their TCP connections stay open (a ROUTER cannot close one
peer's connection); nothing they send is read.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any, Optional, Sequence

import zmq
import zmq.auth

log = logging.getLogger("qworker")

__all__ = ["AllowList", "GuardedRouter", "POLLIN", "RELOAD_EVERY_S", "reload_all"]

POLLIN = int(zmq.POLLIN)  # a plain int: ``&`` with the IntFlag itself costs about 1.3 us, with this about 30 ns

RELOAD_EVERY_S = 1.0  # how often the allowed-keys directory is checked for changes
_LOG_DROPS = 10  # per peer: messages dropped (logged) before it goes quiet in the log
DROPS_PER_POLL = 256  # revoked messages one poll_allowed call drops before it gives the thread back

_live: weakref.WeakSet[AllowList] = weakref.WeakSet()


def reload_all() -> None:
    """Reread every live allow-list now (e.g. from a SIGHUP handler; safe from any thread)."""
    for allow in list(_live):
        allow.reload(force=True)


class AllowList:
    """The admitted public keys, z85-encoded (as key files hold them, and as ZAP reports a CURVE peer's
    ``User-Id``): the directory's ``*.key`` files, and the server's own key (its local pool connects with it)."""

    def __init__(self, directory: str, own_public_key: bytes) -> None:
        self.directory = directory
        self._own = own_public_key
        self._lock = threading.Lock()
        self._signature: Optional[tuple] = None
        self.keys: frozenset[bytes] = frozenset([own_public_key])  # replaced whole, never mutated: readers need no lock
        self._loaded = False
        self.reload()
        _live.add(self)

    def allows(self, z85_key: bytes) -> bool:
        return z85_key in self.keys

    def callback(self, domain: str, z85_key: bytes) -> bool:
        """pyzmq's credentials-provider hook (``configure_curve_callback``): called by the ZAP handler."""
        return z85_key in self.keys

    def _scan(self) -> tuple:
        try:
            with os.scandir(self.directory) as it:
                return tuple(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns, e.inode()) for e in it if e.name.endswith(".key")))
        except OSError as exc:
            return ("unreadable", str(exc))

    def reload(self, *, force: bool = False) -> bool:
        """Reread the directory if its listing changed (or ``force``); returns whether the keys changed."""
        with self._lock:
            signature = self._scan()
            if signature == self._signature and not force:
                return False
            self._signature = signature
            try:
                found = zmq.auth.load_certificates(self.directory)
            except Exception as exc:  # keep the last good list: a directory being rewritten must not lock everyone out
                log.error("qworker: cannot read the allowed CURVE keys in %s (%s: %s); keeping the %d keys read before",
                          self.directory, type(exc).__name__, exc, len(self.keys) - 1)
                return False
            keys = frozenset(found) | {self._own}
            if keys == self.keys:
                return False
            added, removed = len(keys - self.keys), len(self.keys - keys)
            self.keys = keys
        if self._loaded:
            log.warning("qworker: allowed CURVE keys in %s changed: %d added, %d removed (%d allowed); peers with a removed "
                        "key are no longer served", self.directory, added, removed, len(keys) - 1)
        self._loaded = True
        return True


class GuardedRouter(zmq.Socket):
    """A ROUTER that neither delivers messages from, nor sends to, peers whose CURVE key left the allow-list.

    Receive through ``poll_allowed`` (what ``sockets.readable`` calls) or ``recv_multipart``.
    """

    allow: Optional[AllowList] = None
    _held: Optional[list] = None  # a message poll_allowed received and checked, for the next recv_multipart
    _peer_key: dict
    _drops: dict

    def guard(self, allow: AllowList) -> None:
        self.allow = allow
        self._peer_key = {}  # peer routing id -> z85 key of the connection it last spoke on
        self._drops = {}  # peer routing id -> messages dropped

    def _recv_checked(self, flags: int, copy: bool) -> Optional[list]:
        """Receive one message; None if it came with a key no longer allowed (it is dropped)."""
        first = zmq.Socket.recv(self, flags, copy=False)
        parts: list[Any] = [first.bytes]
        while self.getsockopt(zmq.RCVMORE):
            parts.append(zmq.Socket.recv(self, flags, copy=copy))
        allow = self.allow
        if allow is None:
            return parts
        try:
            key = str(first.get("User-Id")).encode()
        except (zmq.ZMQError, AttributeError):
            key = b""
        peer = parts[0]
        if self._peer_key.get(peer) != key:
            self._peer_key[peer] = key
        if allow.allows(key):
            return parts
        n = self._drops[peer] = self._drops.get(peer, 0) + 1
        if n <= _LOG_DROPS:
            log.warning("qworker: dropped a message from %r: its CURVE key %s is no longer among the allowed keys in %s%s",
                        peer[:64], key.decode(errors="replace")[:8] + "...", allow.directory,
                        " (not logging more from it)" if n == _LOG_DROPS else "")
        return None

    def poll_allowed(self) -> bool:
        """Whether an allowed message is waiting (without blocking); drops the revoked ones before it, at most
        ``DROPS_PER_POLL`` per call (``recv_multipart``): False then means "nothing allowed yet"; the socket
        stays readable, so the thread's next poll returns at once and the call is made again."""
        if self._held is None:
            try:
                self._held = self.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return False
        return True

    def recv_multipart(self, flags: int = 0, copy: bool = True, track: bool = False) -> list[Any]:
        """The next allowed message.  With ``zmq.NOBLOCK``, ``zmq.Again`` also after ``DROPS_PER_POLL`` revoked
        messages dropped: a revoked peer that keeps sending cannot hold the receiving thread here."""
        held, self._held = self._held, None
        drops = 0
        while held is None:
            if flags & zmq.NOBLOCK and drops == DROPS_PER_POLL:
                raise zmq.Again()
            held = self._recv_checked(flags, copy)
            drops += 1
        return held

    def send_multipart(self, msg_parts: Sequence[Any], flags: int = 0, copy: bool = True, track: bool = False,
                       **kwargs: Any) -> Optional[zmq.MessageTracker]:
        if self.allow is not None:
            key = self._peer_key.get(bytes(msg_parts[0]))
            if key is not None and not self.allow.allows(key):
                raise zmq.ZMQError(zmq.EHOSTUNREACH, "the peer's CURVE key is no longer allowed")
        return super().send_multipart(msg_parts, flags, copy, track, **kwargs)

