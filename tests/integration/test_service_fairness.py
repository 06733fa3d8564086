"""Fair service (issue 20, item 7): two trainers sharing one ``qworker serve`` both progress.

Two real client processes each submit one batch of the same size, the second a
moment after the first.  Served first come, first served, the first finishes
at about half the total time and the second at the end; served in turns (a
lane per client), both finish near the end, close together.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

from tests.service.test_service import free_port, serve, stop

N = 600  # tasks per client
MS = 10  # each task sleeps this long; 2 workers: about 3 s of work per client

CLIENT = textwrap.dedent("""
    import json, sys, time
    from qworker import Client
    port, tag, start_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with Client(f"tcp://127.0.0.1:{port}") as c:
        c.map("noop", [{"warm": tag}], timeout=60)  # connected before the clock starts
        while time.time() < start_at:
            time.sleep(0.001)
        t0 = time.time()
        futures = c.submit_batch("sleep", [{"tag": tag, "i": i} for i in range(int(sys.argv[4]))], params={"ms": int(sys.argv[5])})
        done = []
        for f in futures:
            f.add_done_callback(lambda _f: done.append(time.time()))
        results = c.gather(futures, timeout=300)
        half = sorted(done)[len(done) // 2]
        print(json.dumps({"tag": tag, "start": t0, "half": half, "end": max(done), "ok": all(r.ok for r in results)}))
""")


def test_two_clients_are_served_in_turns():
    port = free_port()
    proc = serve(port, "--workers", "2")
    try:
        start = time.time() + 4.0
        procs = [subprocess.Popen([sys.executable, "-c", CLIENT, str(port), tag, str(start + delay), str(N), str(MS)],
                                  stdout=subprocess.PIPE, text=True) for tag, delay in (("a", 0.0), ("b", 0.3))]
        out = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    finally:
        stop(proc)
    a, b = out
    assert a["ok"] and b["ok"]
    span = max(a["end"], b["end"]) - a["start"]
    gap = abs(a["end"] - b["end"])
    print(f"two clients x {N} tasks of {MS} ms on 2 workers: a finished at {a['end'] - a['start']:.2f} s, "
          f"b at {b['end'] - a['start']:.2f} s (b started {b['start'] - a['start']:.2f} s after a); gap {gap:.2f} s of {span:.2f} s")
    # First come, first served would finish a at about half the span: in turns, the gap is a small share of it.
    assert gap < 0.25 * span, (a, b)
    # Both progressed together: each had half its results before either finished.
    assert max(a["half"], b["half"]) < min(a["end"], b["end"])
