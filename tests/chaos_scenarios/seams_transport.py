"""The producer ↔ worker seam under big results: a mix near and over the frame limit."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from qworker import Producer
from tests.chaos_scenarios.measure import Outcome, Timeline, collect
from tests.chaos_scenarios.processes import HB, TEST_REWARDS

MAX_MESSAGE_BYTES = 4 * 1024 * 1024


def _size(i: int) -> int:
    """The ``extra`` blob of task ``i``: mostly tiny; some 300 kB; some just under, some just over the frame limit."""
    if i % 25 == 7:
        return MAX_MESSAGE_BYTES - 2048  # fits one frame, alone
    if i % 25 == 17:
        return MAX_MESSAGE_BYTES + 1  # fits no frame: only these may fail, as bad_result
    if i % 5 == 3:
        return 300_000
    return 100


def big_results(workdir: Path, n: int) -> Outcome:
    """``n`` ``big_extra`` tasks on 2 local workers under a 4 MiB frame limit.

    Lost: unresolved, or resolved ok with the wrong score or blob.  Innocent: a task
    under the limit that failed, or one over it that failed as anything but
    ``bad_result``.  Clean: no worker was quarantined.
    """
    sizes = [_size(i) for i in range(n)]
    with Producer(local_workers=2, reward_modules=[TEST_REWARDS], heartbeat_s=HB, max_message_bytes=MAX_MESSAGE_BYTES) as p:
        p.map("noop", [{"warm": i} for i in range(20)], timeout=60)
        futures = p.submit_batch("big_extra", [{"i": i, "bytes": b} for i, b in enumerate(sizes)])
        tl = Timeline(futures)
        results = collect(p, futures, 300)
        status = p.status()
    over = {i for i, b in enumerate(sizes) if b > MAX_MESSAGE_BYTES}
    lost = sum(r is None or (r.ok and (r.score != float(i) or r.extra.get("blob") != bytes([i % 251]) * sizes[i]))
               for i, r in enumerate(results))
    innocent = sum(r is not None and not r.ok and (i not in over or r.error_kind != "bad_result") for i, r in enumerate(results))
    quarantined = [w["worker"] for pl in status["pools"] for w in pl["workers"] if w["quarantined"]]
    kinds = Counter(r.error_kind.value if r and r.error_kind else "ok" for r in results)
    return Outcome(
        "big results", f"{n} results under a 4 MiB frame limit: tiny, 300 kB, just under and just over the limit ({len(over)})",
        n, lost, None, 0, innocent, tl.stall(), 6 * HB + 5.0,
        f"outcomes {dict(kinds)}; quarantined {len(quarantined)}; redelivered {status['producer']['redelivered']}",
        {"results": results, "status": status, "over_limit": sorted(over), "quarantined": quarantined},
        clean=not quarantined and all(results[i] is not None and results[i].error_kind == "bad_result" for i in over),
    )
