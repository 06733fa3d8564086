"""Chaos: inject one fault per scenario into real processes and count what it cost.

Each scenario (``tests/chaos_scenarios/``, the same code the fast cases in
``tests/chaos/test_one_fault_at_a_time_loses_nothing.py`` run small) reports:

* tasks lost: unresolved, or missing from the results (a reward scoring its own
  index shows a missing or misplaced result);
* calls paid twice: judge calls answered twice for one prompt, counted by the
  judge itself; elsewhere, evaluations counted by a reward that appends a line
  per call (``count_eval``);
* innocent failures: tasks that failed but were not the faulty ones;
* stall: the longest gap with no result while work was pending.

Targets: lost 0; paid twice no more than the fault can take with it
(a killed producer: what the judge answered in the disk cache's durability
window, ``COMMIT_WITHIN_S``, or after the kill; a lost worker: the task it was
running and the results it had finished but not yet sent); innocent failures 0;
stall a few heartbeats (plus the hard limit where a task hangs).

    python bench/chaos.py            # about 2 minutes on 2 cores
    python bench/chaos.py --quick
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import table  # noqa: E402

from tests import chaos_scenarios as chaos  # noqa: E402

RECOVERY_TARGET_S = 10.0  # a 2 s judge outage costs seconds, not minutes


def scenarios(quick: bool) -> list:
    s = 0.25 if quick else 1.0

    def n(x: int) -> int:
        return max(100, int(x * s))

    return [
        ("worker-kill", lambda d: chaos.worker_sigkill(d, n(20_000))),
        ("stop-busy", lambda d: chaos.worker_sigstop(d, n(2_000), busy=True)),
        ("stop-idle", lambda d: chaos.worker_sigstop(d, n(2_000), busy=False)),
        ("hung", lambda d: chaos.hung_tasks(d, n(2_000), 5)),
        ("pool-kill", lambda d: chaos.pool_sigkill(d, n(6_000))),
        ("producer-kill", lambda d: chaos.producer_sigkill_judge(d, n(3_000))),
        ("judge-faults", lambda d: chaos.judge_faults(d, n(3_000))),
        ("garbage", lambda d: chaos.garbage(d, n(10_000))),
        ("rogue", lambda d: chaos.rogue_peer(d, n(5_000))),
        ("rogue-busy", lambda d: chaos.rogue_peer(d, n(2_000), busy=True, task_timeout_s=1.0, wait_s=15)),
        ("key", lambda d: chaos.key_leak(d, n(100) // 2)),
        ("submit-close", lambda d: chaos.submit_close_interleavings(d, n(5_000), rounds=4)),
        ("disk-faults", lambda d: chaos.disk_faults(d, n(2_000))),
        ("big-results", lambda d: chaos.big_results(d, n(1_000))),
        ("judge-outage", lambda d: chaos.judge_outage(d, n(3_000))),
        ("hostile-judge", lambda d: chaos.hostile_judge(d, n(2_000))),
        ("link-cuts", lambda d: chaos.link_cuts(d, n(4_000))),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a quarter of the tasks")
    ap.add_argument("--only", help="comma-separated scenario names (worker-kill, stop-busy, ...)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger().handlers[0].setLevel(logging.ERROR)  # the scenarios' expected warnings would drown the table
    only = set(args.only.split(",")) if args.only else None
    rows, notes, t0 = [], [], time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        os.environ["QWORKER_RUNTIME_DIR"] = os.path.join(d, "rt")
        for name, run in scenarios(args.quick):
            if only and name not in only:
                continue
            work = Path(d) / name
            work.mkdir()
            o = run(work)
            rows.append([
                o.scenario, f"{o.tasks:,}", o.lost, "-" if o.paid_twice is None else o.paid_twice,
                "-" if o.paid_twice is None else f"<= {o.paid_twice_bound}", o.innocent,
                "-" if o.stall_s is None else f"{o.stall_s:.2f}", "-" if o.stall_s is None else f"<= {o.stall_bound_s:.1f}",
                "-" if o.recovery_s is None else f"{o.recovery_s:.2f}",
                "yes" if o.ok and (o.recovery_s is None or o.recovery_s <= RECOVERY_TARGET_S) else "NO",
            ])
            notes.append(f"{o.scenario}: {o.fault}. {o.note}")
            print(f"  {name}: done ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    print(f"heartbeat_s {chaos.HB}, COMMIT_WITHIN_S {chaos.COMMIT_WITHIN_S}; load average {os.getloadavg()[0]:.2f} "
          f"(1 min) at the end, {os.cpu_count()} CPUs")
    print(table(["scenario", "tasks", "lost", "paid twice", "allowed", "innocent failures", "stall s", "target s",
                 "recovery s", "meets targets"], rows))
    print("targets: lost 0; paid twice <= allowed; innocent failures 0; stall <= target (a few heartbeats); "
          f"recovery after a judge outage <= {RECOVERY_TARGET_S:.0f} s (back to 90% of the throughput before it)")
    for line in notes:
        print(f"- {line}")


if __name__ == "__main__":
    from _common import recorded

    with recorded("chaos"):  # the printed tables also go to docs/bench/chaos.md
        main()
