"""Link seams: a ``Client`` and ``qworker serve`` through a TCP proxy that cuts the link again and again.

The service (a real ``qworker serve`` process, two local workers) resolves
tasks while its client is cut off; the ledger keeps their results and resends
them until the client acknowledges them.  Cuts of 1 to 4 s (random, seeded)
with 0.5 to 2 s of link between them, while ``n`` ``count_eval`` tasks run.
Lost: unresolved after the last cut plus ``RESOLVE_WITHIN_S``, failed, or
scored wrong; paid twice: evaluations counted by ``count_eval``.  The stall is
the longest gap between results, which the cuts themselves set.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from qworker import Client
from tests.chaos_scenarios.measure import Outcome, Timeline, collect, evaluations, lost_of, paid_twice
from tests.chaos_scenarios.processes import TEST_REWARDS, free_port, stop_proc
from tests.faults.proxy import Proxy

RESOLVE_WITHIN_S = 20.0  # the client's service_timeout_s: results survive a break up to it
MAX_CUT_S = 4.0


def _serve(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "qworker", "serve", "--listen", f"tcp://127.0.0.1:{port}", "--reward-modules", TEST_REWARDS,
         "--workers", "2"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    while "clients on" not in line:
        if proc.poll() is not None or not line:
            raise RuntimeError(f"qworker serve did not start: {line}{proc.stderr.read()}")
        line = proc.stderr.readline()
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return proc


def link_cuts(tmp: Path, n: int, *, cuts: int = 5, seed: int = 0) -> Outcome:
    rng = random.Random(seed)
    log = tmp / "evals"
    port = free_port()
    proc = _serve(port)
    try:
        with Proxy(port) as proxy, Client(proxy.endpoint, service_timeout_s=RESOLVE_WITHIN_S) as c:
            futures = c.submit_batch("count_eval", [{"log": str(log), "i": i, "sleep_ms": 5} for i in range(n)])
            timeline = Timeline(futures)
            cut_total = 0.0
            for _ in range(cuts):
                time.sleep(rng.uniform(0.5, 2.0))
                s = rng.uniform(1.0, MAX_CUT_S)
                cut_total += s
                proxy.cut(s)
                time.sleep(s)
            results = collect(c, futures, RESOLVE_WITHIN_S + 30)
            ledger = c.status()["service"]["ledger"]
            redials, resubmitted = c.redials, c.resubmitted
    finally:
        stop_proc(proc)
    hung = sum(r is None for r in results)
    lost = lost_of(results)
    failed = sum(r is not None and not r.ok for r in results)
    return Outcome(
        "link cuts", f"{cuts} cuts of 1-{MAX_CUT_S:.0f} s ({cut_total:.1f} s in all) of the TCP link between a Client and "
        "qworker serve", n, lost + failed, paid_twice(evaluations(log)), 0, 0, timeline.stall(), MAX_CUT_S + 5.0,
        f"hung {hung}; ledger: sent {ledger['sent']}, resent {ledger['resent']}, evicted {ledger['evicted']}, repeats "
        f"{ledger['repeats']}; client: redials {redials}, submissions resent {resubmitted}",
        detail={"hung": hung, "ledger": ledger},
    )
