"""Producer faults: a trainer with the disk cache SIGKILLed while a judge scores its tasks, then rerun."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from qworker.cache.disk import COMMIT_WITHIN_S
from tests.chaos_scenarios.measure import Outcome, count_lines, paid_twice
from tests.chaos_scenarios.processes import wait_until
from tests.chaos_scenarios.recording_judge import RecordingJudge

TRAINER = """
import json, sys, time
from qworker import Producer
url, db, n, tag, resolved = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
cfg = {"rewards": {"llm_judge": {"model": "m", "endpoints": [{"url": url}], "timeout_s": 10}}}
rows = [{"prompt": f"q-{tag}-{i}", "response": f"a{i}", "ground_truth": "g"} for i in range(n)]
with open(resolved, "a", buffering=1) as out, Producer(local_workers=2, config=cfg, cache_path=db) as p:
    futures = p.submit_batch("llm_judge", rows)
    for i, f in enumerate(futures):
        f.add_done_callback(lambda f, i=i: out.write(f"{i} {time.monotonic()}\\n"))
    rs = p.gather(futures, timeout=600)
print(json.dumps({"n": len(rs), "ok": sum(r.ok for r in rs), "cached": sum(r.cached for r in rs),
                  "errors": [r.error for r in rs if not r.ok][:3]}), flush=True)
"""


def producer_sigkill_judge(tmp: Path, n: int, *, window_s: float = COMMIT_WITHIN_S, kill_at: float = 0.4,
                           latency_s: float = 0.02) -> Outcome:
    """A trainer with the disk cache scoring ``n`` judge tasks is SIGKILLed at ``kill_at`` of
    the run, then rerun.  Calls paid twice are counted at the judge, per prompt.

    The guarantee checked is the disk cache's: a result is committed within ``window_s`` of
    reaching the producer.  So a call paid twice is a fault only if its first result reached the
    first producer (its future resolved) at least ``window_s`` before the kill; one the judge
    answered but that was still on its way back (or had just arrived) is allowed."""
    script, db = tmp / "judge_trainer.py", tmp / "judge-cache.sqlite"
    script.write_text(TRAINER)
    judge = RecordingJudge(capacity=64, latency_s=latency_s).start()
    try:
        def run(resolved: Path) -> subprocess.Popen:
            return subprocess.Popen([sys.executable, str(script), judge.url, str(db), str(n), "kill", str(resolved)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

        first = run(tmp / "resolved-1")
        wait_until(lambda: count_lines(tmp / "resolved-1") >= n * kill_at or first.poll() is not None, 300, "the first run to progress")
        killed_at = time.monotonic()
        first.kill()
        first.wait()
        resolved_first = count_lines(tmp / "resolved-1")
        time.sleep(1.0)  # the killed producer's workers die with it (PDEATHSIG); let their last calls land
        rerun_at = time.monotonic()
        second = run(tmp / "resolved-2")
        out, _ = second.communicate(timeout=600)
        summary = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"n": 0, "ok": 0, "cached": 0, "errors": ["no output"]}
        before, after = judge.answered(until=rerun_at), judge.answered(since=rerun_at)
        twice = set(before) & set(after)
        late = set(judge.answered(since=killed_at - window_s, until=killed_at))  # in the durability window
        posthumous = set(judge.answered(since=killed_at, until=rerun_at))  # by the dead producer's workers
    finally:
        judge.stop()
    durable = resolved_before(tmp / "resolved-1", killed_at - window_s)  # reached the producer in time to be committed
    faults = {u for u in twice if (m := re.search(r"q-kill-(\d+)", u)) and int(m.group(1)) in durable}
    return Outcome("SIGKILL the producer (disk cache, judge)",
                   f"SIGKILL of a trainer with cache_path at {kill_at:.0%} of {n} judge tasks, then a rerun",
                   n, n - summary["ok"], len(twice), len(twice) - len(faults), 0, None, 0.0,
                   f"judge answered {len(before)}: {len(late)} in the last {window_s * 1000:.0f} ms before the kill, {len(posthumous)} after it; "
                   f"paid twice {len(twice)}, of which {len(faults)} had reached the producer {window_s * 1000:.0f} ms before the kill "
                   f"(as {len(durable)} had); "
                   f"rerun cached {summary['cached']}",
                   {"twice": twice, "late": late, "posthumous": posthumous, "summary": summary, "resolved_first": resolved_first,
                    "answered_first": len(before), "dup_within_runs": paid_twice(before) + paid_twice(after), "faults": faults, "durable": durable})


def resolved_before(path: Path, t: float) -> set[int]:
    """The tasks whose futures the trainer saw resolve before monotonic time ``t`` (lines "i time")."""
    out = set()
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and float(parts[1]) < t:
            out.add(int(parts[0]))
    return out
