"""Run one benchmark script from two checkouts in turn, for a before/after table measured on the same machine.

    python bench/alternate.py --before /tmp/old --after /tmp/new transport.py --skip ray
    python bench/alternate.py --before /tmp/old --rounds 3 chaos.py --quick

Each round runs ``bench/SCRIPT ARGS`` once from each tree: its own copy of the script
(a benchmark measures its tree as that tree's script does), with the tree as the working
directory and on ``PYTHONPATH``, so the processes it starts import that tree's qworker.
The order alternates (before, after; then after, before; ...), so a machine that grows
busier or quieter during the runs weighs on both sides alike.  Every run's output is
printed, and kept verbatim, round by round, in ``docs/bench/<script>_alternated.md``
(``write_table``; not with ``QWORKER_BENCH_NO_RECORD`` set); the trees' own docs/bench files are not written
(``QWORKER_BENCH_NO_RECORD``).  A run that fails stops the rounds with its exit status
and the last lines of its stderr.  ``--after`` defaults to this checkout; ``--before-python`` runs the before tree
under another interpreter (a venv whose console scripts are that tree's).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from _common import write_table

HERE = Path(__file__).resolve().parent.parent


def _tree(path: str, flag: str) -> Path:
    """``path`` as a checkout whose ``bench/`` and ``qworker/`` a run can use; exits with one line if it is not."""
    tree = Path(path).expanduser().resolve()
    if not (tree / "qworker" / "__init__.py").is_file() or not (tree / "bench").is_dir():
        sys.exit(f"alternate.py: {flag} {path}: not a qworker checkout (no qworker/__init__.py and bench/ there)")
    return tree


def _commit(tree: Path) -> str:
    """The tree's commit, when it is a git checkout; else ''."""
    got = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return got.stdout.strip() if got.returncode == 0 and (tree / ".git").exists() else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, metavar="TREE", help="the checkout measured as 'before'")
    ap.add_argument("--after", default=str(HERE), metavar="TREE", help="the checkout measured as 'after' (default: this one)")
    ap.add_argument("--before-python", default=sys.executable, metavar="PYTHON",
                    help="the interpreter the before tree's runs use (default: this one); a tree whose tests start its "
                         "console scripts (qworker-pool) needs a venv whose scripts import that tree's entry points")
    ap.add_argument("--rounds", type=int, default=2, help="runs of the script per tree, alternated (default 2)")
    ap.add_argument("script", help="a script in bench/ (transport.py, service.py, chaos.py, ...)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    a = ap.parse_args()
    if a.rounds < 1:
        sys.exit(f"alternate.py: --rounds {a.rounds}: give 1 or more")
    trees = {"before": _tree(a.before, "--before"), "after": _tree(a.after, "--after")}
    for side, tree in trees.items():
        if not (tree / "bench" / a.script).is_file():
            sys.exit(f"alternate.py: {a.script}: no bench/{a.script} in the {side} tree {tree}")
    names = {side: f"{side} ({tree}{', ' + c if (c := _commit(tree)) else ''})" for side, tree in trees.items()}
    kept = [f"{' '.join([a.script, *a.args])}: {a.rounds} round(s), alternated; " + "; ".join(names.values())
            + (f"; the before tree runs under {a.before_python}" if a.before_python != sys.executable else "")]
    for r in range(a.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for side in order:
            tree = trees[side]
            head = f"--- round {r + 1}, {names[side]}"
            print(head, flush=True)
            python = a.before_python if side == "before" else sys.executable
            run = subprocess.run([python, str(tree / "bench" / a.script), *a.args], cwd=tree, text=True,
                                 capture_output=True, env=dict(os.environ, PYTHONPATH=str(tree), QWORKER_BENCH_NO_RECORD="1"))
            print(run.stdout, end="", flush=True)
            if run.returncode != 0:
                tail = "\n".join(run.stderr.strip().splitlines()[-12:]) or "(nothing on stderr)"
                sys.exit(f"{tail}\nalternate.py: round {r + 1}, {side}: bench/{a.script} exited with {run.returncode} (its stderr's "
                         "last lines above)")
            kept += [head, run.stdout.rstrip()]
    if not os.environ.get("QWORKER_BENCH_NO_RECORD"):
        path = write_table(f"{Path(a.script).stem}_alternated", "\n".join(kept))
        print(f"(table written to {path})", file=sys.stderr)


if __name__ == "__main__":
    main()
