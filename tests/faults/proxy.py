"""A TCP proxy that breaks a link for real (real sockets, threads; nothing is mocked).

``Proxy(upstream_port)`` listens on a loopback port of its own and pumps bytes
both ways between each accepted connection and a fresh connection upstream.
Faults, from the test's thread:

* ``cut(seconds)``: close every connection now (both sides see the close) and
  refuse new ones for ``seconds`` (accepted, then closed at once, as a link that
  is down does); ``heal()`` ends a cut early.  ``cut()`` with no seconds stays
  cut until ``heal``.
* ``delay(seconds)``: hold every chunk this long before forwarding it (0: off).
* ``truncate(after_bytes)``: on every open connection, forward ``after_bytes``
  more bytes in each direction, then close it (a frame cut short mid-way).
* ``drop(nbytes)``: discard the next ``nbytes`` bytes on each open connection,
  each direction, and go on forwarding (the stream is damaged, not closed).
* ``blackhole(seconds)``: swallow every byte both ways, connections open, for
  ``seconds``, then close them (a link that goes silent, then resets): what was
  sent meanwhile is lost, and neither side is told until the close.

``connections`` counts connections accepted (refused ones included), ``cuts``
the cuts made.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Optional

__all__ = ["Proxy"]

_CHUNK = 65536


class _Link:
    """One client connection and its upstream connection; a pump thread per direction."""

    def __init__(self, proxy: Proxy, down: socket.socket, up: socket.socket) -> None:
        self.proxy, self.down, self.up = proxy, down, up
        self.closed = threading.Event()
        self.budget: dict[str, Optional[int]] = {"up": None, "down": None}  # bytes left before truncation
        self.skip = {"up": 0, "down": 0}  # bytes to discard
        self._lock = threading.Lock()

    def start(self) -> None:
        for name, src, dst in (("up", self.down, self.up), ("down", self.up, self.down)):
            threading.Thread(target=self._pump, args=(name, src, dst), name=f"proxy-{name}", daemon=True).start()

    def _pump(self, name: str, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.closed.is_set():
                data = src.recv(_CHUNK)
                if not data:
                    break
                delay = self.proxy.delay_s
                if delay > 0:
                    time.sleep(delay)
                if time.monotonic() < self.proxy._hole_until:
                    continue  # swallowed
                with self._lock:
                    skip = min(self.skip[name], len(data))
                    self.skip[name] -= skip
                    data = data[skip:]
                    budget = self.budget[name]
                    if budget is not None:
                        data = data[:budget]
                        self.budget[name] = budget - len(data)
                if data:
                    dst.sendall(data)
                if budget is not None and self.budget[name] == 0:
                    break
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for s in (self.down, self.up):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


class Proxy:
    def __init__(self, upstream_port: int, *, host: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self.endpoint = f"tcp://{host}:{self.port}"
        self.delay_s = 0.0
        self.connections = 0
        self.cuts = 0
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._cut_until = 0.0  # monotonic; float("inf") while cut until healed
        self._hole_until = 0.0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)

    def start(self) -> Proxy:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            if self.is_cut():
                down.close()  # the link is down: refused
                continue
            try:
                up = socket.create_connection(self.upstream, timeout=5)
                up.settimeout(None)
            except OSError:
                down.close()
                continue
            for s in (down, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, down, up)
            with self._lock:
                self._links = [lk for lk in self._links if not lk.closed.is_set()]
                self._links.append(link)
            link.start()

    def is_cut(self) -> bool:
        return time.monotonic() < self._cut_until

    def _open_links(self) -> list[_Link]:
        with self._lock:
            return [lk for lk in self._links if not lk.closed.is_set()]

    # faults ---------------------------------------------------------------------
    def cut(self, seconds: Optional[float] = None) -> None:
        """Close every connection and refuse new ones for ``seconds`` (until ``heal`` if None)."""
        self._cut_until = float("inf") if seconds is None else time.monotonic() + seconds
        self.cuts += 1
        for link in self._open_links():
            link.close()

    def blackhole(self, seconds: float) -> None:
        """Swallow everything for ``seconds``, then close every connection (returns at once)."""
        self._hole_until = time.monotonic() + seconds

        def close_all() -> None:
            for link in self._open_links():
                link.close()

        timer = threading.Timer(seconds, close_all)
        timer.daemon = True
        timer.start()

    def heal(self) -> None:
        self._cut_until = 0.0

    def delay(self, seconds: float) -> None:
        self.delay_s = seconds

    def truncate(self, after_bytes: int) -> None:
        for link in self._open_links():
            with link._lock:
                link.budget = {"up": after_bytes, "down": after_bytes}

    def drop(self, nbytes: int) -> None:
        for link in self._open_links():
            with link._lock:
                link.skip = {"up": nbytes, "down": nbytes}

    def stop(self) -> None:
        self._stopped.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self._listener.close()
        for link in self._open_links():
            link.close()

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
