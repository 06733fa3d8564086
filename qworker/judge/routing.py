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
  one); past it, or with no room, the task walks on along the ring to the next
  replica that qualifies (bounded-load consistent hashing, Mirrokni et al.), so a
  spilled group also lands together.  ``weight`` does not apply.
"""

from __future__ import annotations

import bisect
import math
from hashlib import blake2b
from typing import TYPE_CHECKING, Any, Optional

import msgpack

if TYPE_CHECKING:
    from .._task import Pending
    from .endpoint import Endpoint

__all__ = ["ROUTINGS", "Router", "affinity_text"]

ROUTINGS = ("capacity", "round_robin", "prefix")
VNODES = 64  # points per replica on the hash ring
DEFAULT_BALANCE = 0.25  # prefix routing: a replica may hold up to 1.25x the mean load (plus one) before tasks spill


def _h64(data: bytes) -> int:
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "big")


def affinity_text(params: dict, payload: Any) -> str:
    """The part of a judge prompt shared by a group: the rendered template up to ``{response}`` (and the system prompt).

    A template without ``{response}`` shares nothing certain: the payload's ``prompt`` stands for it.
    """
    from ..rewards.llm_judge import DEFAULT_TEMPLATE, render  # noqa: PLC0415 (the rewards package imports heavy modules)

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
        self._affinity: dict[bytes, int] = {}  # task key -> its prefix's hash (kept while the task is routed)
        self.routed = 0
        self.affine = 0  # prefix routing: tasks that went to their prefix's first replica

    def pick(self, now: float, tokens: float, p: Pending) -> Optional[Endpoint]:
        """The endpoint ``p`` goes to now, or None when no endpoint has room."""
        for tier in self.tiers:
            rooms = [(e, e.free(now, tokens)) for e in tier]
            if not any(r > 0 for _, r in rooms):
                continue  # saturated or down: the next tier
            if self.routing == "prefix" and len(tier) > 1:
                return self._by_prefix(tier, rooms, p)
            if self.routing == "round_robin":
                for k in range(len(self.endpoints)):
                    e = self.endpoints[(self._turn + k) % len(self.endpoints)]
                    if e.priority == tier[0].priority and e.free(now, tokens) > 0:
                        self._turn = (e.index + 1) % len(self.endpoints)
                        return e
            best, best_room = None, 0.0
            for e, free in rooms:
                room = free * e.weight
                if room > best_room:
                    best, best_room = e, room
            return best
        return None

    def _key(self, p: Pending) -> int:
        h = self._affinity.get(p.key)
        if h is None:
            try:
                payload = msgpack.unpackb(p.payload, raw=False, strict_map_key=False)
            except (ValueError, TypeError, msgpack.UnpackException):
                payload = None
            h = self._affinity[p.key] = _h64(affinity_text(p.params, payload).encode())
        return h

    def done(self, p: Pending) -> None:
        """``p`` is answered or handed back: its prefix hash is not kept."""
        self._affinity.pop(p.key, None)

    def _by_prefix(self, tier: list[Endpoint], rooms: list[tuple[Endpoint, float]], p: Pending) -> Optional[Endpoint]:
        h = self._key(p)
        members = {e.index: (e, r) for e, r in rooms}
        load = sum(e.in_flight for e in tier)
        bound = math.ceil((1.0 + self.balance) * (load + 1) / len(tier))
        start = bisect.bisect_left(self._ring_keys, h) % len(self._ring_keys)
        seen: set[int] = set()
        first = None
        n = len(self._ring_keys)
        for k in range(n):
            i = self._ring_eps[(start + k) % n]
            if i in seen or i not in members:
                continue
            seen.add(i)
            e, room = members[i]
            if first is None:
                first = i
            if room > 0 and (e.in_flight + 1 <= bound or e.down_reason):
                self.routed += 1
                self.affine += i == first
                return e
            if len(seen) == len(members):
                break
        # Every replica with room is over the bound: the least loaded one with room.
        e = min((e for e, r in rooms if r > 0), key=lambda e: e.in_flight)
        self.routed += 1
        return e

