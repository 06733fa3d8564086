"""One pooled HTTP client per worker process, with wall-clock deadlines.

A ``urllib3`` connection pool per URL (``maxsize=N, block=True``): keep-alive
connections, at most N (a thread that would need an N+1th waits for one to be
returned, rather than opening and throwing away extra connections); the URL is
parsed once, not on every request as a ``PoolManager`` does.  urllib3
retries only connection set-up (``connect=1``); every HTTP status comes back
to the caller, so every 429 and every latency sample reaches the limiter.
A request's head and body leave in one write (``_HeadWithBody``), not two.

urllib3's read timeout bounds each socket read, not the request: a server that
drips a byte a second never trips it.  ``post`` enforces a deadline on the
whole exchange by shrinking the socket timeout to what is left before each
read, and raises ``Deadline`` when it passes.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

import urllib3
from urllib3.exceptions import ConnectTimeoutError, EmptyPoolError, HTTPError, NewConnectionError, ProtocolError, ReadTimeoutError

__all__ = ["Reply", "Deadline", "ConnectFailed", "TooLarge", "MAX_BODY_BYTES", "pool", "post", "url_problem"]

CHUNK = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024


class Deadline(Exception):
    """The request did not complete before its wall-clock deadline."""


class ConnectFailed(Exception):
    """No answer over the connection.

    ``kind`` is ``"connect"`` when no connection could be made (refused,
    unreachable: nothing is listening there) and ``"reset"`` when a connection
    was made and then dropped before the answer was complete (a reset, a
    closed keep-alive connection); ``"too_large"`` (``TooLarge``) when the
    answer's body is over ``MAX_BODY_BYTES``.
    """

    def __init__(self, message: str, kind: str = "connect") -> None:
        super().__init__(message)
        self.kind = kind


class TooLarge(ConnectFailed):
    """The answer's body is over ``MAX_BODY_BYTES`` (announced, or read so far): not read further, not worth a retry."""

    def __init__(self, size: int, announced: bool) -> None:
        how = f"announces {size} bytes" if announced else f"passed {size} bytes"
        super().__init__(f"the answer {how}, over the cap of {MAX_BODY_BYTES} bytes ({MAX_BODY_BYTES >> 20} MiB) "
                         "on a judge's reply; not read and not retried", "too_large")


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict  # lower-case names
    body: bytes
    latency_s: float


def _no_retry_warnings(record: logging.LogRecord) -> bool:
    """Drop urllib3's warning on each connection retry: the gate reports an endpoint that refuses
    connections once ("is down"), where urllib3 would warn for every request of every worker.
    Its other records (DEBUG included, when asked for) pass."""
    return not (record.levelno == logging.WARNING and record.getMessage().startswith("Retrying ("))


class _HeadWithBody:
    """Connection mixin: a request's head goes out in the same write as its body.

    urllib3 writes the head (request line and headers) and then the body, two
    writes; with ``TCP_NODELAY`` (urllib3's default) two segments.  A server
    asleep when the first arrives wakes, parses the head, sleeps and wakes again
    for the body: on a judge whose front end shares its cores with the model
    (vLLM on CPU), time taken from the model on every request.  Here the head
    is held and sent with the body's first chunk when the body is non-empty
    ``bytes`` or ``bytearray`` (``post`` sends bytes); any other request writes
    its head on its own, as urllib3 does.
    """

    _hold_head = False
    _held: bytes | None = None

    def request(self, method: str, url: str, body: object = None, headers: object = None, **kwargs: object) -> None:
        self._hold_head = isinstance(body, (bytes, bytearray)) and len(body) > 0
        try:
            super().request(method, url, body=body, headers=headers, **kwargs)  # type: ignore[misc]
            if self._held is not None:  # no write of the body followed: the head goes alone
                held, self._held = self._held, None
                super().send(held)  # type: ignore[misc]
        finally:
            self._hold_head = False
            self._held = None  # (a head still held: the request raised before its body; urllib3 closes the connection)

    def send(self, data: Any) -> None:  # (http.client's: bytes, a file or an iterable; a head is bytes)
        if self._hold_head:
            self._hold_head, self._held = False, bytes(data)
            return
        held, self._held = self._held, None
        if held is not None and isinstance(data, (bytes, bytearray, memoryview)):
            data = held + data
        elif held is not None:  # (a file or an iterable: its own writes, after the head)
            super().send(held)  # type: ignore[misc]
        super().send(data)  # type: ignore[misc]


