"""The dispatcher's logic without its thread or socket: credit, leases, redelivery, stealing.

``Scheduler`` is a state machine driven by four calls: ``add`` (new tasks),
``handle`` (a decoded message from a peer), ``housekeeping`` (liveness, every
quarter second) and ``dispatch`` (send what credit allows).  It talks to peers
only through the ``send(peer, message) -> bool`` it is given, so tests drive it
with a list instead of a socket (``tests/unit/engine/test_scheduler.py``).  The dispatcher
thread (``engine.dispatcher``) feeds it frames and time.

Delivery is at-least-once; results are exactly-once per task key: the first
result for a key resolves it (``PendingTable``), and any later one is counted
and dropped.

Attempts are charged to the task that caused a failure.  When a worker is lost,
only the task its pool saw it running is charged a delivery (and if the pool
killed it for its hard limit, only that task fails); the tasks queued behind it
never ran and are redelivered free.  A worker given up for silent (neither it
nor its pool heard from) holds tasks none of which is known to be running: all
are redelivered free, and when its pool's report comes after all, naming the
task that hung or crashed it, that task is charged then (or fails, for its hard
limit), as it would have been had the report come first; a task named so is
presumed the cause when a later worker holding it goes silent too.  A task
that such a late report charges while another worker is running it (it was
redelivered meanwhile) is not failed under that worker: the delivery was made
within its attempts as they then stood, so it finishes and its outcome decides
(a result resolves the task; that worker's loss charges it again and fails it
once it has used ``max_attempts``).  If the late charge has used up its attempts,
it is never delivered again: handed back unrun, it fails as the report would
have failed it had the report come first.  A hard-limit kill is a verdict on the
task, not a charge: a late one fails the task at once, wherever it runs.  So
``max_attempts`` bounds how many workers a poison task takes down, whichever of
the report and the silence comes first, plus the one that may be running it when
a late report comes.  So that no loss can loop for ever, a task
is failed after ``MAX_DELIVERIES_FACTOR * max_attempts`` deliveries however they
ended.  A worker whose leases keep vanishing (it takes tasks and neither runs
nor returns them: a broken or rogue peer) is quarantined: nothing more is sent
to it, and the tasks it swallowed are redelivered free.  Leases vanish when a
peer says it is idle while holding them, or when a peer no pool vouches for
holds tasks and returns nothing for longer than their hard limit (a pool's
watchdog enforces that limit on its own workers; nothing does for a stranger).
Quarantine is by peer identity and outlasts a BYE or a loss.  Results from a
quarantined peer, or from a peer that is not a known worker, resolve nothing:
they are counted (``dropped_results``, and one dropped frame per message).

Tasks with an admission policy (``engine.admission``) wait in it until it admits
them; the scheduler calls only that protocol's hooks and names no kind of policy.

A TASKS message holds at most half of its worker's frame limit of tasks (payload,
reward name and params counted), or one bigger task alone.  A worker's frame limit is the
lower of the ``max_message_bytes`` its ``Ready`` states and the producer's own, less the
bytes the transport adds to a frame (``framing_bytes``: CURVE's); libzmq drops a larger
message unread, with the link.  A task too big for the frame of the worker that takes it
waits apart from the queue (``wide``), offered first to each worker whose frame it fits;
it counts in no lane's turn, no worker's share and no admission budget, so it holds up
no narrower worker.  A task over the largest limit a worker may soon receive
(``Fleet.widest``: stated by a pool heard from within the heartbeat timeout, or the
producer's own while the fleet starts), less ``MESSAGE_OVERHEAD`` and ``framing_bytes``,
fails as ``bad_payload`` naming its size and that bound: at once when it is taken, and
from the wait once the widest limit falls under it (``housekeeping``).
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from typing import Callable, Collection, Iterable, Optional

from .._errors import ErrorKind
from .._recent import RecentKeys
from ..cache.identity import RunVersions
from ..transport import wire
from ..transport.ration import LogRation
from .admission import AdmissionPolicy, PolicyStatus
from .fleet import Fleet, WorkerState
from .lanes import FairQueue, Turns
from .pending import PendingTable
from .status import PoolRow
from .task import DONE, LEASED, Pending, Resolution, lease_all

log = logging.getLogger("qworker")

Task = wire.Task

__all__ = ["Scheduler", "MAX_BATCH", "REVOKE_EVERY_S"]

MAX_BATCH = 512  # tasks per TASKS message
REVOKE_EVERY_S = 0.05  # at most one REVOKE per worker per this interval
MAX_DELIVERIES_FACTOR = 3  # deliveries of a task, charged or not, at most this times max_attempts
QUARANTINE_AFTER = 2  # a worker is quarantined the second time its leases vanish
NARROW_POOLS_KEPT = 256  # pools (or lone workers) under the producer's frame limit remembered as warned of
REMEMBER_SILENT_LOSSES = 1024  # workers given up for silent whose pool's late report may still blame one of their tasks
TASK_OVERHEAD = 64  # msgpack bytes of a task besides its payload, reward name and params (an upper bound)
MESSAGE_OVERHEAD = 64  # bytes of a TASKS message besides its tasks


class _TaskSizer:
    """Upper bounds on tasks' sizes in a TASKS message.  The params of a batch of tasks are one shared
    dict (one ``submit_batch``), so their packed size is computed once per run of the same dict."""

    __slots__ = ("params", "reward", "fixed", "_known")

    def __init__(self) -> None:
        self.params: Optional[dict] = None  # the params and reward name of the last task sized
        self.reward = ""
        self.fixed = 0  # the bytes of such a task besides its payload
        # id(params) -> (params, reward, fixed) of recent submissions: lanes taking turns (a reward service's
        # clients) alternate between a few submissions' dicts, task by task
        self._known: dict[int, tuple[dict, str, int]] = {}

    def task_bytes(self, p: Pending) -> int:
        """``p``'s size bound; raises (TypeError, OverflowError, ...) if its reward name and params cannot be encoded
        (and then remembers nothing of them: the next task of the same params raises too)."""
        if p.params is not self.params or p.reward is not self.reward:
            known = self._known.get(id(p.params))
            if known is not None and known[0] is p.params and known[1] is p.reward:
                fixed = known[2]
            else:
                fixed = TASK_OVERHEAD + len(wire.encode_body([p.reward, p.params]))  # as the message will encode them
                if len(self._known) >= 256:
                    self._known.clear()
                self._known[id(p.params)] = (p.params, p.reward, fixed)
            self.params, self.reward, self.fixed = p.params, p.reward, fixed
        return len(p.payload) + self.fixed

Send = Callable[[bytes, wire.Message], bool]


class Scheduler:
    def __init__(
        self, *, send: Send, table: PendingTable, max_attempts: int, heartbeat_timeout_s: float, max_message_bytes: int,
        task_timeout_s: float = 60.0, versions: Optional[RunVersions] = None, framing_bytes: int = 0,
    ) -> None:
        """``versions`` learns the version of each reward's code that the workers report (none kept without it).
        ``framing_bytes``: what the transport adds to each frame sent (``transport.sockets.CURVE_FRAME_BYTES`` over
        CURVE, else 0), counted against a worker's frame limit."""
        self.send = send
        self.versions = versions if versions is not None else RunVersions()
        self.task_timeout_s = task_timeout_s  # the hard limit of a task that names none
        self.table = table
        self.max_attempts = max_attempts
        self.max_message_bytes = max_message_bytes
        self.framing_bytes = framing_bytes
        self.fleet = Fleet(heartbeat_timeout_s=heartbeat_timeout_s)
        self.queue = FairQueue()  # waiting for credit; retries go first, then each lane in turn
        self.policies: list[AdmissionPolicy] = []  # every policy a task was added to, in order of first use
        self.stats = {"dropped_frames": 0, "dropped_results": 0, "duplicate_results": 0, "redelivered": 0, "policy_errors": 0}
        self._import_errors_logged: set[str] = set()
        # (pool, or a worker with none; its frame limit) under ours, warned of once: the most recent ones only
        self._narrow_warned: RecentKeys[tuple[str, int]] = RecentKeys(NARROW_POOLS_KEPT)
        self._bad_frames = LogRation()  # frames dropped as not valid messages (``drop``): what its log lines are rationed by
        self._stray_results = LogRation()  # results from workers not held (``_drop_results``), rationed apart from those
        self._sizer = _TaskSizer()
        # QUEUED tasks too big for the frame of a worker that took them, with their sizes (``_TaskSizer``), in order:
        # offered first to each worker whose frame they fit (``dispatch``); empty in a fleet of one frame limit
        self.wide: list[tuple[Pending, int]] = []
        self._wide_min = 0  # the smallest size in ``wide``, bytes (0 while empty): a worker whose frame it exceeds takes none
        self._turns = Turns(every_s=REVOKE_EVERY_S)
        # Workers lost with no task blamed (given up for silent, or gone with nothing known running): the tasks
        # refunded, until their pool's report says which one the worker was running (the oldest forgotten first).
        # Each index below holds the task itself beside its key, and acts only on that task: a task resolved and
        # submitted again under the same key is a new task, which none of them concerns.
        self._refunded: OrderedDict[str, dict[bytes, Pending]] = OrderedDict()
        self._suspects: dict[bytes, Pending] = {}  # pending tasks a pool named as running when their worker died
        # Running tasks whose attempts a late report used up: their current delivery finishes, and they are never
        # delivered again (each fails with its fault if it comes back to the queue).
        self._spent: dict[bytes, tuple[Pending, wire.Fault]] = {}

    # input --------------------------------------------------------------------
    def add(self, tasks: Iterable[Pending]) -> None:
        """New tasks: to the main queue, or to their admission policy.  A task resolved before it got here (by a
        late result of an earlier task of its key) is dropped."""
        plain = []
        held: dict[int, tuple[AdmissionPolicy, list[Pending]]] = {}
        for p in tasks:
            if p.state is DONE:
                continue
            if p.policy is None:
                plain.append(p)
            else:
                p.wait()
                held.setdefault(id(p.policy), (p.policy, []))[1].append(p)
        self.queue.extend(plain)
        for policy, batch in held.values():
            if policy not in self.policies:
                self.policies.append(policy)
            policy.add(batch)

    def drop(self, peer: bytes, why: str) -> None:
        """Count frames that were not valid messages, and log the first ten of them, then one in a thousand (a peer
        refused for its protocol, or results from a worker not held, count in ``dropped_frames`` too, but not in that
        ration: they have lines of their own)."""
        self.stats["dropped_frames"] += 1
        if self._bad_frames.tick():
            log.warning("qworker: dropped a bad frame from %r (%s); %d bad so far", peer[:32], why, self._bad_frames.count)

    def _drop_results(self, peer: bytes, n: int, quarantined: bool) -> None:
        """Count ``n`` results from a worker not held (lost earlier, or a stranger) or quarantined: they resolve
        nothing; log the first ten such messages, then one in a thousand."""
        self.stats["dropped_frames"] += 1
        self.stats["dropped_results"] += n
        if self._stray_results.tick():
            why = ("a quarantined worker" if quarantined else
                   "not a worker this producer holds: one lost earlier, whose tasks were redelivered, or a stranger")
            log.warning("qworker: dropped %d results from %r (%s); %d such messages so far", n, peer[:32], why,
                        self._stray_results.count)

    def handle(self, peer: bytes, msg: wire.Message, now: float) -> None:
        fleet = self.fleet
        if isinstance(msg, wire.Results):
            w = fleet.workers.get(peer.decode(errors="replace"))
            if w is None or w.quarantined:
                # Its leases were released and redelivered when it was lost or quarantined; what it says
                # about them now (a stranger's or a rogue's word) must not resolve a task.
                self._drop_results(peer, len(msg.results), quarantined=w is not None)
                if w is not None:
                    w.last_seen = now
                return
            w.sync_credit(msg.granted, msg.received)
            w.last_seen = now
            self._on_results(w, msg.results, now)
        elif isinstance(msg, wire.Ready):
            self._on_ready(peer, msg, now)
        elif isinstance(msg, wire.PoolReport):
            fleet.on_pool_report(msg, now)
            for lost in msg.lost:
                self._on_lost(lost)
        elif isinstance(msg, wire.Giveback):
            w = fleet.workers.get(peer.decode(errors="replace"))
            if w is None:
                return
            w.sync_credit(msg.granted, msg.received)
            w.last_progress = now
            back = [w.leases[k] for k in dict.fromkeys(msg.keys) if k in w.leases]
            for p in back:
                p.undeliver()  # it never ran, and was handed back on request
            self._back_to_queue(back, own_lane=True)
        elif isinstance(msg, wire.Bye):
            w = fleet.workers.get(peer.decode(errors="replace"))
            if w is not None:
                w.last_seen = now  # heard from: its pool's frame limit is remembered from now (``Fleet.widest``)
                self._lose(w, f"left ({msg.reason})", left=True)
        else:
            self.drop(peer, f"{type(msg).__name__} is not a message a producer accepts")

    def _on_ready(self, peer: bytes, msg: wire.Ready, now: float) -> None:
        if msg.worker.encode() != peer:
            self.drop(peer, "READY names a worker other than its sender")
            return
        fleet = self.fleet
        w, new = fleet.on_ready(msg, now)
        if msg.versions:
            self.versions.learn_many(msg.versions)
        if new:
            narrow = 0 < w.max_message_bytes < self.max_message_bytes
            if narrow and self._narrow_warned.add((w.pool or w.id, w.max_message_bytes)):  # once per pool and limit
                log.warning("qworker: worker %s ready (pool %s, pid %d, host %s), its frame limit %d bytes under this producer's "
                            "%d: it is sent no larger message, and a task over it goes to another worker or fails",
                            w.id, w.pool, w.pid, w.host, w.max_message_bytes, self.max_message_bytes)
            else:
                log.info("qworker: worker %s ready (pool %s, pid %d, host %s%s)", w.id, w.pool, w.pid, w.host,
                         f", frame limit {w.max_message_bytes} bytes" if narrow else "")
        for e in msg.errors:
            if e not in self._import_errors_logged:
                self._import_errors_logged.add(e)
                log.error("qworker: worker %s: %s", w.id, e)
        if msg.finished == msg.received and w.leases and now - w.last_sent_at > fleet.heartbeat_timeout_s:
            # Idle and holding nothing, long after our last send, yet leases remain: tasks or
            # results were lost in transit (e.g. a TCP reconnect).  Resync its credit and resend,
            # free: the tasks did nothing wrong.  A second time, the peer is at fault.
            w.sent = msg.received
            self._vanished(w, "lost in transit")

    def _vanished(self, w: WorkerState, reason: str) -> None:
        """``w``'s leases vanished: redeliver them free; the second time, quarantine it."""
        w.vanished += 1
        held = self.fleet.held(w)
        if w.vanished >= QUARANTINE_AFTER and not w.quarantined:
            self.fleet.quarantine(w)
            log.warning("qworker: worker %s (pool %s, host %s) took %d tasks and neither ran nor returned them, %d times; "
                        "quarantined: nothing more is sent to it", w.id, w.pool, w.host, len(held), w.vanished)
        self._requeue(w, held, reason, charged=())

    def _on_results(self, w: WorkerState, results: list[wire.TaskResult], now: float) -> None:
        if results:
            w.last_progress = now
        done: list[Resolution] = []
        leased = w.leases.get
        worker_id = w.id
        ok = 0
        for r in results:
            key, error = r.key, r.error  # a Fault (kind, detail), to the policy and the table; Result's text is made there
            p = leased(key)
            if p is not None and p.policy is None and ((identity := p.identity) is None or r.ran == identity.version):
                # a plain task's current delivery, run by the code its key names: what the general path below does, in short
                if p.cache_as is not None:  # set by an earlier delivery that ran other code
                    p.cache_as = None
                if error is None:
                    ok += 1
                done.append((p, r.score, r.extra, error, worker_id, r.compute_s))
                continue
            current = p is not None  # else an earlier delivery's answer (the task was given back or redelivered)
            if p is None:
                p = self.table.get(key)  # a result from an earlier delivery of a redelivered task
                if p is None:
                    self.stats["duplicate_results"] += 1
                    continue
            ran = r.ran
            identity = p.identity
            if identity is not None:  # each delivery's own: a retried task may run other code than its first try
                p.cache_as = None if ran == identity.version else identity.key_for(ran, p.payload)  # other code: its own key
                if ran != identity.version and (error is None or ran is not None):
                    self.versions.learn(identity.reward, ran)
            if p.policy is not None:
                if not current:
                    # The policy released this delivery's call when the task came back; it hears only of the current
                    # one.  A success resolves the task (the first result wins) and the policy drops its state for it;
                    # a failure is left to the current delivery.
                    if error is not None:
                        self.stats["duplicate_results"] += 1
                        continue
                    self._forget(p)
                else:
                    try:
                        decision = p.policy.on_result(p, r.meta, error, now)
                    except Exception:  # a bug in a policy must not strand the task: it resolves as reported
                        log.exception("qworker: the admission policy failed on a result; resolving task %s as the worker reported it",
                                      key.hex()[:16])
                        self._forget(p)
                    else:
                        if decision.retry:  # the policy has queued it again: the call, not the delivery, is retried
                            p.undeliver()
                            p.wait()
                            continue
                        error = decision.error
            if error is None:
                ok += 1
            done.append((p, r.score, r.extra, error, worker_id, r.compute_s))
        w.done += ok
        w.failed += len(done) - ok
        self.table.resolve(done)

    def _on_lost(self, lost: wire.Lost) -> None:
        w = self.fleet.workers.get(lost.worker)
        if w is None:
            self._on_late_loss(lost)
            return
        reason = lost.reason
        if lost.task is not None and reason.kind is ErrorKind.TIMEOUT:
            p = w.leases.get(lost.task)
            if p is not None:
                w.failed += 1
                self._fail(p, wire.Fault(reason.kind, f"{reason.detail} (worker {w.id} was killed and respawned)"), w.id)
        self._lose(w, lost.why, guilty=lost.task)

    def _on_late_loss(self, lost: wire.Lost) -> None:
        """A pool's report of a worker already given up, whose tasks were all refunded: the task it names as
        running is charged now (or fails, if its hard limit killed the worker), as if the report had come first.
        A task charged so that another worker is running meanwhile is not failed under it: that delivery finishes
        (its result resolves the task), and if the charge used up its attempts it is never delivered again."""
        refunded = self._refunded.pop(lost.worker, None)
        key = lost.task
        if refunded is None or key is None:
            return
        p = self.table.get(key)
        if p is None or p is not refunded.get(key) or p.state is DONE:  # not refunded, or resolved since (a task submitted again is new)
            return
        reason = lost.reason
        if reason.kind is ErrorKind.TIMEOUT:
            fault = wire.Fault(reason.kind, f"{reason.detail} (worker {lost.worker} was killed and respawned)")
        else:
            p.charge()
            self._suspects[key] = p
            running = p.state is LEASED  # redelivered meanwhile: its current delivery is counted already
            used = p.attempts - 1 if running else p.attempts  # charged deliveries that have ended
            if used < self.max_attempts:
                return
            fault = wire.Fault(ErrorKind.WORKER_LOST,
                               f"attempt {used} of {self.max_attempts} was on worker {lost.worker}, which was lost ({lost.why})")
            if running:
                log.warning("qworker: pool's late report: worker %s was lost running task %s (%s); its attempts are used up: "
                            "its delivery to worker %s finishes, and it is not delivered again", lost.worker, key.hex()[:16],
                            lost.why, p.holder.id if p.holder is not None else "?")
                self._spent[key] = (p, fault)
                return
        log.warning("qworker: pool's late report: worker %s was lost running task %s (%s)", lost.worker, key.hex()[:16], lost.why)
        self._fail(p, fault, lost.worker)

    def _fail_if_spent(self, p: Pending) -> bool:
        """If a late report used up ``p``'s attempts while it ran (and ``p`` is back unrun), fail it as that report
        would have, and say so."""
        entry = self._spent.get(p.key)
        if entry is None or entry[0] is not p:
            return False
        del self._spent[p.key]
        self._fail(p, entry[1])
        return True

    def _fail(self, p: Pending, fault: wire.Fault, worker: str = "") -> None:
        """``p`` ends with ``fault`` (on ``worker``, if one ran it): out of every index, its future resolved."""
        self._forget(p)
        self.table.resolve([(p, None, None, fault, worker, 0.0)])

    # losing workers -----------------------------------------------------------
    def _lose(self, w: WorkerState, reason: str, guilty: Optional[bytes] = None, left: bool = False) -> None:
        """Forget a worker and redeliver what it held; ``guilty`` is the task it was running, if known.  ``left``: it
        left on its own (Bye: news, logged as INFO, not a fault); otherwise, unknown ``guilty``, a task that took a
        worker down before is charged again."""
        culprit = w.leases.get(guilty) if guilty is not None else None  # (``remove`` empties the leases)
        held = self.fleet.remove(w)
        if left:
            log.info("qworker: worker %s %s%s", w.id, reason, f"; redelivering the {len(held)} task(s) it held" if held else "")
        elif held:
            log.warning("qworker: worker %s lost (%s); redelivering %d tasks", w.id, reason, len(held))
        if not held:
            return
        presume = not left
        suspects = self._suspects
        if guilty is not None:
            if culprit is not None:
                suspects[guilty] = culprit
            charged = {guilty}
        else:  # no task known to be running: those that took a worker down before are presumed the cause again
            charged = {p.key for p in held if suspects.get(p.key) is p} if presume else set()
            if len(charged) < len(held):  # the rest go free, until the pool's report (if late) names one of them
                self._refunded[w.id] = {p.key: p for p in held if p.key not in charged}
                while len(self._refunded) > REMEMBER_SILENT_LOSSES:
                    self._refunded.popitem(last=False)
        self._requeue(w, held, reason, charged)

    def _requeue(self, w: WorkerState, held: list[Pending], reason: str, charged: Collection[bytes]) -> None:
        """Redeliver tasks a lost worker held (LEASED: a resolved task holds no lease).  Only the tasks in
        ``charged`` keep their delivery charged."""
        retry, failed = [], []
        cap = MAX_DELIVERIES_FACTOR * self.max_attempts
        for p in held:
            if p.key not in charged:
                p.refund()
            if self._fail_if_spent(p):  # a late report used up its attempts while it ran here
                continue
            if p.attempts >= self.max_attempts or p.deliveries >= cap:
                self._forget(p)
                if p.attempts >= self.max_attempts:
                    detail = f"attempt {p.attempts} of {self.max_attempts} was on worker {w.id}, which was lost ({reason})"
                else:
                    detail = f"delivered {p.deliveries} times, and each time its worker was lost (last: {w.id}, {reason})"
                failed.append((p, None, None, wire.Fault(ErrorKind.WORKER_LOST, detail), w.id, 0.0))
            else:
                retry.append(p)
        if failed:
            self.table.resolve(failed)
        self.stats["redelivered"] += len(retry)
        self._back_to_queue(retry)

    def _back_to_queue(self, tasks: list[Pending], own_lane: bool = False) -> None:
        """Unsent or unanswered tasks go back to the front of their queue (their policy's, or the main one; with
        ``own_lane``, tasks given back unstarted, the front of their lane: they wait their lane's turn).
        Their leases end as they move."""
        plain = []
        held: dict[int, tuple[AdmissionPolicy, list[Pending]]] = {}
        for p in tasks:
            if p.policy is None:
                plain.append(p)
            else:
                p.wait()
                held.setdefault(id(p.policy), (p.policy, []))[1].append(p)
        for policy, batch in held.values():
            policy.give_back(batch)
        if own_lane:
            self.queue.putback(plain)
        else:
            self.queue.extendleft(reversed(plain))

    def housekeeping(self, now: float) -> None:
        """Lose workers heard from by neither themselves nor their pool for too long."""
        for w in self.fleet.silent_workers(now):
            self._lose(w, f"no heartbeat for {now - w.last_seen:.1f} s")
        if self._suspects:  # only pending tasks stay suspects
            self._suspects = {k: p for k, p in self._suspects.items() if self.table.get(k) is p}
        if self._spent:
            self._spent = {k: e for k, e in self._spent.items() if self.table.get(k) is e[0]}
        self.fleet.drop_silent_pools(now)
        if self.wide:
            self._expire_wide(now)
        for w in list(self.fleet.workers.values()):
            if w.leases and not w.quarantined and not self.fleet.supervised(w, now):
                limit = max(p.timeout_s or self.task_timeout_s for p in w.leases.values()) + self.fleet.heartbeat_timeout_s
                if now - w.last_progress > limit:
                    self._vanished(w, f"no result for {now - w.last_progress:.1f} s, past the tasks' {limit:.3g} s, and no pool vouches for it")

    # sending --------------------------------------------------------------------
    def _steal(self, now: float) -> None:
        """With nothing queued and a worker idle, ask loaded workers for unstarted tasks.

        Credit is granted ahead of time on a worker's past speed; when the work
        changes, a slow worker can hold tasks that idle workers could finish.  It
        gives back up to half of what it holds beyond the task it is running.  A
        worker of a wider frame than every idle one's is asked for only as many of
        its newest leases (those it gives back) as fit an idle one's frame, in a
        row from the newest (else what it gave back would wait for it).
        """
        idle = [w for w in self.fleet.with_credit() if not w.leases]  # a quarantined worker's credit is no idle worker
        if not idle:
            return
        fits = 0  # the widest frame limit of an idle worker, once a worker is to be asked
        for w in self.fleet.workers.values():
            spare = (len(w.leases) - 1) // 2
            if spare > 0 and now - w.last_revoke_at >= REVOKE_EVERY_S:
                w.last_revoke_at = now  # (asked or not, not weighed again before REVOKE_EVERY_S)
                fits = fits or max(map(self._frame, idle))
                if self._frame(w) > fits:
                    spare = self._newest_fitting(w, fits, spare)
                if spare > 0:
                    self.send(w.id.encode(), wire.Revoke(spare))

    def _newest_fitting(self, w: WorkerState, limit: int, n: int) -> int:
        """How many of ``w``'s newest leases, at most ``n``, fit alone in a frame of ``limit`` bytes, counted from the
        newest up to the first that does not (a worker gives back its newest unstarted tasks first)."""
        bound = self._task_bound(limit)
        fit = 0
        for p in reversed(w.leases.values()):  # (each was sized, so encodable, when it was sent)
            if fit >= n or self._sizer.task_bytes(p) > bound:
                break
            fit += 1
        return fit

    def _forget(self, p: Pending) -> None:
        """``p`` leaves without a result for its policy (if it has one).  A policy's ``forget`` that raises is logged
        (the 1st, 10th, 100th... time, with its traceback) and counted in ``stats["policy_errors"]``; the task leaves
        every index of the scheduler all the same, so a policy's bug can neither strand a task nor stop dispatch."""
        if p.policy is not None:
            try:
                p.policy.forget(p)
            except Exception:
                self.stats["policy_errors"] += 1
                n = self.stats["policy_errors"]
                if n == 10 ** (len(str(n)) - 1):
                    log.exception("qworker: the admission policy's forget() failed on task %s (%d times so far); "
                                  "the task goes on without it", p.key.hex()[:16], n)

    def _admit(self, now: float) -> None:
        """Move the tasks the policies admit to the front of the queue; fail those they fail."""
        for policy in self.policies:
            policy.tick(now)
        budget = sum(w.credit for w in self.fleet.with_credit()) - len(self.queue)
        if budget <= 0:
            return
        for policy in self.policies:
            sent, failed = policy.admit(now, budget)
            if failed:
                self.table.resolve([(p, None, None, why, "", 0.0) for p, why in failed])
            if sent:
                budget -= len(sent)
                self.queue.extendleft(reversed(sent))

    def next_timer(self, now: float) -> Optional[float]:
        """Seconds until a policy may admit a waiting task, if any policy is waiting on time."""
        wakes = [t for g in self.policies if (t := g.next_wake(now)) is not None]
        return max(0.0, min(wakes) - now) if wakes else None

    def dispatch(self, now: float) -> None:
        """Send queued tasks to workers with credit, the least loaded first, each its share of the queue in one
        message; the tasks waiting for a wider frame (``wide``) go first to each worker whose frame they fit."""
        if self.policies:
            self._admit(now)
        queue = self.queue
        wide = self.wide
        if not queue:
            self._steal(now)
            if not wide:
                return
        ready = self.fleet.with_credit()
        if ready:
            ready.sort(key=lambda w: len(w.leases))
            share = math.ceil(len(queue) / len(ready))
            widest = 0  # the largest frame limit a worker may soon receive (``_widest``), once a task needs it
            for w in ready:
                leased, widest = self._fill(w, min(w.credit, share, MAX_BATCH), now, widest)
                if leased:
                    self._send(w, leased, now)
                    if not queue and not wide:
                        return
        if queue.mixed:  # lanes wait while workers hold other lanes' tasks beyond their share: ask for those back
            self._turns.check(queue, self.fleet.workers.values(), now, self.send)

    def _fill(self, w: WorkerState, limit: int, now: float, widest: int) -> tuple[list[Pending], int]:
        """The tasks of one message to ``w``, in order: first those in ``wide`` that fit its frame (up to its credit),
        then at most ``limit`` from the queue as long as they fit the message's room.  On the way, a task resolved while queued is
        forgotten, one whose attempts a late report used up fails, one that cannot be encoded fails, one too big for
        ``w``'s frame goes to ``wide`` (or fails, if too big for every worker's: ``widest``, found once a task needs
        it, 0 until then).  The first task that does not fit the room left, and those after it, go back to the front
        of the queue.  Returns the tasks (not yet leased) and ``widest``."""
        queue = self.queue
        wide = self.wide
        leased: list[Pending] = []
        frame = self._frame(w)
        room = (frame - self.framing_bytes) // 2  # a batch stays well under the frame cap (a bigger task goes alone)
        alone = self._task_bound(frame)  # the largest task it can receive alone
        if wide and alone >= self._wide_min:  # (only in a fleet of several frame limits)
            room = self._take_wide(w, alone, room, leased)
        sizer = self._sizer
        spent = self._spent
        while queue and len(leased) < limit:
            taken = queue.take(limit - len(leased))  # (one call, not one per task; what is not sent goes back first)
            if not taken:
                break
            params, reward, fixed = sizer.params, sizer.reward, sizer.fixed
            i = 0
            try:
                for i, p in enumerate(taken):
                    if p.state is DONE:  # resolved while queued (a late result of an earlier delivery): dropped here (and in ``wide``, by ``_take_wide`` and ``_expire_wide``)
                        self._forget(p)
                        continue
                    if spent and self._fail_if_spent(p):  # a late report used up its attempts: never delivered again
                        continue
                    if p.params is params and p.reward is reward:  # (``task_bytes``, inline: once per task)
                        size = len(p.payload) + fixed
                    else:
                        try:
                            size = sizer.task_bytes(p)
                        except Exception as exc:  # taken from the queue: it fails here, or it would be in no queue at all
                            self._fail_unsendable(p, exc)
                            continue
                        params, reward, fixed = sizer.params, sizer.reward, sizer.fixed
                    if size > alone:  # too big for this worker's frame
                        widest = widest or self._widest(now)
                        if size > self._task_bound(widest):  # and for every worker's
                            self._fail_oversized(p, size, widest)
                        else:
                            wide.append((p, size))
                            if size < self._wide_min or len(wide) == 1:
                                self._wide_min = size
                        continue
                    if leased and size > room:  # it and those after it go in the next message: first in the queue again
                        queue.untake(taken[i:])
                        return leased, widest
                    room -= size
                    leased.append(p)
            except BaseException:  # (a policy's hook): what was taken and not yet leased is queued again, not lost
                queue.untake([q for q in (*leased, *taken[i:]) if q.state is not DONE])
                for q in taken[i + 1:]:  # resolved while queued and not reached: forgotten, as the loop would have
                    if q.state is DONE:
                        self._forget(q)
                raise
        return leased, widest

    def _send(self, w: WorkerState, leased: list[Pending], now: float) -> None:
        """Lease ``leased`` to ``w`` and send them in one TASKS message.  A message that cannot be built or encoded is
        sorted out (``_sort_unsendable``); one the transport could not send (``w`` unreachable) puts its tasks back,
        neither charged nor counted, and loses ``w``."""
        was_idle = not w.leases
        lease_all(leased, w)
        try:
            # ``p.as_task(meta)``, inline: once per task
            batch = [Task(p.key, p.reward, p.params, p.payload, p.timeout_s, p.attempts, None if p.policy is None else p.policy.meta(p))
                     for p in leased]
            sent = self.send(w.id.encode(), wire.Tasks(batch, self.max_message_bytes))
        except BaseException as exc:  # nothing was sent (a policy's meta, or encoding the message, raised)
            for p in leased:
                p.undeliver()
            if not isinstance(exc, Exception):  # (a KeyboardInterrupt in a policy's hook): queued again, not lost
                self._back_to_queue(leased)
                raise
            self._sort_unsendable(leased, exc)
            return
        if was_idle:  # its clock of progress starts now
            w.last_progress = now
        if sent:
            w.sent += len(batch)
            w.last_sent_at = now
        else:
            for p in leased:
                p.undeliver()  # never sent: neither charged nor counted
            self.stats["redelivered"] += len(leased)
            self._back_to_queue(leased)
            self._lose(w, "unreachable")

    def _fail_unsendable(self, p: Pending, exc: Exception) -> None:
        """``p`` cannot be put on the wire (its params, or what its policy attaches, cannot be encoded): it fails."""
        self._fail(p, wire.Fault(ErrorKind.BAD_PAYLOAD,
            f"the task cannot be sent: its reward name, params or admission metadata cannot be encoded ({type(exc).__name__}: {exc})"))

    def _sort_unsendable(self, tasks: list[Pending], exc: Exception) -> None:
        """A TASKS message of ``tasks`` (LEASED, their deliveries undone) could not be built or sent: ``exc``.  Each task
        that cannot be encoded on its own fails; the others go back to the front of the queue, in order.  If every one
        encodes on its own, the fault is the message's, and they all fail with ``exc`` (so that none loops for ever)."""
        bad: list[tuple[Pending, Exception]] = []
        good: list[Pending] = []
        for p in tasks:
            try:
                wire.encode_body(p.as_task(None if p.policy is None else p.policy.meta(p)))
            except Exception as own:
                bad.append((p, own))
            else:
                good.append(p)
        if not bad:
            log.error("qworker: a TASKS message of %d tasks could not be sent (%s: %s); they fail", len(tasks), type(exc).__name__, exc)
            bad, good = [(p, exc) for p in tasks], []
        self._back_to_queue(good)
        for p, cause in bad:
            self._fail_unsendable(p, cause)

    def _take_wide(self, w: WorkerState, alone: int, room: int, leased: list[Pending]) -> int:
        """Move to ``leased`` the tasks waiting for a wider frame (``wide``) that fit ``w``'s (``alone`` bytes a task
        alone, ``room`` bytes for a message of several), in order, as many as its credit allows; drop those resolved
        meanwhile.  Returns the room left."""
        limit = min(w.credit, MAX_BATCH)
        wide = self.wide
        keep: list[tuple[Pending, int]] = []
        i, n = 0, len(wide)
        while i < n and len(leased) < limit:  # once its credit is used, the rest stay as they are, in order
            p, size = wide[i]
            i += 1
            if p.state is DONE:  # resolved while waiting (a late result of an earlier delivery)
                self._forget(p)
            elif size > alone:  # too big for this worker: it stays for a wider one, and the scan goes on
                keep.append((p, size))
            elif leased and size > room:  # it goes in this worker's next message: it and those after it stay as they are
                i -= 1
                break
            elif not (self._spent and self._fail_if_spent(p)):
                room -= size
                leased.append(p)
        if len(keep) < i:  # (none taken nor dropped: nothing to rewrite)
            wide[:i] = keep
            self._wide_min = min((size for _, size in wide), default=0)
        return room

    def _expire_wide(self, now: float) -> None:
        """Fail the tasks waiting for a wider frame that fit no frame a worker may soon receive (``_widest``)."""
        widest = self._widest(now)
        bound = self._task_bound(widest)
        keep: list[tuple[Pending, int]] = []
        failed: list[tuple[Pending, int]] = []
        for p, size in self.wide:
            if p.state is DONE:
                self._forget(p)
            elif size > bound:
                failed.append((p, size))
            else:
                keep.append((p, size))
        self.wide[:] = keep
        self._wide_min = min((size for _, size in keep), default=0)
        for p, size in failed:
            self._fail_oversized(p, size, widest)

    def _frame(self, w: WorkerState) -> int:
        """The largest message ``w`` receives, bytes: the lower of its stated limit and the producer's own."""
        own = self.max_message_bytes
        return min(own, w.max_message_bytes or own)

    def _task_bound(self, frame: int) -> int:
        """The largest task, bytes, a message of at most ``frame`` bytes carries alone (less the transport's framing
        and ``MESSAGE_OVERHEAD``)."""
        return frame - self.framing_bytes - MESSAGE_OVERHEAD

    def _widest(self, now: float) -> int:
        """The largest frame limit, bytes, a worker may soon receive (``Fleet.widest``: the producer's own at most): a
        task over it, less ``framing_bytes`` and ``MESSAGE_OVERHEAD``, can be sent to none."""
        return self.fleet.widest(self.max_message_bytes, now)

    def _fail_oversized(self, p: Pending, size: int, limit: int) -> None:
        """``p``, of ``size`` bytes (``_TaskSizer``), fits no frame a worker may soon receive, whose largest limit is
        ``limit`` bytes: it fails, naming the bound a task must fit (``limit`` less the message's overhead and the
        transport's framing)."""
        less = f"less {MESSAGE_OVERHEAD} bytes of message" + (f" and {self.framing_bytes} of CURVE's framing" if self.framing_bytes else "")
        bound = self._task_bound(limit)
        if limit >= self.max_message_bytes:  # the producer's own limit
            where = (f"the {limit}-byte message limit (max_message_bytes) {less}; keep max_payload_bytes and params well "
                     "under it")
        else:
            where = (f"the {limit}-byte message limit of every worker heard from in the last "
                     f"{self.fleet.heartbeat_timeout_s:g} s (their pools' --max-message-bytes; this producer's is "
                     f"{self.max_message_bytes}) {less}; start the pools with the producer's limit, or keep payloads "
                     "under theirs")
        self._fail(p, wire.Fault(ErrorKind.BAD_PAYLOAD,
            f"the task is {size} bytes encoded (payload, reward name and params), over the {bound} bytes a task may be: "
            f"{where}"))

    # status ---------------------------------------------------------------------
    def queued(self) -> int:
        """Tasks waiting for credit: in the queue, or for a worker of a wider frame (``wide``)."""
        return len(self.queue) + len(self.wide)

    def in_flight(self) -> int:
        return sum(len(w.leases) for w in self.fleet.workers.values())

    def pools(self) -> list[PoolRow]:
        """Pools and their workers, for ``qworker status``."""
        return self.fleet.snapshot()

    def waiting_for_admission(self) -> int:
        """Tasks held by admission policies, not yet admitted."""
        return sum(g.waiting() for g in self.policies)

    def policy_status(self, now: float) -> list[PolicyStatus]:
        """Each admission policy's status row, for ``qworker status``."""
        return [g.snapshot(now) for g in self.policies]
