"""Producers on one host that call the same judge endpoint share it evenly.

Two trainers that each embed a Producer (no ``qworker serve`` between them)
keep one limit each for the same endpoint.  On a server that refuses past its
capacity the producer already there refills every slot the moment it frees,
and one that starts later gets a few percent of the answers.  Producers on one
host fix this with notes on a board (``DirBoard``: the directory ``judges`` in
qworker's per-user runtime directory, ``$QWORKER_RUNTIME_DIR`` or
``$XDG_RUNTIME_DIR/qworker-<uid>``, as for the producer registry): every
``NOTE_EVERY_S`` a gate writes, per endpoint, what it holds in flight, its
limit and whether it has tasks waiting, and reads the other producers' notes.
The endpoint then takes (``endpoint.Endpoint.share``):

* its limiter judges refusals and latency against the endpoint's whole load,
  its own requests in flight plus the peers' (so every producer's limit
  estimates the endpoint's capacity, not its own share of it);
* a producer with tasks waiting may hold ``(limit - held by peers with nothing
  waiting) / producers with tasks waiting``, at least 1: even shares of the rest;
* a producer that joins adopts the largest limit among its peers before its
  first answer, rather than slow-starting into a full server (once they were
  refused, with their refusal level and out of slow start: its first refusal
  caps the limit they share by one, not by slow start's third); and every
  producer learns the highest capacity any of them saw and climbs back to it
  when one of them finds that capacity returned (the limit they share is the
  lowest of theirs, so all of them must).

A producer alone sees no notes and runs exactly as without this.  A note older
than ``STALE_S`` is not counted (a producer that stopped or hung holds nothing
any more, or soon will not); one older than ``REMOVE_S`` is deleted.  A
producer that closes removes its notes at once.  A note
holds counts and a hash of the endpoint URL, nothing else.  A board that fails
(a directory that is not ours, not writable, a full disk) turns sharing off for
that gate with one warning; dispatch goes on, each producer on its own limit.
Producers on different hosts do not see one another's notes: to share an
endpoint across hosts, share one ``qworker serve``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import stat
import tempfile
import time
import uuid
import zlib
from collections import deque
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol

from ...transport.sockets import runtime_dir

if TYPE_CHECKING:
    from .endpoint import Endpoint

log = logging.getLogger("qworker")

__all__ = ["Board", "DirBoard", "MemoryBoard", "NOTE_EVERY_S", "Note", "Peers", "default_board"]

NOTE_EVERY_S = 0.1  # how often a gate writes its notes and reads the others': peers' counts are at most two notes old
STALE_S = 2.0  # a note older than this is not counted
QUIET_S = 1.0  # a note older than this (ten missed) is not evidence of a capacity held (``Peers._held_level``)
HELD_S = 1.0  # a level held together this long (four round trips if longer) with no refusal is a capacity seen
REMOVE_S = 60.0  # one older than this is deleted
MAX_NOTE_BYTES = 4096
NOTE_BYTES = 512  # a note file's size: every rewrite covers the last one whole
MAX_COUNT = 10**6  # a note's counts beyond this are not believed (nor NaN, nor infinite, nor negative)


@dataclass(frozen=True, slots=True)
class Note:
    """What one producer says about one endpoint: requests in flight, its limit, whether tasks wait; ``at``: board seconds."""

    producer: str
    in_flight: int
    limit: float
    wants: bool
    at: float
    high: float = 0.0  # the highest capacity the producer's limiter saw (``AdaptiveLimit.high``)
    regain: float = 0.0  # the level its limiter is climbing back to, capacity having returned (0: none)
    refusals: int = 0  # refusals its limiter took as news so far (``AdaptiveLimit.refusals``)
    refused_level: float = 0.0  # every producer's requests in flight at the last of them, or less (``CapacityMemory.admits``; 0: none yet)


class Board(Protocol):
    def clock(self) -> float:
        """The board's time (seconds): notes are stamped and aged with it."""

    def publish(self, key: str, note: Note) -> None:
        """Write ``note`` for the endpoint ``key`` (replacing this producer's last one); ``OSError`` when the board fails."""

    def read(self, key: str) -> list[Note]:
        """Every fresh note for the endpoint ``key``, this producer's included; ``OSError`` when the board fails."""

    def withdraw(self, key: str, producer: str) -> None:
        """Remove ``producer``'s note for ``key`` (it leaves); nothing when there is none; ``OSError`` when the board fails."""


