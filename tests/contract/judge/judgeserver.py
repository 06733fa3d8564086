"""A second judge server model: a real asyncio HTTP server whose capacity follows a schedule over wall-clock time.

Built apart from ``judgesim`` (simulated time, no sockets) and ``qworker.testing.mockjudge`` (threads, a
handler per connection): one asyncio event loop owns every slot, so what it counts in flight is
exact at each instant.  Standard library only: it runs as ``python tests/contract/judge/judgeserver.py``.

It serves ``POST /v1/chat/completions`` on 127.0.0.1 (the body ``llm_judge`` sends: ``model``,
``messages``; the reply is a chat completion whose last line is ``Score: N``, N in 0..10 from a hash
of the last message, with ``usage.completion_tokens``), HTTP/1.1 with keep-alive, and behaves as
real servers do:

* **slots**: ``capacity`` requests in service at once (a provider's concurrency cap, or vLLM's
  ``--max-num-seqs`` batch).  ``Schedule.steps`` move it at given seconds while requests are in
  flight: after a step down, those in service finish and nothing new starts until fewer than the new
  capacity are busy; after a step up, waiting requests start at once;
* **a second tenant** (``Schedule.tenant`` = (start, end, share)): from ``start`` it keeps
  ``share`` x the capacity of requests of its own outstanding, taking each freed slot before any
  newcomer (a client that retries at once), in queue mode in the same FIFO as everyone; at ``end`` it
  sends no more and its requests drain;
* ``mode="reject"``: a request finding every slot busy gets 429 after a delay drawn uniformly from
  ``refusal_latency`` seconds (gateways queue before refusing: 50-300 ms), with ``Retry-After`` in
  whole seconds (at least 1, rounded up from the next slot's expected release), or also
  ``retry-after-ms`` (``retry_after="ms"``), or neither (``"none"``);
  ``mode="queue"``: it waits in FIFO order and is never refused (vLLM's scheduler);
* **latency**: lognormal with mean ``latency`` seconds and ``sigma``, times
  ``1 + load_slope x busy / capacity`` (busy when it starts, itself included): slower under load;
* ``GET /metrics``: ``vllm:num_requests_running`` (the tenant's included) and
  ``vllm:num_requests_waiting`` in Prometheus text, as vLLM names them;
* ``GET /ledger``: its own account (JSON), see ``Ledger.report``; ``GET /health``: its clock.

The schedule's clock starts at the first chat request (``t = 0``), so a client that takes seconds
to start meets the same schedule as one that starts at once.  ``horizon`` seconds later the
ledger stops counting; the server keeps serving at the last capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import random
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["Schedule", "JudgeServer", "ServerThread", "main"]

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
BIN_S = 0.25  # the ledger's time bins (seconds)
SAMPLE_S = 0.1  # how often in-flight is sampled (seconds)


@dataclass(frozen=True)
class Schedule:
    """Capacity over seconds since the first request: ``capacity`` from 0, ``steps`` = ((at, capacity), ...)
    after; ``tenant`` = (start, end, share of the capacity it keeps outstanding) or None; ``horizon``:
    the seconds the ledger counts."""

    capacity: int
    steps: tuple[tuple[float, int], ...] = ()
    tenant: Optional[tuple[float, float, float]] = None
    horizon: float = 30.0

    def __post_init__(self) -> None:
        if self.capacity < 1 or any(c < 1 or at <= 0 for at, c in self.steps):
            raise ValueError(f"capacities must be >= 1 and steps after 0 s: {self.capacity}, {self.steps}")
        if self.tenant and not (0 <= self.tenant[0] < self.tenant[1] and 0 < self.tenant[2] < 1):
            raise ValueError(f"tenant (start, end, share) needs start < end and 0 < share < 1: {self.tenant}")

    def capacity_at(self, t: float) -> int:
        cap = self.capacity
        for at, c in sorted(self.steps):
            if t >= at:
                cap = c
        return cap

    def changes(self) -> list[float]:
        """The seconds at which capacity or tenant change, within the horizon, in order."""
        times = {at for at, _ in self.steps} | (set(self.tenant[:2]) if self.tenant else set())
        return sorted(t for t in times if 0 < t < self.horizon)

    def phases(self) -> list[tuple[float, float]]:
        bounds = [0.0, *self.changes(), self.horizon]
        return list(zip(bounds, bounds[1:], strict=False))


@dataclass
class Ledger:
    """What the server counted, by phase (between the schedule's changes) and by ``BIN_S`` bins."""

    schedule: Schedule
    served: list[int] = field(default_factory=list)  # the clients' requests answered 200, by phase (at the answer)
    refused: list[int] = field(default_factory=list)  # 429s, by phase (at arrival)
    tenant_served: list[int] = field(default_factory=list)
    service_s: list[float] = field(default_factory=list)  # service seconds of requests started in the phase (tenant's too)
    services: list[int] = field(default_factory=list)
    tenant_slot_s: list[float] = field(default_factory=list)  # slot-seconds the tenant held
    bins: dict = field(default_factory=dict)  # bin index -> [served, refused]
    in_flight: list[tuple[float, int, int, int, int]] = field(default_factory=list)  # (t, clients', tenant's, waiting, capacity)

    def __post_init__(self) -> None:
        n = len(self.schedule.phases())
        self.served, self.refused, self.tenant_served = [0] * n, [0] * n, [0] * n
        self.service_s, self.services, self.tenant_slot_s = [0.0] * n, [0] * n, [0.0] * n

    def phase(self, t: float) -> Optional[int]:
        for k, (a, b) in enumerate(self.schedule.phases()):
            if a <= t < b:
                return k
        return None

    def count(self, what: str, t: float, amount: float = 1) -> None:
        k = self.phase(t)
        if k is None:
            return
        getattr(self, what)[k] += amount
        if what in ("served", "refused"):
            row = self.bins.setdefault(int(t / BIN_S), [0, 0])
            row[what == "refused"] += 1

    def hold(self, a: float, b: float, slots: int) -> None:
        """The tenant held ``slots`` from ``a`` to ``b`` seconds: split across phases."""
        for k, (lo, hi) in enumerate(self.schedule.phases()):
            overlap = min(b, hi) - max(a, lo)
            if overlap > 0:
                self.tenant_slot_s[k] += slots * overlap

    def report(self) -> dict:
        """Per phase: ``start``/``end`` s, ``capacity``, ``served``, ``refused`` (429s), ``tenant_served``,
        ``mean_service_s``, ``allowed`` (answers the clients could have had: (capacity x seconds - the
        tenant's slot-seconds) / the mean service time of what started then), ``served_share``
        (served / allowed); ``bins`` [[t, served, refused], ...] every ``BIN_S`` s; ``in_flight`` samples."""
        phases = []
        for k, (a, b) in enumerate(self.schedule.phases()):
            mean = self.service_s[k] / self.services[k] if self.services[k] else None
            cap = self.schedule.capacity_at(a)
            allowed = (cap * (b - a) - self.tenant_slot_s[k]) / mean if mean else None
            phases.append({"start": a, "end": b, "capacity": cap, "served": self.served[k], "refused": self.refused[k],
                           "tenant_served": self.tenant_served[k], "mean_service_s": mean, "allowed": allowed,
                           "tenant_mean_slots": self.tenant_slot_s[k] / (b - a),
                           "served_share": self.served[k] / allowed if allowed else None})
        bins = [[round(i * BIN_S, 3), s, r] for i, (s, r) in sorted(self.bins.items())]
        return {"phases": phases, "bins": bins, "bin_s": BIN_S, "in_flight": [list(x) for x in self.in_flight]}


class JudgeServer:
    """The server's state, owned by one event loop; ``serve()`` listens until ``stop()`` or ``duration`` seconds."""

    def __init__(self, *, schedule: Schedule, mode: str = "reject", latency: float = 0.3, sigma: float = 0.6,
                 load_slope: float = 0.2, refusal_latency: tuple[float, float] = (0.05, 0.3), retry_after: str = "s",
                 seed: int = 1, port: int = 0) -> None:
        if mode not in ("reject", "queue") or retry_after not in ("s", "ms", "none"):
            raise ValueError(f"mode must be reject or queue, retry_after s, ms or none: {mode!r}, {retry_after!r}")
        self.schedule, self.mode, self.latency, self.sigma = schedule, mode, latency, sigma
        self.load_slope, self.refusal_latency, self.retry_after, self.port = load_slope, refusal_latency, retry_after, port
        self.rng = random.Random(seed)
        self.ledger = Ledger(schedule)
        self.t0: Optional[float] = None  # monotonic seconds of the first chat request
        self.running = 0  # the clients' requests in service
        self.tenant_running = 0
        self.tenant_since = 0.0  # when tenant_running last changed (schedule seconds)
        self.waiting: deque = deque()  # queue mode: futures of the clients' requests, or None for a tenant's
        self.ends: dict[int, float] = {}  # id -> expected end (monotonic) of each request in service
        self.ids = 0
        self.requests = 0
        self._stop: Optional[asyncio.Event] = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()  # open connections, closed on stopping

    # ---- the schedule ----
    def now(self) -> float:
        """Seconds since the first chat request (0 before it)."""
        return 0.0 if self.t0 is None else time.monotonic() - self.t0

    def capacity(self) -> int:
        return self.schedule.capacity_at(self.now())

    def busy(self) -> int:
        return self.running + self.tenant_running

    def tenant_target(self) -> int:
        tn = self.schedule.tenant
        t = self.now()
        if self.t0 is None or not tn or not tn[0] <= t < tn[1]:
            return 0
        return max(1, round(tn[2] * self.schedule.capacity_at(tn[0])))

    def _start_clock(self) -> None:
        loop = asyncio.get_running_loop()
        self.t0 = time.monotonic()
        for t in self.schedule.changes():
            loop.call_at(loop.time() + t, self._fill)
        if self.schedule.tenant:
            loop.call_at(loop.time() + self.schedule.tenant[0], self._tenant_arrives)
        self._spawn(self._sample())

    async def _sample(self) -> None:
        while self.now() < self.schedule.horizon:
            self.ledger.in_flight.append((round(self.now(), 3), self.running, self.tenant_running, len(self.waiting), self.capacity()))
            await asyncio.sleep(SAMPLE_S)

    def _tenant_arrives(self) -> None:
        if self.mode == "queue":
            self.waiting.extend([None] * self.tenant_target())
        self._fill()

    def _set_tenant(self, running: int) -> None:
        t = self.now()
        self.ledger.hold(self.tenant_since, t, self.tenant_running)
        self.tenant_running, self.tenant_since = running, t

    def _fill(self) -> None:
        """Give free slots to what waits: the FIFO in queue mode; in reject mode the tenant's outstanding requests."""
        while self.busy() < self.capacity():
            if self.waiting:
                fut = self.waiting.popleft()
                if fut is None:
                    if self.tenant_target():  # a tenant that has left sends nothing more
                        self._start_tenant()
                elif not fut.done():
                    self.running += 1
                    fut.set_result(None)
            elif self.mode == "reject" and self.tenant_running < self.tenant_target():
                self._start_tenant()
            else:
                break

    def _start_tenant(self) -> None:
        self._set_tenant(self.tenant_running + 1)
        self._spawn(self._tenant_request())

    async def _tenant_request(self) -> None:
        rid, s = self._service()
        t = self.now()
        await asyncio.sleep(s)
        self.ends.pop(rid, None)
        self._set_tenant(self.tenant_running - 1)
        self.ledger.count("tenant_served", t + s)
        if self.mode == "queue" and self.tenant_target() and sum(x is None for x in self.waiting) + self.tenant_running < self.tenant_target():
            self.waiting.append(None)
        self._fill()

    def _service(self) -> tuple[int, float]:
        """A slot just taken (counted in ``busy``): its id and service seconds, entered in the ledger."""
        mean = self.latency * (1.0 + self.load_slope * self.busy() / self.capacity())
        s = mean * math.exp(self.sigma * self.rng.gauss(0.0, 1.0) - self.sigma**2 / 2) if self.sigma else mean
        self.ids += 1
        self.ends[self.ids] = time.monotonic() + s
        self.ledger.count("service_s", self.now(), s)
        self.ledger.count("services", self.now())
        return self.ids, s

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- one chat request ----
    async def chat(self, doc: dict) -> tuple[int, dict, bytes]:
        if self.t0 is None:
            self._start_clock()
        self.requests += 1
        if self.mode == "reject" and self.busy() >= self.capacity():
            self.ledger.count("refused", self.now())
            wait = max(0.001, min(self.ends.values(), default=time.monotonic() + self.latency) - time.monotonic())
            headers = {}
            if self.retry_after != "none":
                headers["Retry-After"] = str(max(1, math.ceil(wait)))
            if self.retry_after == "ms":
                headers["retry-after-ms"] = str(max(1, round(wait * 1000)))
            await asyncio.sleep(self.rng.uniform(*self.refusal_latency))
            return 429, headers, json.dumps({"error": {"message": "too many requests", "type": "rate_limit"}}).encode()
        if self.busy() < self.capacity() and not self.waiting:
            self.running += 1
        else:  # queue mode: wait for a slot (``_fill`` counts it as running when it gives it)
            fut = asyncio.get_running_loop().create_future()
            self.waiting.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self.running -= 1
                    self._fill()
                raise
        rid, s = self._service()
        try:
            await asyncio.sleep(s)
        finally:
            self.ends.pop(rid, None)
            self.running -= 1
            self._fill()
        self.ledger.count("served", self.now())
        content = str(doc["messages"][-1].get("content", "")) if doc["messages"] and isinstance(doc["messages"][-1], dict) else ""
        score = hashlib.sha256(content.encode()).digest()[0] % 11
        tokens = 8 + self.rng.randrange(17)
        body = {"id": f"chatcmpl-{rid}", "object": "chat.completion", "created": int(time.time()), "model": str(doc.get("model", "")),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": f"Judged.\nScore: {score}"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(content) // 4, "completion_tokens": tokens, "total_tokens": len(content) // 4 + tokens}}
        return 200, {}, json.dumps(body).encode()

    def metrics(self) -> bytes:
        return ("# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{engine="0",model_name="judge"}} {float(self.busy())}\n'
                "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
                "# TYPE vllm:num_requests_waiting gauge\n"
                f'vllm:num_requests_waiting{{engine="0",model_name="judge"}} {float(len(self.waiting))}\n').encode()

    # ---- HTTP ----
    async def _route(self, method: str, path: str, body: bytes) -> tuple[int, dict, bytes]:
        if method == "POST" and path == "/v1/chat/completions":
            try:
                doc = json.loads(body)
                if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
                    raise ValueError("no messages list")
            except ValueError as exc:
                return 400, {}, json.dumps({"error": {"message": f"bad request: {exc}"}}).encode()
            return await self.chat(doc)
        if method == "GET" and path == "/metrics":
            return 200, {"Content-Type": "text/plain; version=0.0.4"}, self.metrics()
        if method == "GET" and path == "/ledger":
            self._set_tenant(self.tenant_running)  # the tenant's slot-seconds up to now
            return 200, {}, json.dumps({**self.ledger.report(), "requests": self.requests, "started": self.t0 is not None,
                                        "now_s": self.now()}).encode()
        if method == "GET" and path == "/health":  # the schedule's clock: seconds since the first chat request
            return 200, {}, json.dumps({"started": self.t0 is not None, "now_s": self.now(), "horizon_s": self.schedule.horizon}).encode()
        return 404, {}, json.dumps({"error": {"message": f"no route {method} {path}"}}).encode()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                if len(parts) != 3:
                    return
                method, path = parts[0], parts[1].split("?", 1)[0]
                try:
                    length = int(headers.get("content-length", "0"))
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_BODY_BYTES or "chunked" in headers.get("transfer-encoding", ""):
                    await self._write(writer, 400, {}, b'{"error": {"message": "a body needs a Content-Length under 16 MiB"}}', close=True)
                    return
                body = await reader.readexactly(length) if length else b""
                status, extra, out = await self._route(method, path, body)
                close = headers.get("connection", "").lower() == "close" or parts[2] == "HTTP/1.0"
                await self._write(writer, status, extra, out, close)
                if close:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, status: int, headers: dict, body: bytes, close: bool) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}.get(status, "Error")
        head = {"Content-Type": "application/json", **headers, "Content-Length": str(len(body)),
                "Connection": "close" if close else "keep-alive"}
        writer.write(f"HTTP/1.1 {status} {reason}\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in head.items()).encode()
                     + b"\r\n" + body)
        await writer.drain()

    async def serve(self, duration: float, ready: Optional[threading.Event] = None) -> None:
        """Listen on 127.0.0.1:``port`` (0: any free port, then in ``self.port``) for at most ``duration`` seconds."""
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", self.port, limit=MAX_HEADER_BYTES, backlog=1024)
        self.port = server.sockets[0].getsockname()[1]
        if ready is not None:
            ready.set()
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), duration)
        finally:
            server.close()
            for writer in list(self._writers):  # keep-alive connections would hold wait_closed open (Python >= 3.12)
                writer.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 5.0)

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()


