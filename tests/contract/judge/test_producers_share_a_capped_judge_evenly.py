"""Two trainer processes that each embed a Producer share one capped judge endpoint evenly (``judge.control.peers``).

No ``qworker serve`` between them: they find each other through notes in the
runtime directory.  The second starts while the first holds every slot of a
mock judge that refuses (429) past 8 requests at once; a few seconds later
each gets about half of the answers.  (Without the notes, ``coordinate:
false``, the second got a few percent: see ``tests/contract/judge/test_peers.py``.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

from qworker.testing import MockJudge

PRODUCER = textwrap.dedent("""
    import json, sys, time
    from qworker import Producer

    def main():
        url, tag, start_at, n, coordinate = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
        cfg = {"rewards": {"llm_judge": {"model": "m", "endpoints": [{"url": url}], "timeout_s": 30, "coordinate": coordinate}}}
        with Producer(local_workers=2, config=cfg) as p:
            p.map("llm_judge", [{"prompt": "warm " + tag, "response": "r"}], timeout=60)
            while time.time() < start_at:
                time.sleep(0.005)
            futures = p.submit_batch("llm_judge", [{"prompt": f"q{tag}{i}", "response": "r"} for i in range(n)])
            done = []
            for f in futures:
                f.add_done_callback(lambda _f: done.append(time.time()))
            seen, rows = 0, []
            while not all(f.done() for f in futures):
                time.sleep(0.5)
                e = p.status()["judges"][0]["endpoints"][0]
                seen = max(seen, e["other_producers"])
                rows.append((round(time.time() - start_at, 1), e["limit"], e["share"], e["in_flight"]))
            results = p.gather(futures, timeout=300)
        print(json.dumps({"done": done, "ok": sum(r.ok for r in results), "other_producers": seen, "rows": rows}))

    if __name__ == "__main__":
        main()
""")

LATE_S = 4.0


def run_pair(tmp_path, url: str, coordinate: bool) -> tuple[dict, dict, float]:
    script = tmp_path / "producer.py"
    script.write_text(PRODUCER)
    start = time.time() + 6.0  # both are up (pool started, warmed) before the clock starts
    env = {**os.environ, "QWORKER_RUNTIME_DIR": str(tmp_path / "run")}
    procs = [subprocess.Popen([sys.executable, str(script), url, tag, str(start + delay), str(n), "1" if coordinate else "0"],
                              stdout=subprocess.PIPE, text=True, env=env)
             for tag, delay, n in (("a", 0.0, 1500), ("b", LATE_S, 500))]
    a, b = (json.loads(p.communicate(timeout=300)[0]) for p in procs)
    return a, b, start


def test_a_second_producer_on_this_host_gets_half_of_a_capped_endpoint(tmp_path):
    m = MockJudge(capacity=8, latency_s=0.1, latency_dist="lognormal", sigma=0.5).start()
    try:
        a, b, start = run_pair(tmp_path, m.url, coordinate=True)
        stats = dict(m.stats)
    finally:
        m.stop()
    assert a["ok"] == 1500 and b["ok"] == 500
    assert a["other_producers"] == 1 and b["other_producers"] == 1
    assert list((tmp_path / "run").glob("judges/*/*.json")) == []  # each withdrew its note as it closed
    lo, hi = start + LATE_S + 2.0, start + LATE_S + 5.0
    counts = [sum(1 for t in x["done"] if lo < t <= hi) for x in (a, b)]
    late_share = counts[1] / sum(counts)
    print(f"capacity 8, lognormal 0.1 s: 2-5 s after the second producer started, answers {counts} "
          f"({sum(counts) / (hi - lo):.0f}/s; the second's share {late_share:.2f}); 429s {stats['status_429']} of {stats['requests']}")
    assert 0.375 <= late_share <= 0.625, counts
    assert stats["status_429"] <= 0.05 * stats["requests"]