class _HTTPConnection(_HeadWithBody, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(_HeadWithBody, urllib3.connection.HTTPSConnection):
    pass


_RETRIES = urllib3.Retry(total=None, connect=1, read=0, redirect=0, status=0, other=0, backoff_factor=0)
POOLS_MAX = 64  # hosts whose pools are kept (the 64 made last); past it the oldest is dropped (its idle connections close as it is collected)
_DEFAULT_PORTS = {"http": 80, "https": 443}
_hosts: dict[tuple[str, str, int], urllib3.HTTPConnectionPool] = {}  # (scheme, host, port) -> its pool, oldest first
_pools: dict[str, tuple[urllib3.HTTPConnectionPool, str]] = {}  # url -> (its host's pool, its path): one parse per url
_pools_lock = threading.Lock()


def url_problem(url: str) -> Optional[str]:
    """Why ``url`` cannot be a judge's URL, or None: a scheme other than http or https (urllib3 would send it as plain
    http, its Authorization header with it), or no host, or a port out of 1-65535 (every call would fail as a reset)."""
    if url.partition("://")[0].lower() not in _DEFAULT_PORTS:
        return "must start with http:// or https://"
    try:
        host = urllib3.util.parse_url(url).host
    except ValueError:  # (urllib3's LocationParseError: a port out of range, a bracket left open)
        host = None
    return None if host else "not a URL with a host and a port of 1-65535"


def pool(url: str, connections_per_host: int = 128) -> tuple[urllib3.HTTPConnectionPool, str]:
    """This process's connection pool for ``url``'s host (made on first use, with at most ``connections_per_host``
    connections; the ``POOLS_MAX`` hosts made last are kept) and the path to request on it.  A scheme other than
    http or https is ``URLSchemeUnknown`` (nothing is sent)."""
    known = _pools.get(url)
    if known is not None:
        return known
    parsed = urllib3.util.parse_url(url)
    scheme = (parsed.scheme or "").lower()
    if scheme not in _DEFAULT_PORTS:
        raise urllib3.exceptions.URLSchemeUnknown(scheme or "(none)")
    key = (scheme, (parsed.host or "").lower(), parsed.port or _DEFAULT_PORTS[scheme])
    with _pools_lock:
        made = _hosts.get(key)
        if made is None:
            logging.getLogger("urllib3.connectionpool").addFilter(_no_retry_warnings)  # (added once: a filter already there is not)
            made = _hosts[key] = urllib3.connection_from_url(url, maxsize=connections_per_host, block=True, retries=_RETRIES)
            made.ConnectionCls = _HTTPSConnection if scheme == "https" else _HTTPConnection
            while len(_hosts) > POOLS_MAX:  # dropped, not closed: a call waiting on it still gets its connection back
                _drop(_hosts[next(iter(_hosts))])
        known = _pools[url] = (made, parsed.request_uri)
    return known


def _drop(conns: urllib3.HTTPConnectionPool) -> None:
    """Forget ``conns`` (under ``_pools_lock``): its host and every URL on it; the next call there makes a new pool."""
    for key in [k for k, p in _hosts.items() if p is conns]:
        del _hosts[key]
    for u in [u for u, (p, _) in _pools.items() if p is conns]:
        del _pools[u]


def _forget(conns: urllib3.HTTPConnectionPool) -> None:
    """``conns`` was closed: the next call to its host makes a new pool."""
    with _pools_lock:
        _drop(conns)


def _shrink_timeout(resp: urllib3.BaseHTTPResponse, left: float) -> None:
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    if sock is not None:
        sock.settimeout(max(0.001, left))


def _discard(resp: urllib3.BaseHTTPResponse) -> None:
    """Close a half-read connection and give its slot back (with block=True a lost slot is lost for good)."""
    resp.close()
    resp.release_conn()


def _urlopen(url: str, body: bytes, headers: dict, timeout: urllib3.Timeout, left: float, connections_per_host: int) -> urllib3.BaseHTTPResponse:
    """POST on ``url``'s pool, waiting at most ``left`` seconds for a free connection; a pool closed meanwhile is
    replaced by a new one."""
    for _ in range(2):
        conns, path = pool(url, connections_per_host)
        try:
            return conns.urlopen("POST", path, body=body, headers=headers, timeout=timeout, pool_timeout=max(0.001, left),  # type: ignore[arg-type]  # (seconds: a queue's get)
                                 preload_content=False, redirect=False)
        except urllib3.exceptions.ClosedPoolError:
            _forget(conns)
    raise ConnectFailed("the connection pool was closed twice in a row", "reset")


def post(url: str, body: bytes, headers: dict, *, deadline: float, connections_per_host: int = 128) -> Reply:
    """POST ``body``; raises ``Deadline`` past ``deadline`` (monotonic seconds) and ``ConnectFailed``."""
    t0 = time.monotonic()
    left = deadline - t0
    if left <= 0:
        raise Deadline("no time left to send the request")
    timeout = urllib3.Timeout(connect=min(10.0, left), read=left)
    try:
        resp = _urlopen(url, body, headers, timeout, left, connections_per_host)
    except EmptyPoolError:
        raise Deadline(f"no connection to the judge came free within {left:.3g} s (connections_per_host)") from None
    except (urllib3.exceptions.MaxRetryError, NewConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ReadTimeoutError):
            raise Deadline(f"no answer within {left:.3g} s") from None
        kind = "connect" if isinstance(reason, (NewConnectionError, ConnectTimeoutError, ConnectionRefusedError)) else "reset"
        # urllib3 starts with "HTTPConnection(host=..., port=...): ", which the caller's message names already
        raise ConnectFailed(f"{type(reason).__name__}: {re.sub(r'^_?HTTPS?Connection[(][^)]*[)]: ', '', str(reason))}", kind) from None
    except ReadTimeoutError:
        raise Deadline(f"no answer within {left:.3g} s") from None
    except (ProtocolError, HTTPError, OSError) as exc:
        raise ConnectFailed(f"{type(exc).__name__}: {exc}", "reset") from None
    chunks: list[bytes] = []
    size = 0
    try:
        announced = int(resp.headers.get("content-length") or 0)
    except ValueError:
        announced = 0
    if announced > MAX_BODY_BYTES:
        _discard(resp)
        raise TooLarge(announced, True)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Deadline("the answer did not complete before the deadline")
            _shrink_timeout(resp, left)
            chunk = resp.read(CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise TooLarge(size, False)
            chunks.append(chunk)
    except (Deadline, TooLarge):
        _discard(resp)
        raise
    except ReadTimeoutError:
        _discard(resp)
        raise Deadline("the answer did not complete before the deadline") from None
    except (ProtocolError, HTTPError, OSError) as exc:
        _discard(resp)
        raise ConnectFailed(f"{type(exc).__name__}: {exc}", "reset") from None
    resp.release_conn()
    headers_out = {k.lower(): v for k, v in resp.headers.items()}
    return Reply(resp.status, headers_out, b"".join(chunks), time.monotonic() - t0)
