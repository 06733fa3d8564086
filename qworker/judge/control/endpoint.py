"""One judge endpoint as the producer's gate sees it: limits, pacing, health.

Owned by the dispatcher thread (only ``LoadPoller`` runs beside it, and it
only writes one tuple).  Units: seconds (monotonic), requests, tokens.

* ``limit``: the adaptive concurrency limit (``limiter``), held against the
  requests at the server (``at_server``: those in flight at the gate less those
  surely outside the server, from the share of a call's time spent there,
  ``transit``), not the gate's count.
* ``rpm`` / ``tpm``: static token buckets from the config (1 s burst).
* ``paced_requests`` / ``paced_tokens``: buckets learned from the provider's
  rate-limit headers (``x-ratelimit-*``, ``anthropic-ratelimit-*``): the rate is
  the announced per-minute limit / 60, the burst is what ``remaining + reset x
  rate`` says the full bucket holds, and every answer re-synchronises the level
  (what the server had left when it counted the request, plus the refill and
  less what we sent since).  So requests are paced before the server refuses.
* ``health``: down, cooling, probing, the error budget and the answer counts
  (``health.Health``, the only writer of those; the gate feeds it each answer).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from dataclasses import dataclass, field
from typing import Callable, Optional

from .health import Health
from .limiter import AdaptiveLimit
from .transit import Transit

log = logging.getLogger("qworker")

__all__ = ["Bucket", "Endpoint", "LoadPoller", "filtered_urls", "only_load", "parse_vllm_load"]

LOAD_POLL_S = 0.5  # how often a metrics URL is read
LOAD_NAMES = ("vllm:num_requests_running", "vllm:num_requests_waiting")  # the metric families a reading needs


@dataclass(slots=True)
class Bucket:
    """A token bucket: ``rate`` per second, holding at most ``size`` (default: one second's worth)."""

    rate: float
    size: float = 0.0
    tokens: float = 0.0
    at: float = 0.0

    def __post_init__(self) -> None:
        self.size = self.size or self.rate

    def level(self, now: float) -> float:
        self.tokens = min(self.size, self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        return self.tokens

    def ready_at(self, need: float, now: float) -> float:
        lvl = self.level(now)
        return now if lvl >= need else now + (min(need, self.size) - lvl) / self.rate


@dataclass(eq=False)  # no slots: LoadPoller holds a weak reference to it
class Endpoint:
    """One endpoint: its limit, pacing and load (written here and by the gate), its ``health`` (written by it alone)."""

    index: int
    url: str
    weight: float
    limit: AdaptiveLimit
    health: Health
    rpm: Optional[Bucket] = None
    tpm: Optional[Bucket] = None
    paced_requests: Optional[Bucket] = None
    paced_tokens: Optional[Bucket] = None
    in_flight: int = 0  # this producer's calls admitted to it and not yet answered (the gate's count)
    transit: Transit = field(default_factory=Transit)  # the share of those calls' time spent at the server
    sent: int = 0  # requests sent so far (a sequence number for header sync)
    load: Optional[tuple] = None  # (running, waiting, at) from the metrics URL, written by LoadPoller
    load_used: float = 0.0
    warned_headers: set = field(default_factory=set)  # headers already reported as not believable
    priority: int = 0  # its tier: lower first (``routing``)
    peers: list = field(default_factory=list)  # other producers' fresh notes on this endpoint (``peers.Note``), from ``peers.Peers``
    turn: int = 0  # this producer's place among those with tasks waiting, for the odd requests of an even split (``peers``)

    # read-only views of its health (``health.Health`` owns them)
    @property
    def down_reason(self) -> str:
        return self.health.down_reason

    @property
    def cool_until(self) -> float:
        return self.health.cool_until

    @property
    def cool_reason(self) -> str:
        return self.health.cool_reason

    def error_share(self) -> float:
        return self.health.error_share()

    def state(self, now: float) -> str:
        return self.health.state(now)

    def buckets(self) -> list[tuple[Bucket, bool]]:
        """(bucket, counts tokens rather than requests)."""
        return [(b, t) for b, t in ((self.rpm, False), (self.paced_requests, False), (self.tpm, True), (self.paced_tokens, True)) if b]

    def _paced_out(self, now: float, tokens: float) -> Optional[Bucket]:
        """The first bucket without room for a request of ``tokens`` now (None: pacing lets it go)."""
        for b, is_tokens in self.buckets():
            if b.level(now) < (min(tokens, b.size) if is_tokens else min(1.0, b.size)):
                return b
        return None

    def free(self, now: float, tokens: float) -> float:
        """Room for one more request now (0 when none); ``tokens``: the request's estimated tokens."""
        held = self.health.holds(now)
        if held is not None:  # down (one probe, before anything else, once the down time is over) or cooling
            return 0.0 if held else math.inf
        if self._paced_out(now, tokens) is not None:
            return 0.0
        return max(0.0, math.floor(self.share()) - self.at_server())

    def at_server(self) -> int:
        """This producer's requests at the server now, as the server counts them (request arrived -> response left):
        ``in_flight`` less the whole requests surely outside it.  Expected outside: x = ``in_flight`` x (1 -
        ``transit.share``) (``transit``); how many are at a given moment varies about x as a Poisson count does, so
        the gate counts x - sqrt(x) of them, rounded down: a server at its cap is not sent more whenever fewer than
        expected happen to be on the way, each answer frees a whole slot as at the gate, and a transit worth a
        request or less changes nothing.  What the limit is held against."""
        n = self.in_flight
        outside = n * (1.0 - self.transit.share)
        return n - max(0, math.floor(outside - math.sqrt(outside) + 1e-9))

    def surely_at_server(self) -> int:
        """This producer's requests at the server now beyond reasonable doubt: ``in_flight`` less x + sqrt(x) outside
        it (``at_server``'s expectation plus one Poisson deviation), to the nearest whole request.  What evidence that
        the server held a level is judged on: a level the gate counts may include answers already on their way back."""
        n = self.in_flight
        outside = n * (1.0 - self.transit.share)
        return max(0, n - math.floor(outside + math.sqrt(outside) + 0.5))

    def total_at_server(self) -> int:
        """Requests at the server now from every producer that shares it (``peers``; theirs as their notes say):
        what its limit is judged against."""
        return self.at_server() + sum(n.in_flight for n in self.peers)

    def total_in_flight(self) -> int:
        """Requests in flight at the gates of every producer that shares it (theirs as their notes say): sent and
        not yet answered, including those still on their way to the server."""
        return self.in_flight + sum(n.in_flight for n in self.peers)

    def share(self) -> float:
        """What this producer may hold: its limit, or with peers (``peers``) an even share.

        With peers, the endpoint's limit is the lowest among the producers with tasks
        waiting (the most cautious reading of the same server); those producers split
        the whole requests of what the others hold apart evenly, the odd ones going
        in turn (``turn``), and none takes more than the limit leaves after what every
        other producer holds now.  At least 1: a producer holding nothing may always
        send one request (its answer is how its limit learns).
        """
        if not self.peers:
            return self.limit.limit
        wanting = [n for n in self.peers if n.wants]
        idle = sum(n.in_flight for n in self.peers if not n.wants)
        limit = min([self.limit.limit, *(n.limit for n in wanting)])
        others = sum(n.in_flight for n in self.peers)
        whole, n = max(0, math.floor(limit - idle)), 1 + len(wanting)
        even = whole // n + (1 if self.turn < whole % n else 0)
        return max(1.0, min(even, limit - others))

    def blocked(self, now: float, tokens: float) -> str:
        """Why this endpoint has no room now (for an error message)."""
        why = self.health.blocked(now)
        if why:
            return why
        names = {id(self.rpm): "rpm", id(self.tpm): "tpm", id(self.paced_requests): "announced requests/min",
                 id(self.paced_tokens): "announced tokens/min"}
        b = self._paced_out(now, tokens)
        if b is not None:
            return f"paced by {names[id(b)]} at {b.rate * 60:g}/min, {b.tokens:g} left, never refilling"
        peers = f", {len(self.peers)} other producers holding {sum(n.in_flight for n in self.peers)}" if self.peers else ""
        return f"limit {self.limit.limit:g}, {self.in_flight} in flight ({self.at_server()} at the server){peers}, weight {self.weight:g}"

    def ready_at(self, now: float, tokens: float) -> Optional[float]:
        """When pacing next lets a request go (None: pacing does not hold it)."""
        times = [b.ready_at(min(tokens, b.size) if t else min(1.0, b.size), now) for b, t in self.buckets()]
        later = [x for x in times if x > now]
        return max(later) if later else None

    def take(self, now: float, tokens: float) -> None:
        for b, is_tokens in self.buckets():
            b.level(now)
            b.tokens -= tokens if is_tokens else 1.0
        self.in_flight += 1
        self.sent += 1
        self.health.sent()

    def learn(self, ratelimit: Optional[dict], now: float, sent_at: float, seq: int, tokens: float) -> None:
        """Re-synchronise the paced buckets with the headers of an answer to a request sent at ``sent_at`` as number ``seq``."""
        if not ratelimit:
            return
        for kind, attr in (("requests", "paced_requests"), ("tokens", "paced_tokens")):
            fam = ratelimit.get(kind)
            if not fam or not fam.get("limit"):
                continue
            rate = fam["limit"] / 60.0
            remaining = fam.get("remaining")
            size = fam["limit"] if remaining is None else min(fam["limit"], remaining + fam.get("reset_s", 0.0) * rate)
            b = getattr(self, attr)
            if b is None or abs(b.rate - rate) > 1e-9:
                b = Bucket(rate, max(1.0, size), tokens=max(1.0, size), at=now)
                setattr(self, attr, b)
                log.info("qworker: judge endpoint %s announces %.0f %s/min; pacing at that rate", self.url, fam["limit"], kind)
            b.size = max(b.size, size, 1.0)
            if remaining is not None:  # what it had left then, plus the refill since, less what we sent since
                unit = tokens if kind == "tokens" else 1.0
                b.tokens = min(b.size, remaining + rate * max(0.0, now - sent_at) - unit * max(0, self.sent - seq))
                b.at = now


_METRIC = re.compile(r"^(vllm:num_requests_(?:running|waiting))(?:\{[^}]*\})?\s+([0-9.eE+-]+)", re.M)


def parse_vllm_load(text: str) -> Optional[tuple[float, float]]:
    """(running, waiting) summed over label sets from vLLM's Prometheus text; None when absent.  A value that is not
    a count (negative, infinite, NaN: a proxy's or exporter's, not vLLM's) is skipped as if absent."""
    got = {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0}
    seen = False
    for name, value in _METRIC.findall(text):
        try:
            count = float(value)
        except ValueError:
            continue
        if math.isfinite(count) and count >= 0:
            got[name] += count
            seen = True
    return (got["vllm:num_requests_running"], got["vllm:num_requests_waiting"]) if seen else None


_SAMPLE_NAME = re.compile(r"^([^\s{#]+)", re.M)


def filtered_urls(url: str) -> list[str]:
    """``url`` asking for ``LOAD_NAMES`` alone, by prometheus_client's ``name[]`` filter, best first: its path with a
    trailing slash, then as given.  vLLM serves ``/metrics`` from a route that ignores the query (the whole text, about
    50 KB) and the same registry from prometheus_client's own app mounted under ``/metrics/``, which honours it."""
    parts = urllib.parse.urlsplit(url)
    names = urllib.parse.urlencode([("name[]", n) for n in LOAD_NAMES])
    query = f"{parts.query}&{names}" if parts.query else names
    paths = ([parts.path + "/"] if parts.path and not parts.path.endswith("/") else []) + [parts.path or "/"]
    return [urllib.parse.urlunsplit(parts._replace(path=p, query=query)) for p in paths]


def only_load(text: str) -> bool:
    """Whether ``text`` holds the counts (``parse_vllm_load``) and samples of no other metric: a server that honoured
    the ``name[]`` filter, not one that ignored it."""
    return parse_vllm_load(text) is not None and all(name in LOAD_NAMES for name in _SAMPLE_NAME.findall(text))


def fetch_text(url: str, timeout_s: float) -> str:
    """The body of ``GET url`` as text (at most 4 MiB); raises ``OSError`` (an HTTP error status included)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 (a configured URL)
        return r.read(4 * 1024 * 1024).decode("utf-8", "replace")


class LoadPoller(threading.Thread):
    """Reads an endpoint's metrics URL every ``LOAD_POLL_S`` off the dispatcher thread; ends at ``stop()`` (its
    gate's ``close``) or when the endpoint is gone, whichever comes first.

    What it reads (``read_url``): the first of ``filtered_urls`` whose answer holds the counts and nothing else
    (``only_load``), else the configured URL; chosen at the first reading and again when a URL that gave the counts
    stops giving them (a server that ignores the query, or answers it with an error, is read at its URL as given; one
    that never gives the counts costs one GET a reading once chosen).  On vLLM that is a
    reading of about 270 bytes instead of 50 KB."""

    def __init__(self, endpoint: Endpoint, url: str, interval_s: float = LOAD_POLL_S,
                 fetch: Callable[[str, float], str] = fetch_text) -> None:
        """``fetch``: ``(url, timeout seconds) -> text``, raising ``OSError`` or ``ValueError`` when there is none."""
        super().__init__(name=f"qworker-load-{endpoint.index}", daemon=True)
        self._ref = weakref.ref(endpoint)
        self.url, self.interval_s, self.fetch = url, interval_s, fetch
        self.read_url: Optional[str] = None  # what the readings GET; None: chosen at the next reading
        self._read_counts = False  # the last reading at ``read_url`` gave the counts
        self.failures = 0
        self._stopped = threading.Event()

    def stop(self) -> None:
        """End the polling: no request starts after this returns (one in flight ends within its timeout)."""
        self._stopped.set()

    def read(self) -> Optional[tuple[float, float]]:
        """One reading: (running, waiting), or None (no answer, or no counts in it: counted in ``failures``)."""
        timeout = min(2.0, 4 * self.interval_s)
        if self.read_url is None:
            for candidate in filtered_urls(self.url):
                if self._stopped.is_set():
                    return None
                try:
                    text = self.fetch(candidate, timeout)
                except (urllib.error.HTTPError, ValueError):
                    continue  # an answer, not to this query: the next candidate
                except OSError:  # no answer at all (down, hung): one try a reading, not one per candidate
                    self.failures += 1
                    return None
                if only_load(text):
                    self.read_url, self._read_counts = candidate, True
                    return parse_vllm_load(text)
                whole = parse_vllm_load(text)
                if whole is not None:  # the query ignored (vLLM's /metrics route): its whole text, read as it is
                    self.read_url, self._read_counts = self.url, True
                    return whole
            self.read_url = self.url
        try:
            load = parse_vllm_load(self.fetch(self.read_url, timeout))
        except (OSError, ValueError):
            load = None
        if load is None:
            self.failures += 1
            if self._read_counts:  # the URL that gave counts gives none now (the server changed): chosen again
                self.read_url = None
        self._read_counts = load is not None
        return load

    def run(self) -> None:
        while not self._stopped.is_set():
            t0 = time.monotonic()
            load = self.read()
            ep = self._ref()
            if ep is None:
                return
            if load is not None:
                ep.load = (load[0], load[1], time.monotonic())
            del ep
            self._stopped.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))