class MemoryBoard:
    """A board in memory, for producers in one process and for simulations (``clock``: their time)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._notes: dict[str, dict[str, Note]] = {}

    def publish(self, key: str, note: Note) -> None:
        self._notes.setdefault(key, {})[note.producer] = note

    def read(self, key: str) -> list[Note]:
        now = self.clock()
        return [n for n in self._notes.get(key, {}).values() if abs(now - n.at) <= STALE_S]

    def withdraw(self, key: str, producer: str) -> None:
        self._notes.get(key, {}).pop(producer, None)


class DirBoard:
    """Notes as small files in ``root/<endpoint key>/<producer>.json``, each its JSON after a checksum, rewritten in
    place (a directory only this user may use)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._checked: set[str] = set()
        self._fds: dict[str, int] = {}  # per endpoint key: this producer's note, open for rewriting
        self._last: dict[str, Note] = {}  # per note file: the last note read whole from it

    def clock(self) -> float:
        return time.time()

    def _dir(self, key: str) -> str:
        path = os.path.join(self.root, key)
        if path not in self._checked:
            for p in (self.root, path):
                os.makedirs(p, mode=0o700, exist_ok=True)
                st = os.lstat(p)
                if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
                    raise PermissionError(f"{p} is not a directory owned by this user and closed to others")
            self._checked.add(path)
        return path

    def publish(self, key: str, note: Note) -> None:
        """Rewrite this producer's note in place: one ``pwrite`` of a fixed size at offset 0, its checksum first.

        Not a new file renamed over the old one: ext4 flushes a file renamed over another
        (``auto_da_alloc``), some 4 ms on an idle disk and more on a busy one, on the
        dispatcher thread at every note.  A reader that meets a note half rewritten sees
        the checksum fail and keeps that producer's last note (``read``)."""
        fd = self._fds.get(key)
        if fd is not None and os.fstat(fd).st_nlink == 0:  # removed by a peer (aged out while this one was stopped)
            os.close(fd)
            fd = None
        if fd is None:
            path = os.path.join(self._dir(key), f"{note.producer}.json")
            fd = self._fds[key] = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        body = json.dumps(asdict(note), separators=(",", ":")).encode()
        data = b"%08x %s" % (zlib.crc32(body), body)
        if len(data) > NOTE_BYTES:
            raise ValueError(f"a share note of {len(data)} bytes is over {NOTE_BYTES}")
        os.pwrite(fd, data.ljust(NOTE_BYTES), 0)  # always the same size: no tail of an older note

    def read(self, key: str) -> list[Note]:
        folder = self._dir(key)
        now = self.clock()
        notes = []
        for name in os.listdir(folder):
            if not name.endswith(".json"):
                continue
            path = os.path.join(folder, name)
            note: Optional[Note]
            try:
                with open(path, "rb") as f:
                    note = _parse(f.read(MAX_NOTE_BYTES))
                self._last[path] = note
            except FileNotFoundError:
                self._last.pop(path, None)
                continue  # removed meanwhile
            except _Torn:
                note = self._last.get(path)  # caught while its producer rewrote it: its last note stands
            except (ValueError, KeyError, TypeError, OSError):
                note = None  # foreign: aged by the file's time
            age = now - (note.at if note else _mtime(path))
            if age > REMOVE_S:
                self._last.pop(path, None)
                try:
                    os.unlink(path)
                except OSError:
                    pass
            elif note is not None and abs(age) <= STALE_S and _believable(note):
                # (a note from the future: the clock was stepped back; its writer rewrites it within NOTE_EVERY_S)
                notes.append(note)
        return notes

    def withdraw(self, key: str, producer: str) -> None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            os.close(fd)
        folder = os.path.join(self.root, key)
        if folder not in self._checked:  # never written through this board: no note to remove, nothing to create
            return
        try:
            os.unlink(os.path.join(folder, f"{producer}.json"))
        except FileNotFoundError:
            pass


