"""Fair service: two trainers sharing one ``qworker serve`` both progress.

Two real client processes each submit one batch of the same size, the second a
moment after the first.  Served first come, first served, the first has half
its results at about a quarter of the total time and the second at three
quarters; served in turns (a lane per client), both have half their results at
about half the time, and both finish near the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

from tests.contract.service.test_service import free_port, serve, stop

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
    t0 = a["start"]
    span = max(a["end"], b["end"]) - t0
    gap = abs(a["half"] - b["half"])
    print(f"two clients x {N} tasks of {MS} ms on 2 workers (b started {b['start'] - t0:.2f} s after a): half of a's results "
          f"at {a['half'] - t0:.2f} s, all at {a['end'] - t0:.2f} s; half of b's at {b['half'] - t0:.2f} s, all at "
          f"{b['end'] - t0:.2f} s; the halves {gap:.2f} s apart in {span:.2f} s")
    # First come, first served puts the halves about half the span apart; in turns, a small share of it.
    assert gap < 0.2 * span, (a, b)
