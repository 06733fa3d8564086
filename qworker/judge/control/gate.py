"""The producer's gate for calls to rate-limited endpoints (LLM judges).

A task of ``llm_judge`` does not go to a worker when a worker has credit: it
waits here until one of the judge's endpoints has room under its adaptive
limit (``limiter``), its pacing (static ``rpm``/``tpm``, and the rates the
provider's headers announce: ``endpoint``) and any cooldown.  The gate then
picks the endpoint (``routing``: the lowest priority tier with room, then the
most free capacity times ``weight``, or by prompt prefix for replicas) and the
dispatcher sends the task with that endpoint's index.  Every answer's outcome
comes back here.  Because every worker of every pool is fed by this one
producer, an endpoint has one limit, not one per process; other producers on
this host that call the same endpoint share it evenly through notes (``peers``).

A gate is the judge's admission policy (``qworker.engine.admission``): the
dispatcher drives it through that protocol's hooks, all on its own thread, and
knows nothing else of it.  What the gate knows of a task's calls (its route,
when it went, its retries and refusals, its Retry-After) lives in the gate's own
table (``calls``, a ``JudgeCall`` per task), never on the task.  ``settle`` is
the decision on one answer (``on_result`` is ``settle`` plus requeueing), so a
simulation drives the same rules without a dispatcher (``tests/contract/judge/judgesim.py``).

After an answer (``outcome.classify`` reads its meaning; the endpoint's
``health.Health`` records it and returns the verdict the limiter and the task's
retries act on):

=====================================  ===========================================
200                                    done (a reply with no score fails: ``bad_result``)
429                                    a refusal: the limit is capped/cut; retried
503, 529                               a refusal when it carries Retry-After or the error
                                       budget is spent; else noise: the limit is capped; retried
timeout                                retried; cuts the limit only when errors are over the error budget
a hung timeout (``estimators.Hangs``)  retried; neither an error in the budget nor a cut
connection refused / unreachable       endpoint down (probed after 0.5 s, doubling to 5 s); retried elsewhere
connection reset, 408, 409, other 5xx  retried (at once after a task's first error, then after 0.25 s,
                                       doubling); within the error budget they leave the limit alone;
                                       5 in a row take the endpoint down
401, 403                               endpoint down for 60 s; retried on another endpoint, else fails at once
other 4xx                              fails at once with the server's message
a reply body over 16 MiB (``http``)    fails at once, naming the cap; the endpoint's health is untouched
=====================================  ===========================================

``Retry-After`` delays the refused task only: it is not sent again before
then, and the others go on.  The whole endpoint waits only when the evidence
says it is out: its headers say no request is left; or the Retry-After is
exact (``retry-after-ms`` or fractional seconds, not whole seconds) and at most
a quarter of a round trip, which is when the server's next token or slot comes
(so for that long); or a streak of refusals with no success between them, at
least ``max(8, limit / 2)`` long (then for the shortest Retry-After of the
streak or, with none, 0.1 s doubling to 1 s: an outage costs a task a few of
its refusals, not all of them; an answer to a request sent before the streak
began does not end it).  The error budget: while at most
``error_budget`` (15%) of the last 200 answers were errors, errors are noise
(a judge answering 5% 503s at random runs at full speed); beyond it a 5xx is a
sign of overload and cuts the limit.

With no endpoint reachable (every one down: refused connections, resets, 5xx
streaks), a waiting task fails after ``dead_after_s`` (10 s) counted from when
the last endpoint went down or from its submission, whichever is later, with
an error naming each endpoint and its cause.  Probes go on meanwhile (every
0.5 s doubling to 5 s or ``dead_after_s / 2``, with a task that is waiting), so
new tasks flow again once one answers (only a probe's answer brings an endpoint
back: answers to requests sent before it went down are old news).  What a
server says is screened (``checks.screen``): a Retry-After or rate-limit value that
is not believable is ignored, with one warning per endpoint and header; config
numbers are checked at start (``checks.check``: a ``ConfigError`` naming the key and
value).  Should waiting tasks still find no endpoint that can ever take them
(nothing in flight, nothing due, no room), they fail at once with an error
naming each endpoint and why, rather than wait for ever.  A task is retried after at most ``max_attempts - 1`` errors, and
after at most ``5 * max_attempts`` refusals; an error of an endpoint that is
down (connection refused, or the error streak that took it down) is the
endpoint's and is not counted against the task (``dead_after_s`` bounds its wait).
"""