class _Torn(ValueError):
    """A note read while its producer rewrote it (its checksum fails)."""


def _parse(raw: bytes) -> Note:
    """A note file's bytes: ``<crc32 of the JSON, 8 hex digits> <JSON>``, padded with spaces (or, as older
    producers wrote it, the JSON alone).  ``_Torn`` when the checksum fails; ValueError, KeyError or TypeError
    when it is not a note."""
    raw = raw.rstrip(b" ")
    if raw[:1] != b"{":
        crc, _, raw = raw.partition(b" ")
        if b"%08x" % zlib.crc32(raw) != crc:
            raise _Torn("checksum")
    d = json.loads(raw)
    return Note(str(d["producer"]), int(d["in_flight"]), float(d["limit"]), bool(d["wants"]), float(d["at"]),
                float(d.get("high", 0.0)), float(d.get("regain", 0.0)), int(d.get("refusals", 0)), float(d.get("refused_level", 0.0)))


def _believable(note: Note) -> bool:
    numbers = (note.limit, note.high, note.regain, note.refused_level)
    return 0 <= note.in_flight <= MAX_COUNT and all(math.isfinite(x) and 0 <= x <= MAX_COUNT for x in numbers)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()


def default_board() -> DirBoard:
    """The board every producer of this user on this host finds: ``judges`` in the runtime directory."""
    try:
        base = runtime_dir()
    except OSError:  # the board reports it (and sharing goes off) on its first note
        base = os.path.join(tempfile.gettempdir(), f"qworker-{os.getuid()}")
    return DirBoard(os.path.join(base, "judges"))


def endpoint_key(url: str) -> str:
    """The board's name for an endpoint: a hash of its URL (which may carry credentials)."""
    return hashlib.sha256(url.encode("utf-8", "replace")).hexdigest()[:32]


