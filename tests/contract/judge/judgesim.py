"""A discrete-event simulation of producers' gates against judge servers (simulated time, no clock, no sockets).

Each client is a real ``Gate`` fed by workers with unlimited credit: it admits
tasks, the simulated server answers with the same outcome dicts ``llm_judge``
builds, and ``settle`` decides; a retried task goes back to the front of the
gate's queue, as the dispatcher puts it.  Servers:

* ``refuse``: at most ``capacity`` in service; more get 429 (after 1-20 ms);
* ``queue``: ``capacity`` served at once, the rest wait in FIFO order, never refused;
* a token bucket of ``rate`` per second holding ``reserve_s`` seconds' worth (1 by default; 429 when empty);
* ``retry_after``: ``"ms"`` (exact), ``"s"`` (whole seconds, at least 1) or None;
* ``headers``: announce the bucket as OpenAI's ``x-ratelimit-*`` do;
* ``p_error``: a 503 (no Retry-After) with that probability, independent of load;
* latency: ``lognormal`` with mean ``latency`` and ``sigma``, or fixed +-5%;
  ``tokens_per_reply``: per output token instead, the reply saying its length; ``reply_tokens``: a
  length the reply says, drawn apart from its latency (a server whose time is not its output's);
* ``outage`` = (start, end): every request arriving then is turned away at
  once, as ``outage_reply`` says: ``"429"`` or ``"503"`` (with a whole-second
  ``Retry-After: 1`` unless ``retry_after`` is None), ``"connect"`` (connection
  refused) or ``"reset"`` (connection reset); requests already in service finish.

Harder than the real thing (off by default, so the older tests keep their servers):

* ``capacity_steps`` = [(t, capacity), ...]: the capacity changes at those times
  (another tenant arrives, a replica restarts, a provider lowers a tier);
* ``refusal_latency`` = (lo, hi): a refusal comes back after U(lo, hi) seconds
  (gateways that queue before refusing: 50-300 ms), not 1-20 ms;
* ``load_slope``: service time x (1 + load_slope x busy / capacity): latency rises with load;
* ``quota_per_min``: a per-minute quota in fixed windows (at multiples of 60 s):
  past it, 429 with Retry-After to the window's end;
* ``outages`` = [(start, end), ...]: more outages; give several servers the same
  list for correlated ones.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Callable, Optional

import msgpack

from qworker.engine.task import Pending
from qworker.judge.control.gate import Gate
from qworker.judge.control.peers import MemoryBoard
from qworker.rewards.llm_judge import DEFAULT_TEMPLATE, render
from qworker.testing.prefixcache import PrefixCache

TRANSIT_S = 0.002  # worker -> server -> worker: the network, inside the worker's measured latency (``latency_s``)


@dataclass
class Server:
    mode: str = "refuse"
    capacity: int = 10**9
    rate: Optional[float] = None
    reserve_s: float = 1.0  # a token bucket's reserve, seconds of its rate (full at the start)
    latency: float = 0.3
    sigma: float = 0.0
    retry_after: Optional[str] = "ms"
    headers: bool = False
    p_error: float = 0.0
    tokens_per_reply: Optional[Callable[[random.Random], int]] = None
    reply_tokens: Optional[Callable[[random.Random], int]] = None  # tokens a reply reports, drawn apart from its latency
    outage: Optional[tuple[float, float]] = None
    outage_reply: str = "429"
    capacity_steps: Optional[list[tuple[float, int]]] = None
    refusal_latency: tuple[float, float] = (0.001, 0.02)
    load_slope: float = 0.0
    quota_per_min: Optional[int] = None
    outages: list[tuple[float, float]] = field(default_factory=list)
    quota_window: int = -1
    quota_used: int = 0
    prefix: Optional[PrefixCache] = None  # a replica's prefix cache: the prompt's prefill (what missed) is added to the service
    seed: int = 1
    busy: int = 0
    waiting: list = field(default_factory=list)
    ends: list = field(default_factory=list)
    bucket: float = 0.0
    refilled: float = 0.0
    stats: dict = field(default_factory=lambda: {"requests": 0, "served": 0, "refused": 0, "errors": 0, "queued_s": 0.0, "service_s": 0.0})
    waits: list = field(default_factory=list)  # (time service started, seconds queued before it)
    services: list = field(default_factory=list)  # (time service started, service seconds)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.bucket = (self.rate or 0.0) * self.reserve_s

    def service(self) -> tuple[float, Optional[int]]:
        if self.tokens_per_reply:
            n = self.tokens_per_reply(self.rng)
            return self.latency * n, n
        told = self.reply_tokens(self.rng) if self.reply_tokens else None
        if self.sigma:
            return self.latency * math.exp(self.sigma * self.rng.gauss(0, 1) - self.sigma**2 / 2), told
        return self.latency * self.rng.uniform(0.95, 1.05), told

    def counts(self) -> tuple[float, float]:
        """(running, waiting), as a metrics URL says."""
        return float(self.busy), float(len(self.waiting))

    def ratelimit(self) -> Optional[dict]:
        if not (self.headers and self.rate):
            return None
        return {"requests": {"limit": int(self.rate * 60), "remaining": int(self.bucket), "reset_s": (self.rate * self.reserve_s - self.bucket) / self.rate}}

    def capacity_at(self, t: float) -> int:
        cap = self.capacity
        for at, c in self.capacity_steps or ():
            if t >= at:
                cap = c
        return cap

    def _refused_after(self, t: float) -> float:
        return t + self.rng.uniform(*self.refusal_latency)

    def arrive(self, sim: Sim, t: float, reply: Callable[[float, dict], None], p: Optional[Pending] = None) -> None:
        st = self.stats
        st["requests"] += 1
        if any(a <= t < b for a, b in ([self.outage] if self.outage else []) + self.outages):
            st["refused"] += 1
            return reply(self._refused_after(t), self._outage_reply())
        if self.quota_per_min is not None:
            window = int(t // 60)
            if window != self.quota_window:
                self.quota_window, self.quota_used = window, 0
            if self.quota_used >= self.quota_per_min:
                st["refused"] += 1
                return reply(self._refused_after(t), self._refusal((window + 1) * 60.0 - t))
            self.quota_used += 1
        if self.rate is not None:
            self.bucket = min(self.rate * self.reserve_s, self.bucket + (t - self.refilled) * self.rate)
            self.refilled = t
            if self.bucket < 1.0:
                st["refused"] += 1
                wait = (1.0 - self.bucket) / self.rate
                return reply(self._refused_after(t), self._refusal(wait))
        capacity = self.capacity_at(t)
        if self.mode == "refuse" and self.busy >= capacity:
            st["refused"] += 1
            return reply(self._refused_after(t), self._refusal(max(0.001, min(self.ends, default=t + self.latency) - t)))
        if self.rate is not None:
            self.bucket -= 1.0
        rl = self.ratelimit()
        text = prompt_of(p) if self.prefix is not None and p is not None else ""
        if self.busy < capacity:
            self._start(sim, t, t, reply, rl, text)
        else:
            self.waiting.append((t, reply, rl, text))

    def _outage_reply(self) -> dict:
        kind = self.outage_reply
        if kind in ("connect", "reset"):
            return {"status": 0, "failure": kind, "latency_s": 0.005, "retry_after_s": None, "completion_tokens": None, "ratelimit": None}
        return {"status": int(kind), "failure": "", "latency_s": 0.01, "retry_after_s": None if self.retry_after is None else 1.0,
                "completion_tokens": None, "ratelimit": None}

    def _refusal(self, wait: float) -> dict:
        after = None if self.retry_after is None else wait if self.retry_after == "ms" else float(max(1, math.ceil(wait)))
        return {"status": 429, "failure": "", "latency_s": 0.01, "retry_after_s": after, "completion_tokens": None, "ratelimit": self.ratelimit()}

    def _start(self, sim: Sim, arrived: float, t: float, reply, rl, text: str = "") -> None:
        self.busy += 1
        s, tokens = self.service()
        if self.load_slope:
            s *= 1.0 + self.load_slope * self.busy / max(1, self.capacity_at(t))
        if self.prefix is not None:
            s += self.prefix.serve(text)
        self.stats["queued_s"] += t - arrived
        self.waits.append((t, t - arrived))
        self.services.append((t, s))
        self.stats["service_s"] += s
        self.ends.append(t + s)

        def done(t_end: float) -> None:
            self.busy -= 1
            self.ends.remove(min(self.ends))
            error = self.p_error and self.rng.random() < self.p_error
            self.stats["errors" if error else "served"] += 1
            status = 503 if error else 200
            reply(t_end, {"status": status, "failure": "", "latency_s": t_end - arrived + TRANSIT_S, "retry_after_s": None,
                          "completion_tokens": tokens or 12, "ratelimit": rl})
            if self.waiting and self.busy < self.capacity_at(t_end):
                a, r, rl2, text2 = self.waiting.pop(0)
                self._start(sim, a, t_end, r, rl2, text2)

        sim.at(t + s, done)


@dataclass
class BatchServer:
    """A server that batches in steps, as vLLM does: at most ``capacity`` sequences running, each finishing ``steps``
    steps of ``step`` seconds after the step that admitted it (so sequences admitted together end together: replies of
    one length), the rest waiting in FIFO order, never refused.  At each step boundary the sequences ending leave, the
    counts are logged (``counts``: what a metrics URL says, the next batch still counted waiting), then the waiting are
    admitted.  Same ``stats``, ``waits`` and ``services`` as ``Server``; each reply says ``steps`` tokens."""

    capacity: int = 16
    step: float = 0.005
    steps: int = 16
    seed: int = 1
    running: list = field(default_factory=list)  # (the boundary it ends at, reply, arrived)
    waiting: list = field(default_factory=list)
    logged: tuple[float, float] = (0.0, 0.0)  # (running, waiting) at the last boundary, before admitting
    ticking: bool = False
    stats: dict = field(default_factory=lambda: {"requests": 0, "served": 0, "refused": 0, "errors": 0, "queued_s": 0.0, "service_s": 0.0})
    waits: list = field(default_factory=list)
    services: list = field(default_factory=list)

    def counts(self) -> tuple[float, float]:
        return self.logged

    def arrive(self, sim: Sim, t: float, reply: Callable[[float, dict], None], p: Optional[Pending] = None) -> None:
        self.stats["requests"] += 1
        self.waiting.append((t, reply))
        if not self.ticking:
            self.ticking = True
            sim.at((math.floor(t / self.step + 1e-9) + 1) * self.step, lambda tt: self._tick(sim, tt))

    def _tick(self, sim: Sim, t: float) -> None:
        ended = [r for r in self.running if r[0] <= t + 1e-9]
        self.running = [r for r in self.running if r[0] > t + 1e-9]
        for _, reply, arrived in ended:
            self.stats["served"] += 1
            reply(t, {"status": 200, "failure": "", "latency_s": t - arrived + TRANSIT_S, "retry_after_s": None,
                      "completion_tokens": self.steps, "ratelimit": None})
        self.logged = (float(len(self.running)), float(len(self.waiting)))
        service = self.steps * self.step
        while len(self.running) < self.capacity and self.waiting:
            arrived, reply = self.waiting.pop(0)
            self.running.append((t + service, reply, arrived))
            self.stats["queued_s"] += t - arrived
            self.stats["service_s"] += service
            self.waits.append((t, t - arrived))
            self.services.append((t, service))
        if self.running or self.waiting:
            sim.at(t + self.step, lambda tt: self._tick(sim, tt))
        else:
            self.ticking = False


@dataclass
class DecodeServer:
    """A server that decodes as vLLM's continuous batching does: at most ``capacity`` sequences running, the rest
    waiting in FIFO order, never refused.  Each decode step gives every running sequence one token and lasts
    ``step + step_slope x running`` seconds (each step slows as the batch grows: the attention over every running
    sequence's context); a request leaves when its reply has the ``lengths(rng)`` tokens its task draws (the
    rng seeded by ``seed`` and the task's key: a task's reply is as long on every try), the reply saying them
    (``completion_tokens``).  So its time at the server is its length times the step time
    over its life, and a batch that grows makes long replies slow in proportion.  ``cancel`` aborts a request
    (vLLM aborts one whose client went away: its slot frees at the next step).  Same ``stats``, ``waits`` and
    ``services`` as ``Server``; ``counts`` is what a metrics URL says.  Seconds, tokens."""

    lengths: Callable[[random.Random], int] = lambda rng: 64
    capacity: int = 256
    step: float = 0.01
    step_slope: float = 0.0
    p_lost: float = 0.0  # a request lost with this probability (a dropped connection): never answered, holding no slot
    seed: int = 1
    steps_done: int = 0  # decode steps so far
    running: dict = field(default_factory=dict)  # id -> (the step count it ends at, reply, arrived, tokens)
    finishing: list = field(default_factory=list)  # heap of (the step count it ends at, id)
    waiting: dict = field(default_factory=dict)  # id -> (arrived, reply, tokens), in arrival order
    ticking: bool = False
    stats: dict = field(default_factory=lambda: {"requests": 0, "served": 0, "refused": 0, "errors": 0, "cancelled": 0,
                                                  "queued_s": 0.0, "service_s": 0.0, "tokens": 0, "wasted_tokens": 0})
    waits: list = field(default_factory=list)
    services: list = field(default_factory=list)
    batch: list = field(default_factory=list)  # (time, running) at each step
    _ids: itertools.count = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self._lose = random.Random(self.seed)

    def step_s(self, running: int) -> float:
        """One decode step's seconds with ``running`` sequences in the batch."""
        return self.step + self.step_slope * running

    def counts(self) -> tuple[float, float]:
        return float(len(self.running)), float(len(self.waiting))

    def length(self, key: bytes) -> int:
        """The reply length of the task ``key`` (tokens), the same on every try."""
        return max(1, int(self.lengths(random.Random(f"{self.seed}/{key!r}"))))

    def arrive(self, sim: Sim, t: float, reply: Callable[[float, dict], None], p: Optional[Pending] = None,
               key: Optional[bytes] = None) -> int:
        """Take a request of the task ``p`` (or whose key is ``key``) arriving at ``t``; returns its id (for ``cancel``)."""
        self.stats["requests"] += 1
        rid = next(self._ids)
        if self.p_lost and self._lose.random() < self.p_lost:
            self.stats["lost"] = self.stats.get("lost", 0) + 1
            return rid
        self.waiting[rid] = (t, reply, self.length(p.key if p is not None else key or b""))
        if not self.ticking:
            self.ticking = True
            self._admit(t)
            sim.at(t + self.step_s(len(self.running)), lambda tt: self._tick(sim, tt))
        return rid

    def cancel(self, rid: int) -> None:
        """The client went away: the request leaves (its tokens so far are wasted work)."""
        if self.waiting.pop(rid, None) is not None:
            self.stats["cancelled"] += 1
            return
        got = self.running.pop(rid, None)
        if got is not None:
            self.stats["cancelled"] += 1
            self.stats["wasted_tokens"] += got[3] - (got[0] - self.steps_done)

    def _admit(self, t: float) -> None:
        while len(self.running) < self.capacity and self.waiting:
            rid = next(iter(self.waiting))
            arrived, reply, n = self.waiting.pop(rid)
            self.running[rid] = (self.steps_done + n, reply, arrived, n)
            heapq.heappush(self.finishing, (self.steps_done + n, rid))
            self.stats["queued_s"] += t - arrived
            self.waits.append((t, t - arrived))

    def _tick(self, sim: Sim, t: float) -> None:
        self.steps_done += 1
        self.batch.append((t, len(self.running)))
        while self.finishing and self.finishing[0][0] <= self.steps_done:
            _, rid = heapq.heappop(self.finishing)
            got = self.running.pop(rid, None)
            if got is None:
                continue  # cancelled
            _, reply, arrived, n = got
            self.stats["served"] += 1
            self.stats["tokens"] += n
            self.stats["service_s"] += t - arrived
            self.services.append((t, t - arrived))
            reply(t, {"status": 200, "failure": "", "latency_s": t - arrived + TRANSIT_S, "retry_after_s": None,
                      "completion_tokens": n, "ratelimit": None})
        self._admit(t)
        if self.running or self.waiting:
            sim.at(t + self.step_s(len(self.running)), lambda tt: self._tick(sim, tt))
        else:
            self.ticking = False


