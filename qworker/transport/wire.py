"""Wire messages between producer, pools, workers and status clients.

Every message is two frames, ``[kind, body]``: a one-byte kind and a msgpack
body (on the producer's ROUTER socket a routing-id frame comes first).  Nothing
here is pickled.  ``decode`` checks each body against its schema and raises
``WireError`` naming what is wrong; it holds no other logic.

Credit: a worker reports two running totals, ``granted`` (tasks it has ever
agreed to hold) and ``received`` (tasks it has ever been sent).  The producer
may send ``granted - sent`` more tasks.  Totals, not deltas, so a duplicated or
replayed report is harmless and a restarted producer can resynchronise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TypeVar, Union

import msgpack

from .._exceptions import WireError

_M = TypeVar("_M")

READY = b"R"  # worker -> producer: hello, and idle heartbeat carrying credit
TASKS = b"T"  # producer -> worker: a batch of tasks
RESULTS = b"D"  # worker -> producer: a batch of results, with credit
GIVEBACK = b"G"  # worker -> producer: tasks it will not run (draining, or asked to)
REVOKE = b"V"  # producer -> worker: give back up to n tasks you have not started
BYE = b"B"  # worker -> producer: leaving; drop my leases
POOL = b"P"  # pool -> producer: supervisor report (liveness, losses)
STATUS = b"S"  # client -> producer: what do you see?
STATUS_REPLY = b"s"  # producer -> client

KEY_BYTES = 16  # blake2b-128 task keys

# (key, reward, params, payload, timeout_s or None, attempt, meta): meta is what the task's admission
# policy attached to this delivery (``_admission``; handed to the reward as ``EndpointCall.meta``), None
# for a task with no policy
Task = tuple[bytes, str, dict, bytes, Union[float, None], int, Union[dict, None]]
# (key, score or None, extra or None, error or None, compute_s, meta, ran): meta is what the reward reported
# about its admitted call, for its policy (None when it reported none); ran is the version of the code that computed it
# (its declared version or its code fingerprint, ``_fingerprint.reward_version``), None when it has none or the
# reward could not be loaded
TaskResult = tuple[bytes, Union[float, None], Union[dict, None], Union[str, None], float, Union[dict, None], Union[str, None]]


@dataclass(slots=True)
class Ready:
    worker: str
    pool: str
    pid: int
    host: str
    granted: int
    received: int
    finished: int  # tasks completed or given back; == received means idle
    rewards: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    versions: dict[str, Union[str, None]] = field(default_factory=dict)  # reward -> the version of the code loaded here


@dataclass(slots=True)
class Tasks:
    tasks: list[Task]


@dataclass(slots=True)
class Results:
    granted: int
    received: int
    results: list[TaskResult]


@dataclass(slots=True)
class Giveback:
    granted: int
    received: int
    keys: list[bytes]


@dataclass(slots=True)
class Revoke:
    n: int


@dataclass(slots=True)
class Bye:
    reason: str


@dataclass(slots=True)
class WorkerReport:
    worker: str
    pid: int
    alive: bool
    busy_s: float  # seconds the current task has run; 0 when idle
    restarts: int
    rss_mb: float


@dataclass(slots=True)
class Lost:
    worker: str
    reason: str  # "timeout", "crashed: exit -9", "recycled: rss ...", ...
    task: Union[bytes, None]  # the task it was running, when known


@dataclass(slots=True)
class PoolReport:
    pool: str
    host: str
    pid: int
    state: str  # "running" | "draining" | "stopped"
    workers: list[WorkerReport]
    lost: list[Lost]


@dataclass(slots=True)
class StatusRequest:
    pass


@dataclass(slots=True)
class StatusReply:
    status: dict


Message = Union[Ready, Tasks, Results, Giveback, Revoke, Bye, PoolReport, StatusRequest, StatusReply]


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def encode(msg: Message) -> list[bytes]:
    """Return the ``[kind, body]`` frames for ``msg``."""
    if isinstance(msg, Tasks):
        return [TASKS, _pack(msg.tasks)]
    if isinstance(msg, Results):
        return [RESULTS, _pack([msg.granted, msg.received, msg.results])]
    if isinstance(msg, Ready):
        return [
            READY,
            _pack([msg.worker, msg.pool, msg.pid, msg.host, msg.granted, msg.received, msg.finished, msg.rewards, msg.errors,
                   msg.versions]),
        ]
    if isinstance(msg, Giveback):
        return [GIVEBACK, _pack([msg.granted, msg.received, msg.keys])]
    if isinstance(msg, Revoke):
        return [REVOKE, _pack([msg.n])]
    if isinstance(msg, Bye):
        return [BYE, _pack([msg.reason])]
    if isinstance(msg, PoolReport):
        workers = [[w.worker, w.pid, w.alive, w.busy_s, w.restarts, w.rss_mb] for w in msg.workers]
        lost = [[lo.worker, lo.reason, lo.task] for lo in msg.lost]
        return [POOL, _pack([msg.pool, msg.host, msg.pid, msg.state, workers, lost])]
    if isinstance(msg, StatusRequest):
        return [STATUS, _pack([])]
    if isinstance(msg, StatusReply):
        return [STATUS_REPLY, _pack(msg.status)]
    raise TypeError(f"not a wire message: {type(msg).__name__}")


def decode(kind: bytes, body: bytes, *, max_bytes: int) -> Message:
    """Decode and schema-check one message; raise ``WireError`` if it is not valid."""
    return decode_with(_BUILDERS, kind, body, max_bytes=max_bytes)


def decode_with(builders: Mapping[bytes, Callable[[Any], _M]], kind: bytes, body: bytes, *, max_bytes: int) -> _M:
    """Decode a body with the builder of its kind (this protocol's or the client protocol's)."""
    if len(body) > max_bytes:
        raise WireError(f"message of {len(body)} bytes exceeds the {max_bytes}-byte limit")
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise WireError(f"undecodable msgpack body for kind {kind!r}: {exc}") from None
    try:
        return builders[kind](obj)
    except KeyError:
        raise WireError(f"unknown message kind {kind[:8]!r}") from None
    except (TypeError, ValueError, IndexError) as exc:
        raise WireError(f"malformed {_NAMES.get(kind) or repr(kind)} message: {exc}") from None


def _expect(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(what)


def _list(obj: Any, n: int, what: str) -> list:
    _expect(isinstance(obj, list) and len(obj) == n, f"{what} must be a list of {n} items")
    return obj


def _int(v: Any, what: str) -> int:
    _expect(type(v) is int and v >= 0, f"{what} must be a non-negative int")
    return v


def _str(v: Any, what: str) -> str:
    _expect(isinstance(v, str), f"{what} must be a string")
    return v


def _key(v: Any) -> bytes:
    _expect(isinstance(v, bytes) and len(v) == KEY_BYTES, f"task key must be {KEY_BYTES} bytes")
    return v


def _num(v: Any, what: str) -> float:
    _expect(type(v) in (int, float), f"{what} must be a number")
    return float(v)


def _opt_num(v: Any, what: str) -> Union[float, None]:
    return None if v is None else _num(v, what)


def _build_tasks(obj: Any) -> Tasks:
    _expect(isinstance(obj, list), "tasks must be a list")
    tasks: list[Task] = []
    for t in obj:
        key, reward, params, payload, timeout_s, attempt, meta = _list(t, 7, "task")
        _expect(isinstance(params, dict), "task params must be a map")
        _expect(isinstance(payload, bytes), "task payload must be bytes")
        _expect(meta is None or isinstance(meta, dict), "task meta must be a map or nil")
        tasks.append((_key(key), _str(reward, "reward"), params, payload, _opt_num(timeout_s, "timeout"), _int(attempt, "attempt"), meta))
    return Tasks(tasks)


def _build_results(obj: Any) -> Results:
    granted, received, rows = _list(obj, 3, "results message")
    _expect(isinstance(rows, list), "results must be a list")
    results: list[TaskResult] = []
    for r in rows:
        key, score, extra, error, compute_s, meta, ran = _list(r, 7, "result")
        _expect(extra is None or isinstance(extra, dict), "result extra must be a map or nil")
        _expect(error is None or isinstance(error, str), "result error must be a string or nil")
        _expect(meta is None or isinstance(meta, dict), "result meta must be a map or nil")
        _expect(ran is None or isinstance(ran, str), "result version must be a string or nil")
        results.append((_key(key), _opt_num(score, "score"), extra, error, _num(compute_s, "compute_s"), meta, ran))
    return Results(_int(granted, "granted"), _int(received, "received"), results)


def _build_ready(obj: Any) -> Ready:
    worker, pool, pid, host, granted, received, finished, rewards, errors, versions = _list(obj, 10, "ready message")
    _expect(isinstance(rewards, list) and all(isinstance(r, str) for r in rewards), "rewards must be strings")
    _expect(isinstance(errors, list) and all(isinstance(e, str) for e in errors), "errors must be strings")
    _expect(isinstance(versions, dict) and all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in versions.items()),
            "versions must map reward names to strings or nil")
    return Ready(
        _str(worker, "worker"), _str(pool, "pool"), _int(pid, "pid"), _str(host, "host"),
        _int(granted, "granted"), _int(received, "received"), _int(finished, "finished"), rewards, errors, versions,
    )


def _build_giveback(obj: Any) -> Giveback:
    granted, received, keys = _list(obj, 3, "giveback message")
    _expect(isinstance(keys, list), "keys must be a list")
    return Giveback(_int(granted, "granted"), _int(received, "received"), [_key(k) for k in keys])


def _build_pool(obj: Any) -> PoolReport:
    pool, host, pid, state, workers, lost = _list(obj, 6, "pool report")
    _expect(state in ("running", "draining", "stopped"), "pool state must be running, draining or stopped")
    _expect(isinstance(workers, list) and isinstance(lost, list), "workers and lost must be lists")
    reports = []
    for w in workers:
        wid, wpid, alive, busy_s, restarts, rss_mb = _list(w, 6, "worker report")
        _expect(isinstance(alive, bool), "alive must be a bool")
        reports.append(WorkerReport(_str(wid, "worker"), _int(wpid, "pid"), alive, _num(busy_s, "busy_s"), _int(restarts, "restarts"), _num(rss_mb, "rss_mb")))
    losses = []
    for lo in lost:
        wid, reason, task = _list(lo, 3, "loss")
        losses.append(Lost(_str(wid, "worker"), _str(reason, "reason"), None if task is None else _key(task)))
    return PoolReport(_str(pool, "pool"), _str(host, "host"), _int(pid, "pid"), state, reports, losses)


def _build_bye(obj: Any) -> Bye:
    (reason,) = _list(obj, 1, "bye message")
    return Bye(_str(reason, "reason"))


def _build_revoke(obj: Any) -> Revoke:
    (n,) = _list(obj, 1, "revoke message")
    return Revoke(_int(n, "n"))


def _build_status_request(obj: Any) -> StatusRequest:
    _expect(obj == [], "status request must be an empty list")
    return StatusRequest()


def _build_status_reply(obj: Any) -> StatusReply:
    _expect(isinstance(obj, dict), "status reply must be a map")
    return StatusReply(obj)


_BUILDERS: dict[bytes, Callable[[Any], Message]] = {
    TASKS: _build_tasks,
    RESULTS: _build_results,
    READY: _build_ready,
    GIVEBACK: _build_giveback,
    BYE: _build_bye,
    REVOKE: _build_revoke,
    POOL: _build_pool,
    STATUS: _build_status_request,
    STATUS_REPLY: _build_status_reply,
}
_NAMES = {TASKS: "TASKS", RESULTS: "RESULTS", READY: "READY", GIVEBACK: "GIVEBACK", REVOKE: "REVOKE", BYE: "BYE", POOL: "POOL", STATUS: "STATUS", STATUS_REPLY: "STATUS_REPLY"}