from __future__ import annotations

import heapq
import json
import logging
import statistics
from collections import deque
from typing import Optional

from ..._errors import ErrorKind
from ...engine.admission import RESOLVE, Decision, Fault
from ...engine.status import EndpointRow, JudgeStatus
from ...engine.task import Pending
from ..settings import GATE, JUDGE, JudgeOptions, JudgeSettings
from .call import NO_ROUTE, JudgeCall
from .checks import check as _check
from .checks import measured, screen
from .endpoint import Bucket, Endpoint, LoadPoller
from .health import DOWN_MAX_S, Health
from .limiter import LOAD_FRESH_S, AdaptiveLimit
from .outcome import AUTH_DOWN_S, MAX_RETRY_AFTER_S, Answer, Kind, Verdict, classify
from .peers import Board, Peers
from .routing import Router

log = logging.getLogger("qworker")

__all__ = ["AUTH_FAILED_ERROR", "Gate", "ROUTING_KEYS", "hash_params", "identity", "task_params"]

# params that choose where and how a call is made, not what it scores: not part of the task hash
ROUTING_KEYS = frozenset(JudgeOptions.names(scored=False))
PRODUCER_KEYS = frozenset(JudgeSettings.names(JUDGE, GATE))  # read by the gate only: not sent to the workers
REFUSAL_BACKOFF_S, REFUSAL_BACKOFF_MAX_S = 0.05, 2.0  # a task's second refusal and on: its retry waits this, doubling
ERROR_BACKOFF_S = 0.25  # a task's second error: its retry waits 0.25 s, then 0.5, 1, ... (a refusal's wait is the limiter's)
REPLY_TOKENS_UNTOLD = 256  # the reply tokens a call is budgeted at (tpm) when no config of the judge sets max_tokens
THROTTLED_ATTEMPTS_FACTOR = 5  # a task may be refused up to 5 x max_attempts times
AUTH_FAILED_ERROR = Fault(ErrorKind.JUDGE_ERROR,
                          f"every endpoint of this judge refused our credentials (401/403) within the last {AUTH_DOWN_S:.0f} s; not sent")


def clip(text: str, limit: int = 300) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, with ``...`` where it was cut."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 3]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "..."


def _own_detail(e: Endpoint) -> str:
    """An endpoint's last error (a worker's error detail) without the endpoint's name, which the message around it gives."""
    return e.health.last_error.removeprefix(f"endpoint {e.index} ({e.url}): ")


def hash_params(params: dict) -> dict:
    """What a judge task's key hashes of its params: what it scores, not where or how the call is made."""
    return {k: v for k, v in params.items() if k not in ROUTING_KEYS}


def task_params(params: dict) -> dict:
    """The params a judge task carries to the worker: the gate's own settings stay in the producer."""
    return {k: v for k, v in params.items() if k not in PRODUCER_KEYS}


def reply_tokens(params: dict) -> Optional[int]:
    """The longest reply a call with these params may get: its request's ``max_completion_tokens``, else
    ``max_tokens``, as the server reads them (None: not set; checked as whole numbers by ``checks.check``)."""
    req = params.get("request") or {}
    told = req.get("max_completion_tokens") or req.get("max_tokens")
    return int(told) if told else None


def identity(params: dict) -> str:
    return json.dumps([params.get("model"), params.get("endpoints"), params.get("ceiling")], sort_keys=True, default=str)