def prompt_of(p: Pending) -> str:
    """The judge prompt ``llm_judge`` would send for ``p`` (the default template)."""
    return render(DEFAULT_TEMPLATE, msgpack.unpackb(p.payload), "")


class Client:
    def __init__(self, sim: Sim, server: Server | BatchServer | DecodeServer | list[Server], n: int, name: str = "c", semaphore: Optional[int] = None,
                 metrics: bool = False, endpoints: Optional[list[dict]] = None, arrival_rate: Optional[float] = None,
                 payload: Optional[Callable[[int], dict]] = None, board: Optional[MemoryBoard] = None,
                 transit: tuple[float, float] = (0.0, 0.0), transit_jitter: float = 0.0, timeout_s: Optional[float] = None,
                 **params) -> None:
        """``semaphore``: hold exactly that many in flight (the best a hand-tuned client does), no adaptation.

        ``metrics``: read the server's running and waiting counts every 0.5 s, as
        ``LoadPoller`` reads vLLM's metrics URL.  ``server`` may be a list, one per
        endpoint; ``endpoints``: their config entries beyond the URL (``priority``, ...).
        ``arrival_rate``: tasks arrive at this rate (per second) instead of all at once.
        ``payload``: task ``i``'s payload (msgpack-packed as the producer does), else 200 bytes.
        ``board``: the notes board this client's gate shares with the others (``peers``), on simulated time.
        ``transit``: (seconds from admission to the worker sending the request, seconds from the worker
        reading the response to the result at the gate): the dispatch, the worker's queue, the result's way
        back, outside the worker's measured ``latency_s`` (which holds the server's time and the network's
        ``TRANSIT_S``); each drawn U(1 - ``transit_jitter``, 1 + ``transit_jitter``) x its mean.  With none
        (the default) the server takes a request as it is admitted, stamped ``TRANSIT_S / 2`` later.
        ``timeout_s``: the worker's deadline per request (``llm_judge``'s ``timeout_s``, without transit): a request
        not answered by then comes back as a timeout at that instant, and the server is told to drop it (``cancel``,
        where it has one: a client that went away); its late answer is discarded.
        """
        if timeout_s is not None:
            assert not any(transit), "timeout_s is simulated without transit"
        self.timeout_s = timeout_s
        self.timeouts: list[float] = []  # when each timeout came back
        self.sim, self.n = sim, n
        self.transit, self.transit_jitter = transit, transit_jitter
        self._transit_rng = random.Random(7)
        self.servers = server if isinstance(server, list) else [server]
        self.server = self.servers[0]
        extra = endpoints or [{} for _ in self.servers]
        eps = [{"url": f"http://sim{i}", **x} for i, x in enumerate(extra)]
        if semaphore:
            eps = [{**e, "max_concurrency": semaphore} for e in eps]
            params["initial_concurrency"] = semaphore
        self.gate = Gate({"model": "m", "endpoints": eps, **params}, board=board)
        if self.gate.peers is not None:  # a name of the simulation's own, not pid + uuid: the order of turns repeats run to run
            self.gate.peers.producer = f"sim-{next(sim.clients):04d}"
        self.done_at: list[float] = []
        self.served: list[tuple[float, int]] = []  # (time, endpoint) of each answer
        self.sends: list[tuple[float, int]] = []  # (time, endpoint) of each request
        self.limits: list[tuple[float, float]] = []  # (time, the endpoint's limit) after each answer
        self.failed: list[str] = []
        self.refused_at: list[float] = []  # when each refusal (429, or 503 with Retry-After) came back
        self.overflow_with_room = 0  # requests sent to a higher tier while a lower tier had room
        self._wake_at = math.inf
        tasks = [Pending(f"{name}{i}".encode(), "llm_judge", {}, msgpack.packb(payload(i)) if payload else b"x" * 200,
                         None, None, 0.0) for i in range(n)]
        if metrics:
            self._poll(sim.t)
        if arrival_rate:
            for i, p in enumerate(tasks):
                sim.at(sim.t + i / arrival_rate, lambda t, p=p: (self.gate.queue.append(p), self.pump(t)))
        else:
            self.gate.queue.extend(tasks)
            self.pump(sim.t)

    def _poll(self, t: float) -> None:
        if not self.finished:
            for e, srv in zip(self.gate.endpoints, self.servers, strict=True):
                e.load = (*srv.counts(), t)
            self.sim.at(t + 0.5, self._poll)

    def pump(self, t: float) -> None:
        sent, failed = self.gate.admit(t, 10**9)
        for p, why in failed:
            p.finish()
            self.failed.append(str(why))
        if any(self.gate.endpoints[self.gate.route(p)].priority > min(e.priority for e in self.gate.endpoints) for p in sent):
            top = max(self.gate.endpoints[self.gate.route(p)].priority for p in sent)
            self.overflow_with_room += sum(1 for e in self.gate.endpoints if e.priority < top and e.free(t, 0.0) > 0)
        for p in sent:
            route = self.gate.route(p)
            self.sends.append((t, route))
            if self.timeout_s is not None:
                self._send_with_deadline(p, route, t)
                continue
            if not any(self.transit):
                # (``latency_s``: as the worker measures it, a refusal's included: request sent -> response read)
                self.servers[route].arrive(self.sim, t + TRANSIT_S / 2, lambda t_end, out, p=p, route=route, t0=t: self.sim.at(
                    t_end + TRANSIT_S / 2, lambda tt: self.answer(p, {**out, "endpoint": route, "latency_s": t_end - t0 + TRANSIT_S / 2}, tt)), p)
                continue
            self.sim.at(t + self._transit(0) + TRANSIT_S / 2, lambda ta, p=p, route=route: self.servers[route].arrive(
                self.sim, ta, lambda t_end, out, p=p, route=route, ta=ta: self.sim.at(
                    t_end + TRANSIT_S / 2 + self._transit(1),
                    lambda tt: self.answer(p, {**out, "endpoint": route, "latency_s": t_end - ta + TRANSIT_S}, tt)), p))
        wake = self.gate.next_wake(t)
        if wake is not None and (wake < self._wake_at or self._wake_at <= t):
            self._wake_at = wake
            self.sim.at(wake, self.pump)

    def _send_with_deadline(self, p: Pending, route: int, t: float) -> None:
        """Send ``p`` at ``t``; whichever comes first, its answer or its deadline (``timeout_s``), settles it."""
        server = self.servers[route]
        open_ = [True]

        def back(tt: float, out: dict) -> None:
            if open_[0]:
                open_[0] = False
                self.answer(p, {**out, "endpoint": route, "latency_s": tt - t}, tt)

        rid = server.arrive(self.sim, t + TRANSIT_S / 2, lambda t_end, out: self.sim.at(t_end + TRANSIT_S / 2, lambda tt: back(tt, out)), p)

        def expire(tt: float) -> None:
            if not open_[0]:
                return
            cancel = getattr(server, "cancel", None)
            if cancel is not None and rid is not None:
                cancel(rid)
            self.timeouts.append(tt)
            back(tt, {"status": 0, "failure": "timeout", "retry_after_s": None, "completion_tokens": None, "ratelimit": None})

        assert self.timeout_s is not None
        self.sim.at(t + self.timeout_s, expire)

    def _transit(self, way: int) -> float:
        mean = self.transit[way]
        return mean * self._transit_rng.uniform(1 - self.transit_jitter, 1 + self.transit_jitter) if self.transit_jitter else mean

    def answer(self, p: Pending, outcome: dict, t: float) -> None:
        route = self.gate.route(p)
        if outcome["status"] in (429, 503):
            self.refused_at.append(t)
        retry = self.gate.settle(p, outcome, None if outcome["status"] == 200 else f"HTTP {outcome['status']} {outcome['failure']}", t)
        self.limits.append((t, self.gate.endpoints[0].limit.limit))
        if retry:
            self.gate.queue.appendleft(p)
        else:
            p.finish()
            if outcome["status"] == 200:
                self.done_at.append(t)
                self.served.append((t, route))
            else:
                self.failed.append(f"{outcome['status']} {outcome['failure']}")
        self.pump(t)

    @property
    def finished(self) -> bool:
        return len(self.done_at) + len(self.failed) >= self.n


