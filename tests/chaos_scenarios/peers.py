"""Hostile peers: garbage on every socket a peer can reach, and a rogue process speaking the protocol."""

from __future__ import annotations

import contextlib
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import msgpack
import zmq

from qworker import Producer, Result
from qworker.transport import client_wire as cw
from qworker.transport import wire
from tests.chaos_scenarios.measure import Outcome, Timeline, collect
from tests.chaos_scenarios.processes import HB, free_port, start_pool, stop_proc, wait_until


# garbage ---------------------------------------------------------------------------------
def _raw_tcp_garbage(port: int, rng: random.Random) -> None:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(rng.choice([b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\xff" * 10 + b"\x7f", b""]) + rng.randbytes(rng.randint(1, 4096)))


PRODUCER_GARBAGE: list[list[bytes]] = [
    [b"hello"],  # one frame
    [b"a", b"b", b"c"],  # three frames
    [wire.RESULTS, b"\xc1\xc1"],  # not msgpack
    [b"Z", msgpack.packb([])],  # unknown kind
    [wire.RESULTS, msgpack.packb([1, 1, [[b"short", 1.0, None, None, 0.0, None, None]]])],  # bad key
    [wire.READY, msgpack.packb([*wire.STAMP, "x", "p", -1, "h", 5, 0, 0, [], [], {}])],  # negative pid
    wire.encode(wire.Tasks([wire.Task(bytes(16), "noop", {}, b"\x80", None, 1, None)])),  # wrong direction
    wire.encode(wire.Revoke(3)),  # wrong direction
    wire.encode(wire.Ready(*wire.STAMP, "someone-else", "p", 1, "h", 5, 0, 0, [], [])),  # spoofed name
]
SERVICE_GARBAGE: list[list[bytes]] = [
    [b"hello"],
    [b"a", b"b", b"c"],
    [cw.SUBMIT, b"\xc1\xc1"],
    [cw.SUBMIT, msgpack.packb([*wire.STAMP, 1, "noop"])],  # short
    [cw.SUBMIT, msgpack.packb([*wire.STAMP, -1, "noop", None, [{}], None])],  # negative request id
    [cw.SUBMIT, msgpack.packb([*wire.STAMP, 1, 7, None, [{}], None])],  # reward not a string
    [b"?", msgpack.packb([])],
    cw.encode(cw.Resolved("x", 1, [cw.ResolvedRequest(1, [0], [Result()])])),  # wrong direction
    cw.encode(cw.Accepted(1, "x", None, "")),  # wrong direction
    cw.encode(cw.Pong("x", 3)),  # wrong direction
]


def _spray(ctx: zmq.Context, endpoint: str, frames: list[list[bytes]], stop: threading.Event, rng: random.Random, sent: Counter,
           label: str) -> None:
    port = int(endpoint.rsplit(":", 1)[1])
    while not stop.is_set():
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        for _ in range(20):
            s.send_multipart(rng.choice(frames))
            sent[label] += 1
        s.send_multipart([rng.randbytes(rng.randint(1, 64)) for _ in range(rng.randint(1, 4))])  # random frames
        sent[label] += 1
        _raw_tcp_garbage(port, rng)
        sent[label + " raw"] += 1
        time.sleep(0.02)
        s.close()


def _spray_http(port: int, stop: threading.Event, rng: random.Random, sent: Counter) -> None:
    while not stop.is_set():
        _raw_tcp_garbage(port, rng)
        sent["http raw"] += 1
        time.sleep(0.02)


def garbage(tmp: Path, n: int) -> Outcome:
    """``qworker serve`` (its producer bound on tcp too) scoring ``n`` tasks for a Client while
    garbage flows into the producer's ROUTER, the service's client ROUTER and its HTTP front.
    Workers and pools bind nothing (they only connect), so these are every socket a peer can reach."""
    import urllib.request

    from qworker import Client

    listen, bind, http = free_port(), free_port(), free_port()
    err = open(tmp / "serve.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "qworker", "serve", "--listen", f"tcp://127.0.0.1:{listen}", "--bind", f"tcp://127.0.0.1:{bind}",
         "--workers", "2", "--heartbeat", str(HB), "--http", str(http), "--reward", "noop"],
        stdin=subprocess.DEVNULL, stderr=err,
    )
    stop, sent, rng = threading.Event(), Counter(), random.Random(5)
    ctx = zmq.Context()
    try:
        wait_until(lambda: "clients on" in (tmp / "serve.log").read_text(), 60, "qworker serve to start")
        with Client(f"tcp://127.0.0.1:{listen}") as c:
            c.map("noop", [{"warm": i} for i in range(20)], timeout=60)
            sprayers = [
                threading.Thread(target=_spray, args=(ctx, f"tcp://127.0.0.1:{bind}", PRODUCER_GARBAGE, stop, rng, sent, "producer")),
                threading.Thread(target=_spray, args=(ctx, f"tcp://127.0.0.1:{listen}", SERVICE_GARBAGE, stop, rng, sent, "service")),
                threading.Thread(target=_spray_http, args=(http, stop, rng, sent)),
            ]
            for t in sprayers:
                t.start()
            time.sleep(0.5)  # garbage first, then work while it goes on
            futures = c.submit_batch("sleep", [{"ms": 1, "i": i} for i in range(n)])
            tl = Timeline(futures)
            results = collect(c, futures, 120)
            stop.set()
            for t in sprayers:
                t.join(10)
            after = c.map("noop", [{"after": i} for i in range(50)], timeout=60)
            status = c.status()
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/health", timeout=10) as resp:
                health = resp.status
    finally:
        stop.set()
        stop_proc(proc)
        ctx.destroy(linger=0)
        err.close()
    log = (tmp / "serve.log").read_text()
    dropped = status["producer"]["dropped_frames"]
    service_logged = log.count("qworker service: dropped")
    return Outcome("garbage on every socket", "random frames, wrong-direction and malformed messages, raw TCP bytes on the producer's "
                   "ROUTER, the service's client ROUTER and its HTTP port, throughout the run",
                   n, sum(r is None for r in results), None, 0, sum(r is not None and not r.ok for r in results), tl.stall(), 6 * HB,
                   f"sent {sum(sent.values())}; producer counted {dropped} dropped; service logged {service_logged} "
                   f"(counted: {'dropped_frames' in status.get('service', {})})",
                   {"results": results, "after": after, "status": status, "sent": sent, "health": health, "log": log,
                    "alive": proc.returncode in (0, 128 + signal.SIGTERM, None)})  # 143: it stopped on SIGTERM, as asked


ROGUE = """
import sys, time, zmq
from qworker.transport import wire
endpoint, busy = sys.argv[1], sys.argv[2] == "busy"
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.setsockopt(zmq.ROUTING_ID, b"rogue-1")
s.setsockopt(zmq.LINGER, 0)
s.connect(endpoint)
received = 0
def ready():  # 512 credits; "busy" acknowledges what it got and claims to be running it, the other says it got nothing
    s.send_multipart(wire.encode(wire.Ready(*wire.STAMP, "rogue-1", "rogue", 4242, "rogue-host", 512 if busy else 512, received if busy else 0, 0, [], [])))
ready()
last = time.monotonic()
while True:
    if s.poll(100):
        frames = s.recv_multipart()
        if frames[0] == wire.TASKS:
            received += len(wire.WORKER.decode(frames[0], frames[1], max_bytes=1 << 26).tasks)
    if time.monotonic() - last > float(sys.argv[3]):
        ready()
        last = time.monotonic()
"""


def rogue_peer(tmp: Path, n: int, *, busy: bool = False, task_timeout_s: float = 2.0, wait_s: float = 120) -> Outcome:
    """A process speaking the protocol over TCP: READY offering 512 credits, then only heartbeats,
    beside a real pool.  ``busy``: it acknowledges the tasks and claims to be running them."""
    script = tmp / "rogue.py"
    script.write_text(ROGUE)
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0, heartbeat_s=HB, task_timeout_s=task_timeout_s) as p:
        rogue = subprocess.Popen([sys.executable, str(script), p.endpoint, "busy" if busy else "idle", str(HB)])
        pool = None
        try:
            p.wait_for_workers(1, timeout=60)  # the rogue first: it is offered work before anyone else
            pool = start_pool(p.endpoint, "--workers", "1", "--id", "honest", "--timeout", str(task_timeout_s))
            futures = p.submit_batch("sleep", [{"ms": 1, "i": i} for i in range(n)])
            tl = Timeline(futures)
            results = collect(p, futures, wait_s)
            status = p.status()
        finally:
            rogue.kill()
            rogue.wait()
            if pool is not None:
                stop_proc(pool)
    row = next((w for pl in status["pools"] for w in pl["workers"] if w["worker"] == "rogue-1"), {})
    return Outcome(f"rogue peer ({'claims busy' if busy else 'READY 512, then heartbeats'})",
                   "a process over TCP sending READY with 512 credits, then " + (
                       "heartbeats acknowledging the tasks as running, forever" if busy else "only heartbeats, beside a real pool"),
                   n, sum(r is None for r in results), None, 0, sum(r is not None and not r.ok for r in results), tl.stall(),
                   4 * 3 * HB + 1.0,
                   f"rogue quarantined {row.get('quarantined')}, holding {row.get('in_flight')}; max attempts "
                   f"{max((r.attempts for r in results if r is not None), default=0)}",
                   {"results": results, "status": status, "rogue": row})