class ServerThread:
    """A ``JudgeServer`` on an event loop in a thread of this process, for tests: ``with ServerThread(...) as s: s.url``.

    It stops on leaving the block, or after ``duration`` seconds whatever happens."""

    def __init__(self, *, duration: float = 120.0, **kw) -> None:
        self.server = JudgeServer(**kw)
        self.duration = duration
        self._ready = threading.Event()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self.server.serve(self.duration, self._ready))
        finally:
            self._loop.close()

    def __enter__(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the judge server did not start listening within 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.server.stop)
        self._thread.join(30)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/v1/chat/completions"


def _numbers(text: str, count: int, flag: str) -> list[float]:
    parts = text.split(":")
    if len(parts) != count:
        raise ValueError(f"{flag} {text!r}: needs {count} numbers separated by ':'")
    return [float(x) for x in parts]


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="0: a free port, printed on the first line of stdout")
    ap.add_argument("--duration", type=float, default=120.0, help="exit after this many seconds (bounded: at most 3600)")
    ap.add_argument("--capacity", type=int, default=64)
    ap.add_argument("--step", action="append", default=[], metavar="AT:CAPACITY", help="capacity CAPACITY from AT s (repeatable)")
    ap.add_argument("--tenant", metavar="START:END:SHARE", help="a second tenant keeps SHARE of the capacity from START to END s")
    ap.add_argument("--horizon", type=float, default=30.0, help="seconds of schedule the ledger counts")
    ap.add_argument("--mode", choices=("reject", "queue"), default="reject")
    ap.add_argument("--latency", type=float, default=0.3, help="mean service seconds at no load")
    ap.add_argument("--sigma", type=float, default=0.6, help="lognormal sigma (0: fixed)")
    ap.add_argument("--load-slope", type=float, default=0.2, help="service x (1 + this x busy / capacity)")
    ap.add_argument("--refusal-latency", default="0.05:0.3", metavar="LO:HI", help="a 429 comes back after U(LO, HI) s")
    ap.add_argument("--retry-after", choices=("s", "ms", "none"), default="s")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        steps = tuple((at, int(c)) for at, c in (_numbers(s, 2, "--step") for s in args.step))
        tenant = tuple(_numbers(args.tenant, 3, "--tenant")) if args.tenant else None
        lo, hi = _numbers(args.refusal_latency, 2, "--refusal-latency")
        schedule = Schedule(capacity=args.capacity, steps=steps, tenant=tenant, horizon=args.horizon)  # type: ignore[arg-type]
        if not 0 < args.duration <= 3600:
            raise ValueError(f"--duration {args.duration}: must be in (0, 3600] seconds")
        server = JudgeServer(schedule=schedule, mode=args.mode, latency=args.latency, sigma=args.sigma, load_slope=args.load_slope,
                             refusal_latency=(lo, hi), retry_after=args.retry_after, seed=args.seed, port=args.port)
    except ValueError as exc:
        print(f"judgeserver: {exc}", file=sys.stderr)
        return 2

    async def run() -> None:
        ready = threading.Event()
        task = asyncio.ensure_future(server.serve(args.duration, ready))
        while not ready.is_set() and not task.done():
            await asyncio.sleep(0.01)
        if ready.is_set():
            print(f"listening on http://127.0.0.1:{server.port}", flush=True)
        await task

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