class Sim:
    def __init__(self) -> None:
        self.events: list = []
        self.seq = itertools.count()
        self.clients = itertools.count()  # names the clients' producers on a board, in order of creation
        self.t = 0.0

    def at(self, t: float, fn: Callable[[float], None]) -> None:
        heapq.heappush(self.events, (t, next(self.seq), fn))

    def run(self, clients: list[Client], until: float = 3600.0) -> float:
        while self.events and not all(c.finished for c in clients):
            self.t, _, fn = heapq.heappop(self.events)
            if self.t > until:
                break
            fn(self.t)
        return self.t


def run(server: Server, n: int, clients: int = 1, **params) -> tuple[float, list[Client], Server]:
    """(simulated seconds until every client finished, the clients, the server)."""
    sim = Sim()
    cs = [Client(sim, server, n, name=f"c{i}-", **params) for i in range(clients)]
    return sim.run(cs), cs, server


def throughput(done_at: list[float], start: float, end: float) -> float:
    """Answers per second between ``start`` and ``end`` (simulated seconds)."""
    return sum(1 for t in done_at if start <= t < end) / (end - start)


def recovery_s(done_at: list[float], outage: tuple[float, float], share: float = 0.9, window: float = 2.0) -> Optional[float]:
    """Seconds from the end of ``outage`` until a ``window`` of answers runs at ``share`` of the throughput of the 10 s before it.

    ``None`` when it never does within the run.
    """
    before = throughput(done_at, max(0.0, outage[0] - 10.0), outage[0])
    t, last = outage[1], max(done_at, default=0.0)
    while t + window <= last:
        if throughput(done_at, t, t + window) >= share * before:
            return t - outage[1]
        t += 0.1
    return None


