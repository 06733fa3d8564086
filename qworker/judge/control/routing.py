"""Which endpoint of a judge takes the next task: priority tiers, then a routing policy within a tier.

Only the dispatcher thread calls it (through ``Gate.admit``).  Units: requests.

**Tiers.**  Each endpoint has a ``priority`` (an int, lower first; 0 by
default).  A task goes to the lowest tier in which some endpoint has room now
(``Endpoint.free > 0``: under its limit and pacing, not cooling, or a down
endpoint's probe that is due).  So a higher tier gets traffic only while every
endpoint of every lower tier is saturated (at its limit, with this task
waiting) or down, and traffic returns to the lower tiers as soon as they have
room again: nothing is pinned to the tier it went to last.

**Within a tier** (``routing``, one per judge):

* ``"capacity"`` (default): the endpoint with the most free capacity times its
  ``weight``;
* ``"round_robin"``: the next endpoint in turn that has room (what a plain
  round-robin proxy in front of replicas does, for comparison);
* ``"prefix"``: the endpoints are replicas of one model, each with its own
  prefix (KV) cache.  Tasks whose judge prompts share a prefix (by default the
  prompt rendered up to ``{response}``: a GRPO group's N responses to one
  prompt share it) go to the same replica, by consistent hashing of the prefix
  on a ring of ``VNODES`` points per replica, while that replica's load (in
  flight) stays within ``(1 + prefix_balance)`` times the tier's mean load (plus
  one) or within ``BALANCE_ABS`` of the least loaded replica (as SGLang's
  router, which balances only past both a relative and an absolute imbalance: a
  near-idle fleet must not scatter a group of 16); past it, or with no room, the task walks on along the ring to the next
  replica that qualifies (bounded-load consistent hashing, Mirrokni et al.).  The
  bound chooses where a group begins: while a task of it is in flight (the group is
  begun), its other tasks follow the replica it began at (while that replica is up),
  waiting for room there rather than being split by the bound, so a spilled group also
  lands together.  Once none is in flight the group is over: the same prefix sent
  again (the next epoch's group of the same prompt) is placed by the bound afresh,
  from its ring order.  ``weight`` does not apply.  When the fleet is
  saturated, the replica that frees a slot takes the first waiting task (of the
  first ``LOOKAHEAD``) whose prefix prefers it, rather than the head of the queue:
  otherwise whichever replica frees first would scatter every group.  With none, it
  takes the first task of a prefix not yet begun (nothing of it sent), and that
  prefix's other tasks follow it there: a group moves whole rather than being split.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from hashlib import blake2b
from typing import TYPE_CHECKING, Any, Callable, Optional

import msgpack

from ..prompt import DEFAULT_TEMPLATE, render
from ..settings import DEFAULT_BALANCE, ROUTINGS
from .call import NO_ROUTE

AVOID_FACTOR = 1e-6  # a retried task's room on the endpoint that failed it: another with room goes first

if TYPE_CHECKING:
    from ...engine.task import Pending
    from .endpoint import Endpoint

__all__ = ["ROUTINGS", "Router", "affinity_text"]

VNODES = 64  # points per replica on the hash ring
BALANCE_ABS = 16  # prefix routing: nor is a replica over the bound while it holds at most this many more than the least loaded
LOOKAHEAD = 256  # prefix routing: tasks looked at, from the head of the queue, for one that prefers a replica with room


def _h64(data: bytes) -> int:
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "big")


def affinity_text(params: dict, payload: Any) -> str:
    """The part of a judge prompt shared by a group: the rendered template up to ``{response}`` (and the system prompt).

    A template without ``{response}`` shares nothing certain: the payload's ``prompt`` stands for it.
    """
    template = str(params.get("prompt_template") or DEFAULT_TEMPLATE)
    head, found, _ = template.partition("{response}")
    data = payload if isinstance(payload, dict) else {}
    shared = render(head, data, str(params.get("rubric") or "")) if found else str(data.get("prompt", ""))
    return f"{params.get('system_prompt') or ''}\x00{shared}"


class Router:
    def __init__(self, endpoints: list[Endpoint], routing: str = "capacity", balance: float = DEFAULT_BALANCE) -> None:
        if routing not in ROUTINGS:
            raise ValueError(f"routing = {routing!r}: must be one of {', '.join(ROUTINGS)}")
        self.endpoints, self.routing, self.balance = endpoints, routing, balance
        self.tiers: list[list[Endpoint]] = [
            [e for e in endpoints if e.priority == p] for p in sorted({e.priority for e in endpoints})]
        self._turn = 0
        ring = sorted((_h64(f"{e.url}#{e.index}#{k}".encode()), e.index) for e in endpoints for k in range(VNODES))
        self._ring_keys = [k for k, _ in ring]
        self._ring_eps = [i for _, i in ring]
        self._affinity: dict[bytes, int] = {}  # task key -> its prefix's hash (kept while the task waits or runs)
        self._rings: dict[int, tuple[int, ...]] = {}  # prefix hash -> its ring order (a cache: a function of the hash)
        self._homes: dict[int, int] = {}  # begun prefix -> the replica it began at, where not its ring's first (moved)
        self._begun: dict[int, int] = {}  # prefix hash -> its tasks in flight (sent, not yet answered), while any
        self._sent: dict[bytes, int] = {}  # key of a task in flight -> its prefix's hash
        self.routed = 0
        self.affine = 0  # prefix routing: tasks that went to their prefix's first replica

    def tier_with_room(self, now: float, tokens: float) -> Optional[list[tuple[Endpoint, float]]]:
        """The lowest tier in which some endpoint has room now, as (endpoint, free) pairs; None when none has."""
        for tier in self.tiers:
            rooms = [(e, e.free(now, tokens)) for e in tier]
            if any(r > 0 for _, r in rooms):
                return rooms
        return None

    def pick(self, now: float, tokens: float, p: Pending, avoid: int = NO_ROUTE) -> Optional[Endpoint]:
        """The endpoint ``p`` (at the head of the queue) goes to now, or None when no endpoint has room; ``avoid``: the
        endpoint whose error ``p`` is retried after (it takes ``p`` only when no other endpoint has room)."""
        rooms = self.tier_with_room(now, tokens)
        if rooms is None:
            return None
        if self.routing == "prefix" and len(rooms) > 1:
            return self._spill(rooms, p)
        if self.routing == "round_robin":
            tier = {e.index for e, r in rooms if r > 0}
            for k in range(len(self.endpoints)):
                i = (self._turn + k) % len(self.endpoints)
                if i in tier:
                    self._turn = (i + 1) % len(self.endpoints)
                    return self.endpoints[i]
        best, best_room = None, 0.0
        for e, free in rooms:
            room = free * e.weight
            if e.index == avoid:
                room *= AVOID_FACTOR  # a task retried after an error: taken only when no other endpoint has room
            if room > best_room:
                best, best_room = e, room
        return best

    def pick_prefix(self, queue: deque[Pending], now: float, tokens: float,
                    eligible: Callable[[Pending], bool]) -> Optional[tuple[int, Endpoint]]:
        """Prefix routing: (position in ``queue``, replica) of the task to send now, or None when no replica has room.

        A replica with room takes the first task among the first ``LOOKAHEAD`` whose
        prefix prefers it (its first replica on the ring that is up and within the load
        bound); with none, the first task of a prefix not yet begun moves that prefix, whole,
        to a replica with room (within the bound); with none, the head of the queue spills to its
        next replica on the ring that has room.  So a group stays on its replica while the fleet is saturated,
        when whichever replica frees a slot first would otherwise scatter it.  ``eligible``:
        whether a task may go now (not resolved, no Retry-After pending).
        """
        rooms = self.tier_with_room(now, tokens)
        if rooms is None:
            return None
        if len(rooms) == 1:
            return 0, rooms[0][0]
        free = {e.index for e, r in rooms if r > 0}
        usable = {e.index for e, _ in rooms if not e.down_reason and now >= e.cool_until}
        load = sum(e.in_flight for e, _ in rooms)
        bound = max(math.ceil((1.0 + self.balance) * (load + 1) / len(rooms)), min(e.in_flight for e, _ in rooms) + BALANCE_ABS)
        within = {e.index for e, _ in rooms if e.index in usable and e.in_flight + 1 <= bound}
        fresh: Optional[int] = None  # the first eligible task of a prefix with nothing sent yet
        for pos in range(min(LOOKAHEAD, len(queue))):
            p = queue[pos]
            if pos and not eligible(p):
                continue
            order = self._order(p)
            begun = self._hash(p) in self._begun
            if begun:  # it follows the replica it began at (where the bound let it begin), not split by the bound
                first = next((i for i in order if i in usable), None)
            else:
                first = next((i for i in order if i in within), None)
            if first is not None and first in free:
                self.routed += 1
                self.affine += first == next(i for i in order if i in usable or i in free)
                self._send(p, first)
                return pos, self.endpoints[first]
            if fresh is None and not begun:
                fresh = pos
        if fresh is not None:  # a group not yet begun moves whole to a replica with room, rather than one being split
            p = queue[fresh]
            home = next(i for i in self._order(p) if i in free and i in within) if free & within else None
            if home is not None:
                self._send(p, home)
                self.routed += 1
                return fresh, self.endpoints[home]
        head = queue[0]
        to = self._spill(rooms, head)
        self._send(head, to.index)  # a group not yet begun begins there: the rest of it follows
        return 0, to

    def _spill(self, rooms: list[tuple[Endpoint, float]], p: Pending) -> Endpoint:
        """The first replica with room along ``p``'s ring order (a spilled group lands together)."""
        free = {e.index for e, r in rooms if r > 0}
        self.routed += 1
        return self.endpoints[next(i for i in self._order(p) if i in free)]

    def _hash(self, p: Pending) -> int:
        """The hash of ``p``'s prefix (``affinity_text``)."""
        h = self._affinity.get(p.key)
        if h is None:
            try:
                payload = msgpack.unpackb(p.payload, raw=False, strict_map_key=False)
            except (ValueError, TypeError, msgpack.UnpackException):
                payload = None
            h = self._affinity[p.key] = _h64(affinity_text(p.params, payload).encode())
        return h

    def _order(self, p: Pending) -> tuple[int, ...]:
        """The replicas in ``p``'s prefix's order (every endpoint, each once): its ring order, or, while its group is
        begun at another replica, that one first."""
        h = self._hash(p)
        order = self._rings.get(h)
        if order is None:
            start = bisect.bisect_left(self._ring_keys, h)
            seen: dict[int, None] = {}
            n = len(self._ring_keys)
            for k in range(n):
                seen.setdefault(self._ring_eps[(start + k) % n])
                if len(seen) == len(self.endpoints):
                    break
            order = tuple(seen)
            if len(self._rings) > 65536:
                self._rings.clear()
            self._rings[h] = order
        home = self._homes.get(h)
        return order if home is None else (home, *(i for i in order if i != home))

    def _send(self, p: Pending, to: int) -> None:
        """``p`` goes to replica ``to``: its prefix is begun (at ``to``, if it was not) while ``p`` is in flight."""
        h = self._hash(p)
        if h not in self._begun and to != self._order(p)[0]:
            self._homes[h] = to  # moved: the rest of its group follows it there
        self._begun[h] = self._begun.get(h, 0) + 1
        self._sent[p.key] = h

    def done(self, p: Pending) -> None:
        """``p`` is answered, handed back or dropped: its prefix is not kept for it; the last of its group's tasks in
        flight ends the group (its prefix is placed afresh when sent again)."""
        self._affinity.pop(p.key, None)
        h = self._sent.pop(p.key, None)
        if h is None:
            return
        left = self._begun[h] - 1
        if left:
            self._begun[h] = left
        else:
            del self._begun[h]
            self._homes.pop(h, None)