class Peers:
    """One gate's notes: ``tick`` writes and reads them (dispatcher thread) and sets each endpoint's view of its peers."""

    def __init__(self, board: Board, endpoints: list[Endpoint]) -> None:
        self.board: Optional[Board] = board
        self.endpoints = endpoints
        self.producer = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.keys = [endpoint_key(e.url) for e in endpoints]
        self.due = -float("inf")  # when the next notes are due (the gate's clock)
        # per endpoint: (board time, every producer's requests at the server) at each note since the last refusal
        self._held: list[deque[tuple[float, int]]] = [deque() for _ in endpoints]
        self._drops = [-1 for _ in endpoints]  # per endpoint: the limiter's refusals so far, at the last notes
        self._heard: list[dict[str, int]] = [{} for _ in endpoints]  # per endpoint: each peer's refusals, as last read

    def tick(self, now: float, wants: bool) -> None:
        """Every ``NOTE_EVERY_S`` (``now``: the gate's clock): say what this gate holds and wants; learn what the peers do."""
        if self.board is None or now < self.due:
            return
        self.due = now + NOTE_EVERY_S
        board = self.board
        try:
            at = board.clock()
            for i, (e, key) in enumerate(zip(self.endpoints, self.keys, strict=True)):
                lim = e.limit
                e.peers = peers = [n for n in board.read(key) if n.producer != self.producer]
                # This producer's answers are its share of the endpoint's: Little's law on them, scaled up, is the endpoint's
                # (each answer stands for itself at least: with nothing at the server, the share says nothing)
                lim.peers = len(peers)
                lim.answers_scale = max(1.0, min(1.0 + len(peers), e.total_at_server() / max(1, e.at_server())))
                if peers:
                    lim.adopt(max(n.limit for n in peers), max(self._held_level(i, e, at), *(n.high for n in peers)),
                              max(n.regain for n in peers), max(n.refused_level for n in peers))
                    self._hear_refusals(i, e)
                    ids = sorted([self.producer, *(n.producer for n in peers if n.wants)])
                    e.turn = (ids.index(self.producer) + int(at)) % len(ids)  # the odd requests go round once a second
                # Written after learning from the peers: a producer that joins says the limit it adopted, not the
                # initial one it had (which, the lowest, would be everyone's until its next note)
                refused_level = lim.refused_level if lim.refused_level < math.inf else 0.0
                board.publish(key, Note(self.producer, e.at_server(), round(lim.limit, 3), wants and not e.down_reason, at,
                                        round(lim.high, 3), round(lim.regaining_to(), 3), lim.refusals, refused_level))
        except Exception as exc:  # noqa: BLE001 (the board is an aid: whatever breaks it must not stop dispatch)
            log.warning("qworker: judge endpoints' share board failed (%s); this producer now keeps its own limits, "
                        "unaware of other producers on this host", exc)
            self.close()  # (its notes, if it can still remove them, and the files it holds open)
            for e in self.endpoints:
                e.peers = []
                e.limit.answers_scale, e.limit.peers = 1.0, 0

    def close(self) -> None:
        """This producer leaves: its notes go at once, so peers take back its share now rather than when the notes go stale."""
        board, self.board = self.board, None
        if board is None:
            return
        for key in self.keys:
            try:
                board.withdraw(key, self.producer)
            except Exception as exc:  # noqa: BLE001 (leaving must not fail: a note left behind goes stale in STALE_S)
                log.debug("qworker: could not remove a judge share note: %s", exc)

    def _hear_refusals(self, i: int, e: Endpoint) -> None:
        """A refusal a peer took since its last note caps this limit too: it was the same server, at every producer's load."""
        heard = self._heard[i]
        for n in e.peers:
            before = heard.get(n.producer)
            heard[n.producer] = n.refusals
            if before is not None and n.refusals > before and n.refused_level >= 1:
                e.limit.cap(int(n.refused_level))
        if len(heard) > 4 * len(e.peers) + 16:  # forget producers long gone
            live = {n.producer for n in e.peers}
            for k in [k for k in heard if k not in live]:
                del heard[k]

    def _held_level(self, i: int, e: Endpoint, at: float) -> float:
        """A level every producer together held for a span of Little's law (``HELD_S``, or four round trips if longer)
        with no refusal: a capacity seen (0 when none).

        Producers that share an endpoint keep below it and are seldom refused, so
        their limiters rarely find its capacity the way one producer alone does
        (two lone refusals at one level); this is how they learn it instead, and
        climb back to it when it returns.  Held for as long as one producer's Little's law asks of its answers
        (``AdaptiveLimit.sustained``), not from one note to the next: a token bucket's burst holds any level for
        a moment, and without a gap of more than ``QUIET_S`` between two notes read.  Never above where queueing
        began.  Not while a peer's note is quiet (a producer killed or stalled: what it says it holds may be gone).
        """
        total, drops = e.total_at_server(), e.limit.drops
        held = self._held[i]
        if drops != self._drops[i]:
            self._drops[i] = drops
            held.clear()
        if held and at - held[-1][0] > QUIET_S:  # a gap (no peer meanwhile, or a stalled dispatcher): held since now
            held.clear()
        held.append((at, total))
        span = max(HELD_S, 4 * e.limit.rtt)
        while len(held) > 1 and held[1][0] <= at - span:  # (the oldest kept is the last note at or before the span began)
            held.popleft()
        if held[0][0] > at - span or any(at - n.at > QUIET_S for n in e.peers):
            return 0.0
        return min(float(min(t for _, t in held)), e.limit.knee_level)
