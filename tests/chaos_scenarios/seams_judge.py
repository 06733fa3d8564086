"""The judge seam: a judge that goes down for 2 s mid-run, and one that answers with hostile headers and giant bodies.

Each runs a real ``Producer`` (two local workers) against a ``RecordingJudge``
(a ``MockJudge`` that records every 200 it sends) and measures, from the
judge's side, when answers came: throughput before the outage, and the
recovery time, the seconds from the end of the outage until a 2 s window runs
at 90% of the throughput of the 3 s before it (``recovery_s``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from qworker import Producer
from tests.chaos_scenarios.measure import Outcome, Timeline, collect, paid_twice
from tests.chaos_scenarios.processes import HB
from tests.chaos_scenarios.recording_judge import RecordingJudge, judge_config, judge_rows

__all__ = ["judge_outage", "hostile_judge", "recovery_after"]

OUTAGE_S = 2.0
WINDOW_S = 2.0
HOSTILE_HEADERS = {
    "x-ratelimit-limit-requests": "-1", "x-ratelimit-remaining-requests": "inf", "x-ratelimit-reset-requests": "1e400",
    "x-ratelimit-limit-tokens": "nan", "retry-after": "inf", "retry-after-ms": "-5",
}


def _rate(times: list[float], lo: float, hi: float) -> float:
    return sum(1 for t in times if lo <= t < hi) / (hi - lo)


def recovery_after(times: list[float], start: float, end: float, share: float = 0.9) -> tuple[float, Optional[float]]:
    """(answers/s in the 3 s before ``start``, seconds from ``end`` until a 2 s window of answers runs at ``share`` of it; None: never)."""
    before = _rate(times, start - 3.0, start)
    t, last = end, max(times, default=end)
    while t + WINDOW_S <= last:
        if _rate(times, t, t + WINDOW_S) >= share * before:
            return before, t - end
        t += 0.1
    return before, None


def _wait_steady(judge: RecordingJudge, served: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while judge.stats["served"] < served and time.monotonic() < deadline:
        time.sleep(0.02)


def judge_outage(workdir: Path, n: int, how: str = "503") -> Outcome:
    """A judge (capacity 32, 0.2 s: 160 answers/s) that goes down for 2 s once the run is steady.

    ``how``: ``"503"`` or ``"429"`` (each with ``Retry-After: 1``), ``"reset"`` or ``"refuse"`` (the port refuses connections).
    With ``"refuse"`` the connections open at that moment are reset too, answers
    the judge computed included: those tasks are sent again, so up to the 32 in
    flight may be paid twice (the bound).
    """
    judge = RecordingJudge(capacity=32, latency_s=0.2, seed=7).start()
    try:
        with Producer(local_workers=2, heartbeat_s=HB, config=judge_config({"url": judge.url})) as p:
            futures = p.submit_batch("llm_judge", judge_rows(n, f"outage-{how}"))
            tl = Timeline(futures)
            _wait_steady(judge, min(n // 3, 800))
            down_at = time.monotonic()
            judge.go_down(OUTAGE_S, how)
            results = collect(p, futures, 300)
            ep = p.status()["judges"][0]["endpoints"][0]
        with judge.lock:
            times = [t for t, _ in judge.answers]
        stats = dict(judge.stats)
        twice = paid_twice(judge.answered())
    finally:
        judge.stop_soon()
    before, recovery = recovery_after(times, down_at, down_at + OUTAGE_S)
    failed = [r for r in results if r is not None and not r.ok]
    rec = "never" if recovery is None else f"{recovery:.1f} s"
    return Outcome(
        f"judge: down 2 s ({how})", f"the judge answers every request {how} for 2 s mid-run", n,
        sum(r is None for r in results), twice, 32 if how == "refuse" else 0, len(failed), tl.stall(), OUTAGE_S + 10.0,
        f"recovery to 90% of {before:.0f} answers/s: {rec} after the outage; {stats['outage_replies']} requests turned away; "
        f"limit at the end {ep['limit']}",
        {"results": results, "endpoint": ep, "judge_stats": stats, "failed": failed, "before": before},
        recovery_s=recovery)


def hostile_judge(workdir: Path, n: int) -> Outcome:
    """Interleaved: hostile rate-limit and Retry-After headers on every reply, two giant (20 MiB) answers, and 2 s down.

    The two tasks given a giant answer fail (naming the size cap); no other task may fail.
    """
    judge = RecordingJudge(capacity=32, latency_s=0.05, seed=9).start()
    try:
        with Producer(local_workers=2, heartbeat_s=HB, config=judge_config({"url": judge.url})) as p:
            futures = p.submit_batch("llm_judge", judge_rows(n, "hostile"))
            tl = Timeline(futures)
            judge.hostile(HOSTILE_HEADERS)
            _wait_steady(judge, n // 4)
            judge.giant(2, 20 * 1024 * 1024)
            _wait_steady(judge, n // 2)
            judge.go_down(OUTAGE_S, "503")
            results = collect(p, futures, 300)
            ep = p.status()["judges"][0]["endpoints"][0]
        stats = dict(judge.stats)
        twice = paid_twice(judge.answered())
    finally:
        judge.stop_soon()
    failed = [r for r in results if r is not None and not r.ok]
    too_large = [r for r in failed if "over the cap" in (r.error or "")]
    return Outcome(
        "judge: hostile headers, giant bodies, 2 s down", "headers -1/inf/NaN/1e400 on every reply, two 20 MiB answers, 2 s of 503",
        n, sum(r is None for r in results), twice, 0, len(failed) - len(too_large), tl.stall(), OUTAGE_S + 10.0,
        f"{len(too_large)} tasks failed on a giant answer (expected 2); limit at the end {ep['limit']}; "
        f"{stats['outage_replies']} requests turned away",
        {"results": results, "endpoint": ep, "judge_stats": stats, "failed": failed, "too_large": too_large},
        clean=len(too_large) == 2)