def run_staggered(server: Server, n: int, starts: list[float], until: float, sim: Optional[Sim] = None, **params) -> list[Client]:
    """Clients starting at ``starts`` (simulated seconds), each with ``n`` tasks; run ``sim`` (default: a new one) until ``until``."""
    sim = sim or Sim()
    clients: list[Client] = []
    for i, at in enumerate(starts):
        sim.at(at, lambda t, i=i: clients.append(Client(sim, server, n, name=f"c{i}-", **params)))
    while sim.events and sim.events[0][0] <= until:
        t, _, fn = heapq.heappop(sim.events)
        sim.t = t
        fn(t)
    return clients


class SemaphoreClient:
    """A hand-set semaphore: ``concurrency`` in flight; a refused request is retried after its Retry-After
    (else 0.1 s doubling to 2 s) without holding a slot meanwhile, as the bench's aiohttp client does.

    It sends nothing new after ``stop`` (simulated seconds).  Same counters as ``Client``.  ``timeout_s``: a request
    not answered by then is a timeout (the server told to drop it, as ``Client`` does), retried at once, and a task
    fails after ``max_attempts`` timeouts.
    """

    def __init__(self, sim: Sim, server: Server | DecodeServer, n: int, concurrency: int, stop: float = math.inf,
                 timeout_s: Optional[float] = None, max_attempts: int = 4) -> None:
        self.sim, self.server, self.n, self.concurrency, self.stop = sim, server, n, concurrency, stop
        self.timeout_s, self.max_attempts = timeout_s, max_attempts
        self.timeouts: list[float] = []
        self._timed_out: dict[int, int] = {}  # task -> its timeouts so far
        self.done_at: list[float] = []
        self.refused_at: list[float] = []
        self.failed: list[str] = []
        self.in_flight = 0
        self.ready: list[tuple[float, int, int]] = [(sim.t, i, 0) for i in range(n)]  # (not before, task, refusals so far)
        heapq.heapify(self.ready)
        self._wake_at = math.inf
        self.pump(sim.t)

    def pump(self, t: float) -> None:
        while self.in_flight < self.concurrency and self.ready and self.ready[0][0] <= t and t < self.stop:
            _, i, tries = heapq.heappop(self.ready)
            self.in_flight += 1
            if self.timeout_s is not None:
                self._send_with_deadline(i, tries, t)
                continue
            self.server.arrive(self.sim, t + TRANSIT_S / 2, lambda t_end, out, i=i, tries=tries: self.sim.at(
                t_end + TRANSIT_S / 2, lambda tt: self.answer(i, tries, out, tt)))
        if self.ready and self.ready[0][0] > t and (self.ready[0][0] < self._wake_at or self._wake_at <= t):
            self._wake_at = self.ready[0][0]
            self.sim.at(self._wake_at, self.pump)

    def _send_with_deadline(self, i: int, tries: int, t: float) -> None:
        open_ = [True]

        def back(tt: float, out: dict) -> None:
            if open_[0]:
                open_[0] = False
                self.answer(i, tries, out, tt)

        rid = self.server.arrive(self.sim, t + TRANSIT_S / 2, lambda t_end, out: self.sim.at(t_end + TRANSIT_S / 2, lambda tt: back(tt, out)),
                                 key=f"c{i}".encode())

        def expire(tt: float) -> None:
            if not open_[0]:
                return
            cancel = getattr(self.server, "cancel", None)
            if cancel is not None and rid is not None:
                cancel(rid)
            self.timeouts.append(tt)
            open_[0] = False
            self.in_flight -= 1
            k = self._timed_out[i] = self._timed_out.get(i, 0) + 1
            if k >= self.max_attempts:
                self.failed.append("0 timeout")
            else:
                heapq.heappush(self.ready, (-1.0, i, tries))  # (retried first, as the gate puts a retry at the front)
            self.pump(tt)

        assert self.timeout_s is not None
        self.sim.at(t + self.timeout_s, expire)

    def answer(self, i: int, tries: int, out: dict, t: float) -> None:
        self.in_flight -= 1
        if out["status"] == 200:
            self.done_at.append(t)
        else:
            self.refused_at.append(t)
            after = out.get("retry_after_s")
            heapq.heappush(self.ready, (t + (after if after is not None else min(2.0, 0.1 * 2**tries)), i, tries + 1))
        self.pump(t)

    @property
    def finished(self) -> bool:
        return len(self.done_at) + len(self.failed) >= self.n or (self.sim.t >= self.stop and not self.in_flight)
