"""The pool supervisor behind ``qworker-pool`` and ``Producer(local_workers=N)``.

It spawns N worker processes that connect to a producer, and it owns their
liveness: it reports them to the producer every ``heartbeat_s`` and at once when
one is lost, so the producer redelivers that worker's tasks without waiting.
It enforces hard timeouts from each worker's shared-memory slot (SIGKILL past the
deadline: a hung reward may hold the GIL, so nothing inside the worker can),
respawns crashed workers (backing off 0.5 s -> 32 s when they crash-loop),
recycles a worker over ``max_rss_mb`` (SIGTERM: it hands back queued tasks), and
on SIGTERM or SIGINT drains: workers finish their running task, hand back the
rest, and leave; stragglers are killed after ``drain_timeout_s``.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional

import psutil
import zmq

from .._errors import ErrorKind
from ..config.options import PoolOptions
from ..rewards._sandbox import kernel_problem
from ..transport import wire
from ..transport.sockets import Redialer, make_socket, runtime_dir
from .slot import TaskSlot

log = logging.getLogger("qworker.pool")

WATCHDOG_TICK_S = 0.1
FAST_CRASH_S = 2.0  # a worker that dies younger than this counts toward crash-loop backoff
SILENT_BEATS = 3  # a worker that has not beaten for this many heartbeats, and uses no CPU, is frozen
MIN_CPU_SHARE = 0.05  # "uses no CPU": less than this share of one core since the last check
HEARD_PER_TURN = 64  # frames from the producer read per turn of the pool's loop (it only ever sends a refusal)
UNREACHED_BEATS = 10  # heartbeats without a producer's connection before the pool says so (once, until one takes it)


@dataclass
class _Child:
    index: int
    slot: TaskSlot
    generation: int = 0
    restarts: int = 0
    proc: Optional[subprocess.Popen] = None
    ps: Optional[psutil.Process] = None  # the same process, for its CPU and memory (made once per spawn)
    pidfd: Optional[int] = None
    worker_id: str = ""
    started: float = 0.0
    kill_reason: Optional[wire.Fault] = None  # set when we stopped it on purpose
    sigkilled: bool = False  # killed for its task's deadline, or as unresponsive: the watchdog leaves it be
    killed_task: Optional[bytes] = None
    fast_crashes: int = 0
    respawn_at: Optional[float] = None
    rss_mb: float = 0.0
    cpu_s: float = 0.0  # its CPU time at the last liveness check
    cpu_at: float = 0.0  # when that was


def _ended(code: int) -> str:
    """Why a worker this pool did not stop ended, from its exit status (``Popen.returncode``)."""
    if code == 0:  # a worker returns 0 once it has drained on a SIGTERM: not a crash
        return "exited with code 0 (a SIGTERM this pool did not send, or a reward that ended the process)"
    return f"crashed: exit code {code}"


class Pool:
    """A pool supervisor; ``run()`` blocks until it is asked to stop and has drained."""

    def __init__(self, options: PoolOptions) -> None:
        if not options.connect:
            raise ValueError("a pool needs the producer's endpoint (connect)")
        self.options = options
        self.n_workers = options.workers or os.cpu_count() or 1
        self.host = socket.gethostname()
        self.pool_id = options.pool_id or f"{self.host}-{os.getpid()}"
        self.state: wire.PoolState = "running"
        self.lost: list[wire.Lost] = []
        self._stop_requested = False
        self.refused: Optional[str] = None  # why the producer refused this pool (another wire protocol); it then stops
        self.reached = False  # a producer holds this pool's connection (set by its socket's monitor thread, ``_on_link``)
        self._link_changed = time.monotonic()  # when ``reached`` last changed
        self._said_unreached = False  # the warning that no producer has taken the connection was logged

    # lifecycle --------------------------------------------------------------
    def request_stop(self, *_: object) -> None:
        self._stop_requested = True

    def run(self) -> int:
        self.ctx = zmq.Context(io_threads=1)
        self.sock = make_socket(
            self.ctx, zmq.DEALER, connect=self.options.connect, identity=f"pool:{self.pool_id}".encode(), linger_ms=1000,
            curve=self.options.curve(), on_link=self._on_link,
        )
        self.redial = Redialer(self.sock, str(self.options.connect))
        slot_dir = runtime_dir()
        tag = secrets.token_hex(3)
        self.children = [
            _Child(i, TaskSlot(os.path.join(slot_dir, f"slot-{os.getpid()}-{tag}-{i}"), create=True))
            for i in range(self.n_workers)
        ]
        for child in self.children:
            self._spawn(child)
        log.info("pool %s: %d workers connecting to %s, frame limit %d bytes (--max-message-bytes: the producer fits its "
                 "messages to it)", self.pool_id, self.n_workers, self.options.connect, self.options.max_message_bytes)
        problem = kernel_problem()
        if problem is not None:  # said once, at start; each code_tests task then fails with the same line
            log.warning("pool %s: code_tests will refuse to run here: %s", self.pool_id, problem)
        try:
            self._supervise()
            self._drain()
        finally:
            for child in self.children:
                if child.proc is not None and child.proc.poll() is None:
                    child.proc.kill()
                child.slot.close()
                child.slot.unlink()
            self.sock.close(linger=1000)
            self.ctx.term()
        return 0

    def _spawn(self, child: _Child) -> None:
        child.generation += 1
        child.worker_id = f"{self.pool_id}/w{child.index}.{child.generation}"
        worker = self.options.worker(worker_id=child.worker_id, pool_id=self.pool_id, slot_path=child.slot.path, parent_pid=os.getpid())
        cmd = [sys.executable, "-m", "qworker.host.worker", *worker.to_argv()]
        child.slot.reset()
        child.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        child.ps = psutil.Process(child.proc.pid)
        child.cpu_s, child.cpu_at = 0.0, time.monotonic()
        child.pidfd = os.pidfd_open(child.proc.pid)
        child.started = time.monotonic()
        child.kill_reason = None
        child.sigkilled = False
        child.killed_task = None
        child.respawn_at = None
        log.info("pool %s: started %s (pid %d)", self.pool_id, child.worker_id, child.proc.pid)

    def _report(self) -> None:
        now = time.monotonic()
        workers = []
        for c in self.children:
            alive = c.proc is not None and c.proc.poll() is None
            running = c.slot.read() if alive else None
            workers.append(wire.WorkerReport(
                c.worker_id, c.proc.pid if c.proc else 0, alive,
                max(0.0, now - running[1]) if running else 0.0, c.restarts, c.rss_mb,
            ))
        msg = wire.PoolReport(*wire.STAMP, self.pool_id, self.host, os.getpid(), self.state, workers, self.lost)
        try:  # never block: with no producer connected (down, or refusing our key) a report just waits for the next
            self.sock.send_multipart(wire.encode(msg), flags=zmq.NOBLOCK)
        except zmq.Again:
            log.debug("pool %s: no producer to report to", self.pool_id)
            self.redial.no_peer()  # a producer that refused our key may admit it later
            return
        self.lost = []

    # supervision ------------------------------------------------------------
    def _supervise(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        for c in self.children:
            poller.register(c.pidfd, zmq.POLLIN)
        next_report = 0.0
        while not self._stop_requested:
            events = poller.poll(int(WATCHDOG_TICK_S * 1000))
            now = time.monotonic()
            for fd, _ in events:
                if fd is self.sock:
                    self._hear()
                    continue
                child = next((c for c in self.children if c.pidfd == fd), None)
                if child is not None:
                    poller.unregister(fd)
                    self._reap(child)
            self._watchdog(now)
            self._say_unreached(now)
            respawned = False
            for c in self.children:
                if c.proc is None and c.respawn_at is not None and now >= c.respawn_at:
                    self._spawn(c)
                    poller.register(c.pidfd, zmq.POLLIN)
                    respawned = True
            if now >= next_report or respawned:
                self._check_memory()
                self._check_frozen(now)
                next_report = now + self.options.heartbeat_s
                self._report()
            elif self.lost:
                self._report()
            if self.options.parent_pid is not None and os.getppid() != self.options.parent_pid:  # reparented: it is gone
                log.warning("pool %s: parent %d is gone; stopping", self.pool_id, self.options.parent_pid)
                self._stop_requested = True

    def _hear(self) -> None:
        """Read what the producer sent: only ever a ``Refused`` (it speaks another wire protocol, or it is a reward
        service's client endpoint), which stops the pool with ``refused`` set.  At most ``HEARD_PER_TURN`` frames a turn: what is left makes the next turn come at once."""
        for _ in range(HEARD_PER_TURN):
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                if len(frames) != 2:
                    raise wire.WireError(f"expected 2 frames, got {len(frames)}")
                msg = wire.SUPERVISOR.decode(frames[0], frames[1], max_bytes=1 << 16)
            except wire.WireError as exc:
                log.warning("pool %s: dropped a bad frame from the producer: %s", self.pool_id, exc)
                continue
            if self.refused is None:
                connect = self.options.connect or ""  # set: checked at start
                who = wire.refuser(msg, connect, f"the producer at {connect}")  # what refused, if it says
                self.refused = wire.refused_line(who, "this pool", msg)
                self._stop_requested = True

    def _on_link(self, up: bool) -> None:
        """From the socket's monitor thread: a producer took this pool's connection (True: the handshake, CURVE's
        included, succeeded), or that link dropped (False)."""
        if up != self.reached:
            self._link_changed = time.monotonic()  # before ``reached``: a reader that sees the new state sees its time
            self.reached = up

    def _say_unreached(self, now: float) -> None:
        """Once ``UNREACHED_BEATS`` heartbeats have passed with no producer holding this pool's connection, say so
        (once, until one takes it; then say that): a pool pointed at the wrong address waits for ever, as it must for
        a producer that starts later, but not in silence."""
        if self.reached:
            if self._said_unreached:
                self._said_unreached = False
                log.info("pool %s: reached the producer at %s", self.pool_id, self.options.connect)
            return
        if self._said_unreached or now - self._link_changed < UNREACHED_BEATS * self.options.heartbeat_s:
            return
        self._said_unreached = True
        log.warning("pool %s: no producer at %s has taken this pool's connection for %.0f s (is one running there, bound "
                    "to that address and port? one with CURVE must admit this pool's key); still trying",
                    self.pool_id, self.options.connect, now - self._link_changed)

    def _reap(self, child: _Child) -> None:
        assert child.proc is not None and child.pidfd is not None
        code = child.proc.wait()
        os.close(child.pidfd)
        lived = time.monotonic() - child.started
        reason = child.kill_reason or wire.Fault(ErrorKind.WORKER_LOST, _ended(code))
        task = child.killed_task
        if task is None:
            running = child.slot.read()
            task = running[0] if running else None
        lost = wire.Lost(child.worker_id, reason, task)
        log.warning("pool %s: %s (pid %d) ended after %.1f s: %s", self.pool_id, child.worker_id, child.proc.pid, lived, lost.why)
        self.lost.append(lost)
        child.proc, child.pidfd = None, None
        child.restarts += 1
        child.fast_crashes = child.fast_crashes + 1 if (lived < FAST_CRASH_S and child.kill_reason is None) else 0
        delay = 0.0 if child.fast_crashes <= 1 else min(32.0, 0.5 * 2 ** (child.fast_crashes - 2))
        if delay:
            log.warning("pool %s: worker slot %d is crash-looping; respawning in %.1f s", self.pool_id, child.index, delay)
        child.respawn_at = time.monotonic() + delay

    def _watchdog(self, now: float) -> None:
        for c in self.children:
            if c.proc is None or c.sigkilled:
                continue  # gone, or already SIGKILLed; a worker being recycled still has its deadline enforced
            running = c.slot.read()
            if running is not None and now >= running[2]:
                key, started, deadline = running
                c.kill_reason = wire.Fault(ErrorKind.TIMEOUT, f"reward ran past its {deadline - started:.3g} s hard limit")
                c.killed_task, c.sigkilled = key, True
                log.warning("pool %s: killing %s: task %s passed its %.3g s limit", self.pool_id, c.worker_id, key.hex(), deadline - started)
                c.proc.kill()

    def _check_frozen(self, now: float) -> None:
        """Kill a worker that stopped beating and uses no CPU: stopped (SIGSTOP, a debugger),
        frozen or swapped out.  Its tasks are redelivered; a worker busy in C code that holds
        the GIL does not beat either, but it uses CPU, and its deadline is the watchdog's."""
        for c in self.children:
            if c.proc is None or c.ps is None or c.kill_reason is not None:
                continue
            last = c.slot.last_beat()
            try:
                times = c.ps.cpu_times()
            except psutil.Error:
                continue
            cpu = times.user + times.system
            share = (cpu - c.cpu_s) / max(now - c.cpu_at, 1e-3)
            c.cpu_s, c.cpu_at = cpu, now
            if last == 0.0 or now - last <= SILENT_BEATS * self.options.heartbeat_s or share >= MIN_CPU_SHARE:
                continue  # still starting, beating, or computing
            running = c.slot.read()
            c.kill_reason = wire.Fault(ErrorKind.WORKER_LOST,
                                       f"unresponsive: no heartbeat for {now - last:.1f} s and no CPU use (stopped, frozen or swapped out)")
            c.killed_task, c.sigkilled = (running[0] if running else None), True
            log.warning("pool %s: killing %s: %s", self.pool_id, c.worker_id, c.kill_reason.detail)
            c.proc.kill()

    def _check_memory(self) -> None:
        for c in self.children:
            if c.proc is None or c.ps is None:
                continue
            try:
                c.rss_mb = c.ps.memory_info().rss / 2**20
            except psutil.Error:
                continue
            if self.options.max_rss_mb is not None and c.rss_mb > self.options.max_rss_mb and c.kill_reason is None:
                c.kill_reason = wire.Fault(ErrorKind.WORKER_LOST, f"recycled: rss {c.rss_mb:.0f} MB over the {self.options.max_rss_mb:.0f} MB limit")
                log.warning("pool %s: recycling %s: %s", self.pool_id, c.worker_id, c.kill_reason.detail)
                c.proc.terminate()  # graceful: it hands back its queued tasks

    def _drain(self) -> None:
        self.state = "draining"
        log.info("pool %s: draining %d workers: running tasks finish within %.0f s (the drain timeout), queued ones go back",
                 self.pool_id, sum(c.proc is not None for c in self.children), self.options.drain_timeout_s)
        for c in self.children:
            c.respawn_at = None
            if c.proc is not None and c.proc.poll() is None:
                c.kill_reason = c.kill_reason or wire.Fault(ErrorKind.WORKER_LOST, "drained")
                c.proc.terminate()
        self._report()
        deadline = time.monotonic() + self.options.drain_timeout_s
        for c in self.children:
            if c.proc is None:
                continue
            try:
                c.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("pool %s: %s did not drain in %.0f s; killing it", self.pool_id, c.worker_id, self.options.drain_timeout_s)
                c.proc.kill()
                c.proc.wait()
                self.lost.append(wire.Lost(c.worker_id, wire.Fault(ErrorKind.WORKER_LOST, "drain timeout"), None))
            if c.pidfd is not None:
                os.close(c.pidfd)
                c.pidfd = None
            c.proc = None
        self.state = "stopped"
        self._report()
        log.info("pool %s: stopped", self.pool_id)
