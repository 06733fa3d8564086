"""The producer's dispatcher thread: the only owner of the producer's socket.

It moves tasks from the submit inbox to workers with credit, records leases,
resolves futures from results, redelivers the tasks of lost workers, and answers
status requests.  The caller's thread never touches the socket: it appends to
``inbox`` and writes a byte to a wake pipe, and it sleeps on futures.

Delivery is at-least-once; results are exactly-once per task key: the first
result for a key resolves it, and any later one is counted and dropped.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import deque
from typing import Callable, Optional

import zmq

from . import _wire as wire
from ._fleet import Fleet, Pending, Resolution, WorkerState
from ._gate import AUTH_FAILED_ERROR

log = logging.getLogger("qworker")

MAX_BATCH = 512  # tasks per TASKS message
HOUSEKEEPING_S = 0.25
REVOKE_EVERY_S = 0.05  # at most one REVOKE per worker per this interval


class Dispatcher(threading.Thread):
    def __init__(
        self,
        *,
        sock: zmq.Socket,
        resolve: Callable[[list[Resolution]], None],
        pending_lookup: Callable[[bytes], Optional[Pending]],
        max_attempts: int,
        heartbeat_timeout_s: float,
        max_message_bytes: int,
        status_extra: Callable[[], dict],
    ) -> None:
        super().__init__(name="qworker-dispatcher", daemon=True)
        self.sock = sock
        self._resolve = resolve
        self._pending_lookup = pending_lookup  # unresolved tasks by key, across all workers
        self.max_attempts = max_attempts
        self.max_message_bytes = max_message_bytes
        self.status_extra = status_extra
        self.fleet = Fleet(heartbeat_timeout_s=heartbeat_timeout_s)
        self.inbox: deque[Pending] = deque()  # appended by the caller's thread
        self.calls: deque[tuple[Callable[[], object], object]] = deque()
        self.queue: deque[Pending] = deque()  # waiting for credit; retries go first
        self.gates: list = []  # _gate.Gate objects: tasks waiting for an endpoint's capacity
        self.stats = {"dropped_frames": 0, "duplicate_results": 0, "redelivered": 0}
        self.workers_seen = threading.Condition()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_flag = False
        self._stopping = False
        self._import_errors_logged: set[str] = set()

    # called from other threads ----------------------------------------------
    def wake(self) -> None:
        if not self._wake_flag:
            self._wake_flag = True
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass

    def call(self, fn: Callable[[], object], timeout: float = 10.0) -> object:
        """Run ``fn`` on the dispatcher thread and return its result."""
        done = threading.Event()
        box: list = []
        self.calls.append((lambda: box.append(fn()), done))
        self.wake()
        if not done.wait(timeout):
            raise TimeoutError("the dispatcher did not answer")
        return box[0]

    def status(self) -> dict:
        """This producer, its pools and their workers.  Dispatcher thread only (see ``call``)."""
        now = time.monotonic()
        return {"producer": self.status_extra(), "pools": self.fleet.snapshot(), "judges": [g.snapshot(now) for g in self.gates]}

    def stop(self) -> None:
        self._stopping = True
        self.wake()
        self.join(timeout=10.0)
        os.close(self._wake_r)
        os.close(self._wake_w)

    # the loop ---------------------------------------------------------------
    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        next_housekeeping = time.monotonic() + HOUSEKEEPING_S
        while not self._stopping:
            timer = self.next_timer(time.monotonic()) if self.gates else None
            poller.poll(int(1000 * (HOUSEKEEPING_S if timer is None else min(timer, HOUSEKEEPING_S))) + 1)
            try:  # drain first, then clear: a wake() in between then writes a fresh byte
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
            self._wake_flag = False
            try:
                self._take_inbox()
                self._receive()
                now = time.monotonic()
                if now >= next_housekeeping:
                    self._housekeeping(now)
                    next_housekeeping = now + HOUSEKEEPING_S
                self._dispatch()
                while self.calls:
                    fn, done = self.calls.popleft()
                    fn()
                    done.set()
            except Exception:  # a bug here must not silently stop every future
                log.exception("qworker dispatcher: unexpected error (continuing)")

    def _take_inbox(self) -> None:
        inbox, queue = self.inbox, self.queue
        while inbox:
            p = inbox.popleft()
            if p.gate is None:
                queue.append(p)
            else:
                if p.gate not in self.gates:
                    self.gates.append(p.gate)
                p.gate.queue.append(p)

    def _back_to_queue(self, tasks: list[Pending]) -> None:
        """Unsent or unanswered tasks go back to the front of their queue (a gate's, or the main one)."""
        plain = []
        for p in tasks:
            if p.gate is None:
                plain.append(p)
            else:
                p.gate.forget(p)
                p.gate.queue.appendleft(p)
        self.queue.extendleft(reversed(plain))

    def _receive(self) -> None:
        sock = self.sock
        for _ in range(10_000):  # bounded, so dispatch and housekeeping still run under load
            if not sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                return
            frames = sock.recv_multipart(copy=True)
            if len(frames) != 3:
                self._drop(frames[0] if frames else b"?", f"expected 3 frames, got {len(frames)}")
                continue
            peer, kind, body = frames
            try:
                msg = wire.decode(kind, body, max_bytes=self.max_message_bytes)
            except wire.WireError as exc:
                self._drop(peer, str(exc))
                continue
            self._handle(peer, msg)

    def _drop(self, peer: bytes, why: str) -> None:
        self.stats["dropped_frames"] += 1
        n = self.stats["dropped_frames"]
        if n <= 10 or n % 1000 == 0:
            log.warning("qworker: dropped a bad frame from %r (%s); %d dropped so far", peer[:32], why, n)

    def _handle(self, peer: bytes, msg: wire.Message) -> None:
        now = time.monotonic()
        fleet = self.fleet
        if isinstance(msg, wire.Results):
            w = fleet.workers.get(peer.decode(errors="replace"))
            if w is not None:
                w.sync_credit(msg.granted, msg.received)
                w.last_seen = now
            self._on_results(w, peer, msg.results)
        elif isinstance(msg, wire.Ready):
            if msg.worker.encode() != peer:
                self._drop(peer, "READY names a worker other than its sender")
                return
            w, new = fleet.on_ready(msg, now)
            if new:
                log.info("qworker: worker %s ready (pool %s, pid %d, host %s)", w.id, w.pool, w.pid, w.host)
                with self.workers_seen:
                    self.workers_seen.notify_all()
            for e in msg.errors:
                if e not in self._import_errors_logged:
                    self._import_errors_logged.add(e)
                    log.error("qworker: worker %s: %s", w.id, e)
            if msg.finished == msg.received and w.leases and now - w.last_sent_at > fleet.heartbeat_timeout_s:
                # Idle and holding nothing, long after our last send, yet leases remain:
                # tasks or results were lost in transit (e.g. a TCP reconnect).  Resync
                # its credit and send them again.
                w.sent = msg.received
                self._requeue(w, fleet.release(w), "lost in transit")
        elif isinstance(msg, wire.PoolReport):
            fleet.on_pool_report(msg, now)
            for lost in msg.lost:
                self._on_lost(lost)
        elif isinstance(msg, wire.Giveback):
            w = fleet.workers.get(peer.decode(errors="replace"))
            if w is None:
                return
            w.sync_credit(msg.granted, msg.received)
            back = [w.leases.pop(k) for k in msg.keys if k in w.leases]
            for p in back:
                p.holder = None
                p.attempts -= 1  # it never ran
            self._back_to_queue(back)
        elif isinstance(msg, wire.Bye):
            w = fleet.workers.get(peer.decode(errors="replace"))
            if w is not None:
                log.info("qworker: worker %s left (%s)", w.id, msg.reason)
                self._lose(w, f"left ({msg.reason})")
        elif isinstance(msg, wire.StatusRequest):
            self._send(peer, wire.StatusReply(self.status()))
        else:
            self._drop(peer, f"{type(msg).__name__} is not a message a producer accepts")

    def _on_results(self, w: Optional[WorkerState], peer: bytes, results: list[wire.TaskResult]) -> None:
        worker_id = w.id if w is not None else peer.decode(errors="replace")
        pending_of = self._pending_lookup
        now = time.monotonic()
        done: list[Resolution] = []
        for key, score, extra, error, compute_s in results:
            p = w.leases.pop(key, None) if w is not None else None
            if p is None:
                p = pending_of(key)  # a result from an earlier delivery of a redelivered task
                if p is None:
                    self.stats["duplicate_results"] += 1
                    continue
                if p.holder is not None:
                    p.holder.leases.pop(key, None)
            p.holder = None
            if p.gate is not None:
                outcome = extra.pop(wire.OUTCOME_KEY, None) if extra else None
                try:
                    retry = p.gate.settle(p, outcome, error, now)
                except Exception:  # a bug in the gate must not strand the task: it resolves as reported
                    log.exception("qworker: the judge gate failed on a result; resolving task %s as the worker reported it", key.hex()[:16])
                    retry = False
                if retry:
                    p.attempts -= 1  # the delivery worked; the endpoint call is what is retried
                    p.gate.queue.appendleft(p)
                    continue
                if error is not None and (p.tries or p.throttled):
                    error = f"{error} (after {p.tries + p.throttled + 1} calls)"
            if w is not None:
                if error is None:
                    w.done += 1
                else:
                    w.failed += 1
            done.append((p, score, extra, error, worker_id, compute_s))
        self._resolve(done)

    def _on_lost(self, lost: wire.Lost) -> None:
        w = self.fleet.workers.get(lost.worker)
        if w is None:
            return
        if lost.task is not None and lost.reason.startswith(wire.TIMEOUT_ERROR):
            p = w.leases.pop(lost.task, None)
            if p is not None:
                p.holder = None
                if p.gate is not None:
                    p.gate.forget(p)
                w.failed += 1
                self._resolve([(p, None, None, f"{lost.reason} (worker {w.id} was killed and respawned)", w.id, 0.0)])
        self._lose(w, lost.reason)

    def _lose(self, w: WorkerState, reason: str) -> None:
        held = self.fleet.remove(w)
        if held:
            log.warning("qworker: worker %s lost (%s); redelivering %d tasks", w.id, reason, len(held))
            self._requeue(w, held, reason)

    def _requeue(self, w: WorkerState, held: list[Pending], reason: str) -> None:
        retry, failed = [], []
        for p in held:
            if p.resolved:
                continue
            if p.attempts >= self.max_attempts:
                if p.gate is not None:
                    p.gate.forget(p)
                error = f"{wire.WORKER_LOST_ERROR}: attempt {p.attempts} of {self.max_attempts} was on worker {w.id}, which was lost ({reason})"
                failed.append((p, None, None, error, w.id, 0.0))
            else:
                retry.append(p)
        if failed:
            self._resolve(failed)
        self.stats["redelivered"] += len(retry)
        self._back_to_queue(retry)

    def _housekeeping(self, now: float) -> None:
        for w in self.fleet.silent_workers(now):
            self._lose(w, f"no heartbeat for {now - w.last_seen:.1f} s")
        self.fleet.drop_silent_pools(now)

    # sending ----------------------------------------------------------------
    def _send(self, peer: bytes, msg: wire.Message) -> bool:
        try:
            self.sock.send_multipart([peer, *wire.encode(msg)], flags=zmq.NOBLOCK)
            return True
        except zmq.ZMQError as exc:  # EHOSTUNREACH: the peer is gone
            log.debug("qworker: cannot send to %r: %s", peer[:32], exc)
            return False

    def _steal(self) -> None:
        """With nothing queued and a worker idle, ask loaded workers for unstarted tasks.

        Credit is granted ahead of time on a worker's past speed; when the work
        changes, a slow worker can hold tasks that idle workers could finish.  It
        gives back up to half of what it holds beyond the task it is running.
        """
        workers = self.fleet.workers.values()
        if not any(w.credit > 0 and not w.leases for w in workers):
            return
        now = time.monotonic()
        for w in workers:
            spare = (len(w.leases) - 1) // 2
            if spare > 0 and now - w.last_revoke_at >= REVOKE_EVERY_S:
                w.last_revoke_at = now
                self._send(w.id.encode(), wire.Revoke(spare))

    def _admit(self) -> None:
        """Move tasks whose endpoint has room from the gates to the front of the queue."""
        budget = sum(w.credit for w in self.fleet.workers.values()) - len(self.queue)
        if budget <= 0:
            return
        now = time.monotonic()
        for gate in self.gates:
            sent, failed = gate.admit(now, budget)
            if failed:
                self._resolve([(p, None, None, why or AUTH_FAILED_ERROR, "", 0.0) for p, why in failed])
            if sent:
                budget -= len(sent)
                self.queue.extendleft(reversed(sent))

    def next_timer(self, now: float) -> Optional[float]:
        """Seconds until a gate may admit a waiting task, if that is sooner than housekeeping."""
        wakes = [t for g in self.gates if (t := g.next_wake(now)) is not None]
        return max(0.0, min(wakes) - now) if wakes else None

    def _dispatch(self) -> None:
        if self.gates:
            self._admit()
        queue = self.queue
        if not queue:
            self._steal()
            return
        ready = self.fleet.with_credit()
        if not ready:
            return
        ready.sort(key=lambda w: len(w.leases))  # the least loaded first
        share = math.ceil(len(queue) / len(ready))
        now = time.monotonic()
        for w in ready:
            batch: list[wire.Task] = []
            leased: list[Pending] = []
            limit = min(w.credit, share, MAX_BATCH)
            room = self.max_message_bytes // 2  # a batch stays well under the frame cap
            while queue and len(batch) < limit and (not batch or len(queue[0].payload) < room):
                p = queue.popleft()
                room -= len(p.payload) + 64
                if p.resolved:  # resolved meanwhile (a late result of an earlier delivery)
                    if p.gate is not None:
                        p.gate.forget(p)
                    continue
                p.attempts += 1
                p.holder = w
                w.leases[p.key] = p
                leased.append(p)
                batch.append(p.as_task())
            if not batch:
                continue
            if self._send(w.id.encode(), wire.Tasks(batch)):
                w.sent += len(batch)
                w.last_sent_at = now
            else:
                for p in leased:
                    p.attempts -= 1
                self._lose(w, "unreachable")
            if not queue:
                return
