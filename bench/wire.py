"""Wire codec benchmark: a TASKS and a RESULTS message of 256 each, encoded and decoded three ways.

  hand codec       the codec qworker used before its msgspec structs: tuples packed by msgpack,
                   unpacked and checked field by field by hand-written validators (copied here,
                   as it was, for the comparison)
  msgspec structs  qworker's ``wire``: ``Task``/``TaskResult`` structs, the socket's typed
                   decoder checking the schema as it decodes
  raw msgpack      tuples packed and unpacked with no check at all: a floor, not a candidate

"build+encode" makes the 256 task (or result) objects from their fields, as the producer's
``Pending.as_task`` (or the worker) does, and encodes the message; "decode" decodes and checks it,
as the receiving socket does.  Times are µs per task, the median of --repeats runs; the ratio is
the hand codec's time over each.  Each row's encoded message is checked to decode to what was sent.

    python bench/wire.py
    python bench/wire.py --repeats 15 --tasks 256
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import timeit
from typing import Any, Callable, Optional

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import table  # noqa: E402

from qworker._errors import ErrorKind  # noqa: E402
from qworker.transport import wire  # noqa: E402


# -- the hand codec, as it was (wire.py before its msgspec structs): only what TASKS and RESULTS use --------------
def _hand_expect(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(what)


def _hand_list(obj: Any, n: int, what: str) -> list:
    _hand_expect(isinstance(obj, list) and len(obj) == n, f"{what} must be a list of {n} items")
    return obj


def _hand_int(v: Any, what: str) -> int:
    _hand_expect(type(v) is int and v >= 0, f"{what} must be a non-negative int")
    return v


def _hand_str(v: Any, what: str) -> str:
    _hand_expect(isinstance(v, str), f"{what} must be a string")
    return v


def _hand_key(v: Any) -> bytes:
    _hand_expect(isinstance(v, bytes) and len(v) == wire.KEY_BYTES, f"task key must be {wire.KEY_BYTES} bytes")
    return v


def _hand_num(v: Any, what: str) -> float:
    _hand_expect(type(v) in (int, float), f"{what} must be a number")
    return float(v)


def _hand_opt_num(v: Any, what: str) -> Optional[float]:
    return None if v is None else _hand_num(v, what)


def _hand_pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _hand_unpack(body: bytes) -> Any:
    return msgpack.unpackb(body, raw=False, strict_map_key=False)


def hand_build_tasks(obj: Any) -> list:
    _hand_expect(isinstance(obj, list), "tasks must be a list")
    tasks = []
    for t in obj:
        key, reward, params, payload, timeout_s, attempt, route = _hand_list(t, 7, "task")
        _hand_expect(isinstance(params, dict), "task params must be a map")
        _hand_expect(isinstance(payload, bytes), "task payload must be bytes")
        _hand_expect(route is None or isinstance(route, dict), "task meta must be a map or nil")  # was an int route
        tasks.append((_hand_key(key), _hand_str(reward, "reward"), params, payload, _hand_opt_num(timeout_s, "timeout"),
                      _hand_int(attempt, "attempt"), route))
    return tasks


def hand_build_results(obj: Any) -> tuple[int, int, list]:
    granted, received, rows = _hand_list(obj, 3, "results message")
    _hand_expect(isinstance(rows, list), "results must be a list")
    results = []
    for r in rows:
        key, score, extra, error, compute_s, outcome, ran = _hand_list(r, 7, "result")
        _hand_expect(extra is None or isinstance(extra, dict), "result extra must be a map or nil")
        _hand_expect(error is None or isinstance(error, str), "result error must be a string or nil")
        _hand_expect(outcome is None or isinstance(outcome, dict), "result outcome must be a map or nil")
        _hand_expect(ran is None or isinstance(ran, str), "result version must be a string or nil")
        results.append((_hand_key(key), _hand_opt_num(score, "score"), extra, error, _hand_num(compute_s, "compute_s"), outcome, ran))
    return _hand_int(granted, "granted"), _hand_int(received, "received"), results


# -- the workload -------------------------------------------------------------------------------------------------
PARAMS: dict = {}  # one dict shared by a submit_batch's tasks
RAN = "\0ran 0123456789abcdef"


def task_fields(n: int) -> list[tuple]:
    """(key, reward, params, payload, timeout_s, attempt, meta) of ``n`` gsm8k-like tasks (~200-byte payloads)."""
    payload = msgpack.packb({"response": "The answer is 42. " * 8, "ground_truth": "42"}, use_bin_type=True)
    return [(i.to_bytes(16, "big"), "gsm8k", PARAMS, payload, None, 1, None) for i in range(n)]


def result_fields(n: int) -> list[tuple]:
    """(key, score, extra, error, compute_s, outcome, ran) of ``n`` results: most plain, one in 8 with an extra,
    one in 32 failed."""
    out: list[tuple] = []
    for i in range(n):
        extra = {"pred": str(i)} if i % 8 == 0 else None
        error = wire.Fault(ErrorKind.REWARD_ERROR, "ValueError: bad input") if i % 32 == 1 else None
        out.append((i.to_bytes(16, "big"), None if error else float(i % 2), extra, error, 0.000123 + i * 1e-7, None, RAN))
    return out


def measure(fn: Callable[[], object], per: int, repeats: int) -> float:
    """Median µs per item of ``fn`` (which handles ``per`` items)."""
    number = max(1, int(0.05 / max(1e-7, min(timeit.repeat(fn, number=1, repeat=3)))))
    times = timeit.repeat(fn, number=number, repeat=repeats)
    return statistics.median(times) / number / per * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=256, help="tasks (and results) per message (default 256)")
    ap.add_argument("--repeats", type=int, default=9, help="timed runs per cell; the median is shown (default 9)")
    args = ap.parse_args()
    n, repeats = args.tasks, args.repeats
    limit = 1 << 30

    tf = task_fields(n)
    rf = result_fields(n)
    rf_text = [(k, s, e, None if err is None else str(err), c, o, r) for k, s, e, err, c, o, r in rf]  # the hand codec's errors: text

    # TASKS ------------------------------------------------------------------------------------------------------
    hand_tasks_body = _hand_pack([tuple(f) for f in tf])
    new_tasks_frames = wire.encode(wire.Tasks([wire.Task(*f) for f in tf]))
    raw_tasks_body = hand_tasks_body
    assert hand_build_tasks(_hand_unpack(hand_tasks_body)) == [tuple(f) for f in tf]
    assert wire.WORKER.decode(*new_tasks_frames, max_bytes=limit) == wire.Tasks([wire.Task(*f) for f in tf])

    tasks_rows = {
        "hand codec": (lambda: [wire.TASKS, _hand_pack([(k, r, p, b, t, a, ro) for k, r, p, b, t, a, ro in tf])],
                       lambda: hand_build_tasks(_hand_unpack(hand_tasks_body)), len(hand_tasks_body)),
        "msgspec structs": (lambda: wire.encode(wire.Tasks([wire.Task(k, r, p, b, t, a, ro) for k, r, p, b, t, a, ro in tf])),
                            lambda: wire.WORKER.decode(*new_tasks_frames, max_bytes=limit), len(new_tasks_frames[1])),
        "raw msgpack (no check)": (lambda: [wire.TASKS, _hand_pack([(k, r, p, b, t, a, ro) for k, r, p, b, t, a, ro in tf])],
                                   lambda: _hand_unpack(raw_tasks_body), len(raw_tasks_body)),
    }

    # RESULTS ----------------------------------------------------------------------------------------------------
    hand_results_body = _hand_pack([n, n, rf_text])
    new_results = wire.Results(n, n, [wire.TaskResult(*f) for f in rf])
    new_results_frames = wire.encode(new_results)
    assert hand_build_results(_hand_unpack(hand_results_body))[2] == [tuple(f) for f in rf_text]
    assert wire.PRODUCER.decode(*new_results_frames, max_bytes=limit) == new_results

    results_rows = {
        "hand codec": (lambda: [wire.RESULTS, _hand_pack([n, n, [(k, s, e, er, c, o, r) for k, s, e, er, c, o, r in rf_text]])],
                       lambda: hand_build_results(_hand_unpack(hand_results_body)), len(hand_results_body)),
        "msgspec structs": (lambda: wire.encode(wire.Results(n, n, [wire.TaskResult(k, s, e, er, c, o, r) for k, s, e, er, c, o, r in rf])),
                            lambda: wire.PRODUCER.decode(*new_results_frames, max_bytes=limit), len(new_results_frames[1])),
        "raw msgpack (no check)": (lambda: [wire.RESULTS, _hand_pack([n, n, [(k, s, e, er, c, o, r) for k, s, e, er, c, o, r in rf_text]])],
                                   lambda: _hand_unpack(hand_results_body), len(hand_results_body)),
    }

    print(f"wire codecs: one message of {n} tasks / {n} results; µs per task, median of {repeats} runs; "
          f"Python {sys.version.split()[0]}, msgspec {__import__('msgspec').__version__}, msgpack {msgpack.version}")
    for title, rows in (("TASKS (producer -> worker)", tasks_rows), ("RESULTS (worker -> producer)", results_rows)):
        measured = {name: (measure(enc, n, repeats), measure(dec, n, repeats), size) for name, (enc, dec, size) in rows.items()}
        hand_total = sum(measured["hand codec"][:2])
        out = []
        for name, (enc, dec, size) in measured.items():
            total = enc + dec
            out.append([name, f"{enc:.3f}", f"{dec:.3f}", f"{total:.3f}", f"{hand_total / total:.2f}x", f"{size / n:.1f}"])
        print(f"\n{title}")
        print(table(["codec", "build+encode µs", "decode µs", "total µs", "vs hand", "bytes/task"], out))


if __name__ == "__main__":
    from _common import recorded

    with recorded("wire"):  # the printed tables also go to docs/bench/wire.md
        main()
