"""The capacity-that-moves scenarios of the goldens over many seeds: each phase's share, and where the time goes.

The goldens (``goldens.py``) hold three seeds of each ``moving-*`` scenario (capacity 64 -> 16 -> 64, a
tenant taking 32 of 64 then leaving; 10 s phases, judgeserver-like: lognormal latency rising 20% at full
load, refusals after 50-300 ms).  A limiter change that moves phase 3 by a point or two is within the
spread of three seeds; this runs the same scenarios (simulated time, deterministic) with seeds 1..N
and prints, per scenario and seed:

  phases     the clients' answers in each phase / what the server allowed then (``goldens._allowed_per_s``)
  refused    refusals / (answers + refusals), over the whole run
  last 429   the last refusal before capacity returned (the second change), seconds
  back       when the limit first reached 90% of the starting capacity after it, seconds

then the medians, the lowest phase shares and how many runs had a phase under 90%.

    python -m tests.contract.judge.seeds [--seeds 12] [--only step|tenant]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from typing import Optional

from tests.contract.judge import goldens

__all__ = ["Run", "run", "main"]


@dataclasses.dataclass(frozen=True)
class Run:
    scenario: str
    seed: int
    phases: list[float]  # answers / allowed, per phase
    refused: float  # refusals / (answers + refusals)
    last_refusal: Optional[float]  # the last refusal before the second change (s)
    back: Optional[float]  # when the limit first reached 90% of the initial capacity after the second change (s)


def run(name: str, seed: int) -> Run:
    """Scenario ``name`` (a ``moving-*`` golden) with its server's seed replaced by ``seed``."""
    base = goldens.SCENARIOS[name]
    sc = dataclasses.replace(base, servers=[{**base.servers[0], "seed": seed}])
    r = goldens._run(sc)
    servers = r["servers"]
    service = [sum(s for _, s in srv.services) / len(srv.services) if srv.services else 0.0 for srv in servers]
    done = sorted(t for c in r["clients"] for t in c.done_at)
    refused = sorted(t for c in r["clients"] for t in c.refused_at)
    edges = [0.0, *sc.changes, r["end"]]
    phases = []
    for a, b in zip(edges, edges[1:], strict=False):
        steps = [a + k * goldens.SAMPLE_S for k in range(int((b - a) / goldens.SAMPLE_S))]
        allowed = sum(goldens._allowed_per_s(sc, servers, t, service) * goldens.SAMPLE_S for t in steps)
        phases.append(sum(1 for x in done if a <= x < b) / allowed if allowed else 0.0)
    change = sc.changes[-1]
    full = 0.9 * base.servers[0]["capacity"]
    return Run(name, seed, phases, len(refused) / max(1, len(done) + len(refused)),
               max((t for t in refused if t < change), default=None),
               next((t for t, x in r["samples"] if t >= change and x and x[0][0][0] >= full), None))


def _s(x: Optional[float]) -> str:
    return "never" if x is None else f"{x:.2f}"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=12, help="seeds 1..N (default 12)")
    ap.add_argument("--only", choices=("step", "tenant"), action="append", default=[])
    args = ap.parse_args(argv)
    if args.seeds < 1:
        print("seeds: --seeds must be at least 1", file=sys.stderr)
        return 2
    for kind in args.only or ["step", "tenant"]:
        for ra in ("ms", "s"):
            name = f"moving-{kind}-{ra}-seed1"
            runs = [run(name, seed) for seed in range(1, args.seeds + 1)]
            for x in runs:
                print(f"  {kind} {ra} seed {x.seed:2d}: phases " + " ".join(f"{p:6.1%}" for p in x.phases)
                      + f"  refused {x.refused:.2%}  last 429 {_s(x.last_refusal)}  back {_s(x.back)}", flush=True)
            ph = list(zip(*(x.phases for x in runs), strict=True))
            print(f"{kind} {ra} ({len(runs)} seeds): phase medians " + " ".join(f"{statistics.median(p):.1%}" for p in ph)
                  + ", lowest " + " ".join(f"{min(p):.1%}" for p in ph)
                  + f"; refused median {statistics.median(x.refused for x in runs):.2%}, highest {max(x.refused for x in runs):.2%}"
                  + f"; runs with a phase under 90%: {sum(1 for x in runs if min(x.phases) < 0.9)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