class Gate:
    def __init__(self, params: dict, *, board: Optional[Board] = None) -> None:
        """``board``: where producers sharing these endpoints leave notes (``peers``); None: this gate keeps to itself."""
        _check(params)
        self.model = str(params["model"])
        self.settings = own = JudgeSettings.from_params(params)
        self.max_attempts, self.dead_after_s, self.error_budget = own.max_attempts, own.dead_after_s, own.error_budget
        self.initial_concurrency = initial = own.initial_concurrency
        ceiling = own.ceiling
        told = reply_tokens(params)
        self.completion_tokens = told or REPLY_TOKENS_UNTOLD
        self.endpoints: list[Endpoint] = []
        self._pollers: list[LoadPoller] = []
        for i, e in enumerate(params["endpoints"]):
            cap = float(e.get("max_concurrency") or ceiling)
            limit = AdaptiveLimit(initial=min(initial, cap), ceiling=cap, reply_tokens=told)
            health = Health(url=e["url"], limiter=limit, error_budget=self.error_budget, dead_after_s=self.dead_after_s,
                            down_max_s=max(0.5, min(DOWN_MAX_S, self.dead_after_s / 2)))  # a waiting task sees a probe before it fails
            ep = Endpoint(i, e["url"], float(e.get("weight", 1.0)), limit, health,
                          Bucket(e["rpm"] / 60.0) if e.get("rpm") else None, Bucket(e["tpm"] / 60.0) if e.get("tpm") else None,
                          priority=int(e.get("priority") or 0))
            self.endpoints.append(ep)
            if e.get("metrics_url"):
                self._pollers.append(LoadPoller(ep, str(e["metrics_url"])))
                self._pollers[-1].start()
        self.router = Router(self.endpoints, own.routing, own.prefix_balance)
        self.peers = Peers(board, self.endpoints) if board is not None else None
        self.queue: deque[Pending] = deque()
        self._delayed: list[tuple[float, int, Pending]] = []  # (not before, seq, task): refused with Retry-After
        self._seq = 0
        self.calls: dict[Pending, JudgeCall] = {}  # each task's calls, from its first admission until it leaves

    def _call(self, p: Pending) -> JudgeCall:
        call = self.calls.get(p)
        if call is None:
            call = self.calls[p] = JudgeCall()
        return call

    def route(self, p: Pending) -> int:
        """The endpoint ``p``'s delivery in flight goes to (``NO_ROUTE``: none)."""
        call = self.calls.get(p)
        return NO_ROUTE if call is None else call.route

    def _not_before(self, p: Pending) -> Optional[float]:
        call = self.calls.get(p)
        return None if call is None else call.not_before

    def _drop(self, p: Pending) -> None:
        """``p`` leaves the gate: no trace of it is kept."""
        self.calls.pop(p, None)
        self.router.done(p)

    def _tokens(self, p: Pending) -> float:
        return len(p.payload) / 4 + self.completion_tokens  # a rough estimate of the request's tokens

    # admission --------------------------------------------------------------
    def allow_replies(self, params: dict) -> None:
        """Another config calls this judge (``Registry.for_params``): its calls' replies may be as long as its
        ``reply_tokens`` too, and a timeout is weighed against the longest (``Hangs``)."""
        told = reply_tokens(params)
        self.completion_tokens = max(self.completion_tokens, told or REPLY_TOKENS_UNTOLD)  # (the tokens a call is budgeted at: its longest)
        for e in self.endpoints:
            e.limit.hangs.allow(told)

    def _release_due(self, now: float) -> None:
        due = []
        while self._delayed and self._delayed[0][0] <= now:
            p = heapq.heappop(self._delayed)[2]
            call = self.calls.get(p)
            if call is not None:
                call.not_before = None
            due.append(p)
        for p in due:
            if p.resolved:
                self._drop(p)
        self.queue.extendleft(reversed([p for p in due if not p.resolved]))

    def _all_down_since(self) -> Optional[float]:
        """When the last endpoint went down, if every endpoint is down for a reason other than credentials."""
        if not all(e.down_reason and e.down_reason != "auth" for e in self.endpoints):
            return None
        return max(e.health.down_since for e in self.endpoints)

    def dead_error(self, now: float) -> Fault:
        causes = "; ".join(f"endpoint {e.index} ({e.url}) down {now - e.health.down_since:.1f} s: {e.down_reason}"
                           + (f" ({_own_detail(e)})" if e.health.last_error else "") for e in self.endpoints)
        return Fault(ErrorKind.JUDGE_ERROR, f"no endpoint of this judge answered for {self.dead_after_s:g} s (dead_after_s): {causes}")

    def stuck_error(self, now: float) -> Fault:
        tokens = self._tokens(self.queue[0]) if self.queue else float(self.completion_tokens)
        causes = "; ".join(f"endpoint {e.index} ({e.url}): {e.blocked(now, tokens)}" for e in self.endpoints)
        return Fault(ErrorKind.JUDGE_ERROR, f"no endpoint of this judge can take a request now or later, and nothing is in flight: {causes}")

    def admit(self, now: float, budget: int) -> tuple[list[Pending], list[tuple[Pending, Fault]]]:
        """(tasks to send now, each with ``route`` set; (task, error) to fail now: no endpoint can take them)."""
        self._release_due(now)
        self.tick(now)
        if not self.queue:
            return [], []
        if all(e.down_reason == "auth" and now < e.health.down_until for e in self.endpoints):
            return [], self._fail_all(AUTH_FAILED_ERROR)
        sent: list[Pending] = []
        while self.queue and len(sent) < budget:
            p = self._admit_one(now)
            if p is None:
                break
            sent.append(p)
        if self.queue and len(sent) < budget and not self._delayed and not any(e.in_flight for e in self.endpoints) \
                and self.next_wake(now) is None:
            # Nothing in flight, nothing due, no endpoint with room: nothing will ever let these go.
            stuck = self.stuck_error(now)
            log.error("qworker: %s", stuck)
            return sent, self._fail_all(stuck)
        return sent, self._fail_dead(now)

    def _fail_all(self, error: Fault) -> list[tuple[Pending, Fault]]:
        """Every waiting task leaves the gate, failed with ``error`` (those already resolved just leave)."""
        failed = [(p, error) for p in self.queue if not p.resolved]
        for p in self.queue:
            self._drop(p)
        self.queue.clear()
        return failed

    def _fail_dead(self, now: float) -> list[tuple[Pending, Fault]]:
        """With every endpoint down, the waiting tasks that waited ``dead_after_s`` since then (or their submission) fail."""
        since = self._all_down_since()
        if since is None or not self.queue:
            return []
        keep: deque[Pending] = deque()
        failed: list[tuple[Pending, Fault]] = []
        error: Optional[Fault] = None
        for p in self.queue:
            if p.resolved:
                self._drop(p)
            elif now - max(since, p.submitted) >= self.dead_after_s:
                error = error or self.dead_error(now)
                self._drop(p)
                failed.append((p, error))
            else:
                keep.append(p)
        self.queue = keep
        return failed

    def _admit_one(self, now: float) -> Optional[Pending]:
        """Take the next task that may go now off the queue and route it (None: none may go now)."""
        queue = self.queue
        while queue:
            p = queue[0]
            if p.resolved:
                queue.popleft()
                self._drop(p)
                continue
            until = self._not_before(p)
            if until is not None and until > now:  # refused with Retry-After: parked until then, the others go on
                queue.popleft()
                self._seq += 1
                heapq.heappush(self._delayed, (until, self._seq, p))
                continue
            if until is not None:
                self.calls[p].not_before = None
            break
        else:
            return None
        picked = self._pick(now)
        if picked is None:
            return None
        p, best = picked
        total = best.total_at_server()
        level = total + 1  # at the server once it gets there, every producer's, itself included
        surely = total - best.at_server() + best.surely_at_server() + 1  # the same, this producer's counted beyond doubt
        best.take(now, self._tokens(p))
        best.limit.on_send(level, now)
        call = self._call(p)
        call.seq, call.level, call.surely = best.sent, level, surely
        call.route, call.routed_at = best.index, now
        return p

    def _pick(self, now: float) -> Optional[tuple[Pending, Endpoint]]:
        """The task to send (the head of the queue, or with prefix routing one a little further back) and its endpoint,
        removed from the queue; None: no endpoint has room now."""
        queue = self.queue
        p = queue[0]
        tokens = self._tokens(p)
        if self.router.routing == "prefix":
            got = self.router.pick_prefix(queue, now, tokens, self._eligible)
            if got is None:
                return None
            pos, best = got
            p = queue[pos]  # a task further back whose prefix prefers the replica with room
            del queue[pos]
            return p, best
        held = self.calls.get(p)
        picked = self.router.pick(now, tokens, p, NO_ROUTE if held is None else held.failed_on)
        if picked is None:
            return None
        queue.popleft()
        return p, picked

    def tick(self, now: float) -> None:
        """Trade notes with the other producers of these endpoints, when due (``peers``); the scheduler calls it every turn."""
        if self.peers is not None:
            self.peers.tick(now, bool(self.queue or self._delayed))

    def close(self) -> None:
        """The producer closes (after its dispatcher stopped): stop reading metrics URLs, and withdraw this gate's
        notes to other producers."""
        for poller in self._pollers:
            poller.stop()
        if self.peers is not None:
            self.peers.close()

    def _eligible(self, p: Pending) -> bool:
        """Whether a waiting task may be sent now (prefix routing's look past the head of the queue)."""
        return not p.resolved and self._not_before(p) is None

    def next_wake(self, now: float) -> Optional[float]:
        """When a delayed task, a cooldown, a probe, pacing or the dead-endpoint bound may let a queued task go."""
        times = [self._delayed[0][0]] if self._delayed else []
        if self.queue:
            tokens = self._tokens(self.queue[0])
            for e in self.endpoints:
                if (t := e.health.wake_at(now)) is not None or (t := e.ready_at(now, tokens)) is not None:
                    times.append(t)
            since = self._all_down_since()
            if since is not None:
                times.append(max(since, min(p.submitted for p in self.queue)) + self.dead_after_s)
            if self.peers is not None and any(e.peers for e in self.endpoints):
                times.append(self.peers.due)  # the next notes may give this producer a larger share
        future = [t for t in times if t > now]
        return min(future) if future else None

    # the admission policy's hooks (``qworker.engine.admission``) ------------------------
    def add(self, tasks: list[Pending]) -> None:
        """New tasks wait here, in order, until an endpoint has room."""
        self.queue.extend(tasks)

    def meta(self, p: Pending) -> dict:
        """What an admitted task's delivery carries to ``llm_judge`` (``EndpointCall.meta``): the endpoint chosen."""
        return {"endpoint": self.route(p)}

    def waiting(self) -> int:
        return len(self.queue)

    def on_result(self, p: Pending, meta: Optional[dict], error: Optional[Fault], now: float) -> Decision:
        """``settle`` the answer (with the error's detail); a retried task goes back to the front of the queue, a
        resolved one leaves the gate (a failure's error says how many calls it took, when more than one)."""
        if self.settle(p, meta, None if error is None else error.detail, now):
            self.queue.appendleft(p)
            return Decision(True)
        call = self.calls.pop(p, None)
        if error is None:
            return RESOLVE
        if call is not None and (call.tries or call.throttled):
            error = Fault(error.kind, f"{error.detail} (after {call.tries + call.throttled + 1} calls)")
        return Decision(False, error)

    def give_back(self, tasks: list[Pending]) -> None:
        """Admitted tasks came back unanswered (their worker was lost, or handed them back): their calls are released
        and they go back to the front of the queue, in order (their counts of retries and refusals are kept)."""
        for p in tasks:
            self._release(p)
        self.queue.extendleft(reversed(tasks))

    def forget(self, p: Pending) -> None:
        """``p`` leaves without an answer for the gate (resolved elsewhere, failed with its worker, too large to send)."""
        self._release(p)
        self._drop(p)

    def _release(self, p: Pending) -> None:
        """The call in flight for ``p``, if any, ended without an answer: its endpoint's slot is free again."""
        self.router.done(p)
        call = self.calls.get(p)
        if call is None:
            return
        if 0 <= call.route < len(self.endpoints):
            e = self.endpoints[call.route]
            e.in_flight = max(0, e.in_flight - 1)
            e.health.released()
            e.limit.on_ended(call.routed_at, None)
        call.route, call.seq, call.level, call.surely = NO_ROUTE, 0, 0, 0

    # answers ----------------------------------------------------------------
    def settle(self, p: Pending, outcome: Optional[dict], error: Optional[str], now: float) -> bool:
        """Record a routed task's answer; True when the task should be retried (the caller puts it back in ``queue``).
        ``error``: the detail of the worker's error (its ``Fault.detail``), None on success.

        The answer goes to its endpoint's health (``health.Health.observe``), whose verdict the limiter and the
        task's retry budget act on.  The task's ``JudgeCall`` is kept either way (``on_result`` drops it when the
        task resolves)."""
        call = self._call(p)
        e = self.endpoints[call.route] if 0 <= call.route < len(self.endpoints) else None
        seq, level, surely = call.seq, call.level, call.surely
        call.route, call.seq, call.level, call.surely = NO_ROUTE, 0, 0, 0
        self.router.done(p)
        if e is None:
            return False
        e.in_flight = max(0, e.in_flight - 1)
        if outcome is None:  # failed before any call (a bad payload): says nothing about the endpoint
            e.health.observe(Answer(0, "", now, call.routed_at), Kind.NONE)
            e.limit.on_ended(call.routed_at, now)
            return False
        outcome = measured(outcome)
        answer = self._answer(e, call, outcome, error, seq, self._tokens(p), now)
        in_flight = e.total_at_server() + 1  # the server's load when this answer left it, every producer's, this one included
        self._read_load(e, now)
        kind = classify(answer, e.health)
        if kind is Kind.TIMEOUT and e.limit.hangs.hung(call.routed_at):  # before health: a hang is not in the error budget
            kind = Kind.HUNG
        if kind is Kind.REFUSED:  # before health reads the limit: a refusal streak is judged against the limit it cut
            e.limit.on_drop(in_flight, now, sent_at=call.routed_at)
        verdict = e.health.observe(answer, kind)
        if verdict.came_back:
            e.limit.reset()
        if kind is Kind.SERVED:
            e.limit.on_success(answer.latency, in_flight, now, level=level or in_flight, tokens=outcome.get("completion_tokens"),
                               sent_at=call.routed_at, surely=surely or level or in_flight)
        elif verdict.cuts_limit:
            e.limit.on_drop(in_flight, now, sent_at=call.routed_at, timeout=True)
        e.limit.on_ended(call.routed_at, now)
        if verdict.park_until is not None:
            call.not_before = verdict.park_until
        if kind is Kind.AUTH and all(x.down_reason for x in self.endpoints):
            return False  # no endpoint left to try it on
        if not verdict.again or not self._retry(call, e, verdict, answer.retry_after, now):
            return False
        e.health.retried()
        return True

    def _answer(self, e: Endpoint, call: JudgeCall, outcome: dict, error: Optional[str], seq: int, tokens: float, now: float) -> Answer:
        """The answer ``outcome`` as health reads it (screened); teaches the endpoint's transit share and pacing."""
        status, failure = int(outcome.get("status") or 0), outcome.get("failure") or ""
        latency = float(outcome.get("latency_s") or 0.0)
        if status == 200 and latency > 0.0:  # a served call: the gate's seconds on it, and the server's
            e.transit.on_answer(now - call.routed_at, latency, now)
        after, ratelimit = screen(e, outcome)
        e.learn(ratelimit, now, call.routed_at, seq, tokens)
        return Answer(status, failure, now, call.routed_at, latency, after, ratelimit, clip(error) if error else "")

    def _retry(self, call: JudgeCall, e: Endpoint, verdict: Verdict, after: Optional[float], now: float) -> bool:
        """Whether the task's budget allows another call after ``verdict``; sets when it may go (``call.not_before``)."""
        if verdict.kind is Kind.REFUSED:  # the limiter's business: these have a budget of their own
            call.throttled += 1
            if call.throttled >= THROTTLED_ATTEMPTS_FACTOR * self.max_attempts:
                return False
            if call.throttled >= 2:
                # Refused again: not the next one sent.  When the capacity drops under what is in flight, every
                # slot that frees is refused until the server drains; the task at the head would take each of
                # those refusals and spend its budget in a second.  It waits 0.05 s, doubling to 2 s.
                after = max(after or 0.0, min(REFUSAL_BACKOFF_MAX_S, REFUSAL_BACKOFF_S * 2 ** (call.throttled - 2)))
        else:
            call.failed_on = e.index
            if verdict.charged:  # (not when the endpoint is down: its fault; dead_after_s bounds the wait)
                if call.tries + 1 >= self.max_attempts:
                    return False
                call.tries += 1
                if call.tries >= 2:
                    # A task's second error and on: not at once, or it could spend its budget in the
                    # moments before an outage's errors take the endpoint down.  A first error (noise,
                    # mostly) is retried at once: a batch's tail is not made to wait.
                    after = after or ERROR_BACKOFF_S * 2 ** (call.tries - 2)
        if after:  # the dispatcher puts it back at the front of the queue; admit parks it until then
            call.not_before = max(call.not_before or 0.0, now + min(float(after), MAX_RETRY_AFTER_S))
        return True

    def _read_load(self, e: Endpoint, now: float) -> None:
        load = e.load
        if load is not None and load[2] > e.load_used and now - load[2] < LOAD_FRESH_S:
            e.load_used = load[2]
            e.limit.on_server_load(load[0], load[1], e.total_at_server(), now, e.total_in_flight())

    # reporting --------------------------------------------------------------
    def snapshot(self, now: float) -> JudgeStatus:
        eps: list[EndpointRow] = []
        for e in self.endpoints:
            lat = sorted(e.health.latencies)
            q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [lat[0] if lat else 0.0] * 99
            paced = e.paced_requests.rate * 60 if e.paced_requests else None
            c = e.health.counts
            eps.append({
                "endpoint": e.index, "url": e.url, "model": self.model, "state": e.state(now), "in_flight": e.in_flight,
                "limit": round(e.limit.limit, 1), "weight": e.weight, "priority": e.priority, "requests": c["requests"], "ok": c["ok"],
                "status_429": c["status_429"], "timeouts": c["timeouts"], "connect_errors": c["connect_errors"],
                "other_errors": c["other_errors"], "retries": c["retries"],
                "latency_p50_s": round(q[49], 4), "latency_p90_s": round(q[89], 4), "latency_p99_s": round(q[98], 4),
                "latency_gradient": round(e.limit.gradient, 3), "error_share": round(e.error_share(), 4),
                "paced_rpm": paced, "cool_reason": e.cool_reason if now < e.cool_until else "",
                "other_producers": len(e.peers), "share": round(e.share(), 1),
            })
        return {"model": self.model, "queued": len(self.queue), "delayed": len(self._delayed), "endpoints": eps}
