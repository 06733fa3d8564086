"""Run one benchmark script from two checkouts in turn, for a before/after table measured on the same machine.

    python bench/alternate.py --before /tmp/old --after /tmp/new transport.py --skip ray
    python bench/alternate.py --before /tmp/old --rounds 3 chaos.py --quick

Each round runs ``bench/SCRIPT ARGS`` once from each tree: its own copy of the script
(a benchmark measures its tree as that tree's script does), with the tree as the working
directory and on ``PYTHONPATH``, so the processes it starts import that tree's qworker.
The order alternates (before, after; then after, before; ...), so a machine that grows
busier or quieter during the runs weighs on both sides alike.  Every run's output is
printed, and kept verbatim, round by round, in ``docs/bench/<script>_alternated.md``
(``write_table``; not with ``QWORKER_BENCH_NO_RECORD`` set); the runs write no docs/bench
file of their trees (``run_in_tree``).  A run that fails stops the rounds: its stdout and the
last lines of its stderr are printed, nothing is recorded, and this exits with its
exit status (1 for a run killed by a signal).  A run's stderr is otherwise not
shown.  ``--after`` defaults to this checkout; ``--before-python`` runs the before
tree under another interpreter (a venv whose console scripts are that tree's).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from _common import run_in_tree, write_table

HERE = Path(__file__).resolve().parent.parent


def _tree(path: str, flag: str) -> Path:
    """``path`` as a checkout whose ``bench/`` and ``qworker/`` a run can use; exits with one line if it is not."""
    tree = Path(path).expanduser().resolve()
    missing = [x for x in ("qworker/__init__.py", "bench/") if not (tree / x).exists()]
    if missing:
        sys.exit(f"alternate.py: {flag} {path}: not a qworker checkout (no {' and no '.join(missing)} there)")
    return tree


def _python(path: str) -> str:
    """``path`` (or a command name on PATH) as an absolute interpreter path, from the current directory (a run's
    working directory is its tree); exits with one line if it is not an executable file."""
    found = shutil.which(path) if os.sep not in path else (path if os.access(path, os.X_OK) and os.path.isfile(path) else None)
    if found is None:
        sys.exit(f"alternate.py: --before-python {path}: not an executable file")
    return os.path.abspath(found)


def _commit(tree: Path) -> str:
    """The tree's commit (``git describe --always --dirty``: ``-dirty`` with changes not committed) when it is a git
    checkout; else ''."""
    if not (tree / ".git").exists():
        return ""
    try:
        got = subprocess.run(["git", "-C", str(tree), "describe", "--always", "--dirty"], capture_output=True, text=True)
    except OSError:  # no git
        return ""
    return got.stdout.strip() if got.returncode == 0 else ""


def main() -> None:
    """Parse the arguments, run the rounds, print each run's output and record them all (see the module's docstring)."""
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
    if Path(a.script).name != a.script or not a.script.endswith(".py"):
        sys.exit(f"alternate.py: {a.script}: give the name of a script in bench/ (transport.py, service.py, ...), not a path")
    trees = {"before": _tree(a.before, "--before"), "after": _tree(a.after, "--after")}
    if trees["before"] == trees["after"]:
        sys.exit(f"alternate.py: --before and --after are the same tree ({trees['after']})")
    before_python = _python(a.before_python)
    for side, tree in trees.items():
        if not (tree / "bench" / a.script).is_file():
            sys.exit(f"alternate.py: {a.script}: no bench/{a.script} in the {side} tree {tree}")
    names = {side: f"{side} ({tree}{', ' + c if (c := _commit(tree)) else ''})" for side, tree in trees.items()}
    kept = [f"{shlex.join([a.script, *a.args])}: {a.rounds} round(s), alternated; " + "; ".join(names.values())
            + (f"; the before tree runs under {before_python}" if before_python != os.path.abspath(sys.executable) else "")]
    for r in range(a.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for side in order:
            tree = trees[side]
            head = f"--- round {r + 1}, {names[side]}"
            print(head, flush=True)
            python = before_python if side == "before" else sys.executable
            run = run_in_tree(tree, [str(tree / "bench" / a.script), *a.args], python=python)
            print(run.stdout, end="", flush=True)
            if run.returncode != 0:
                tail = "\n".join(run.stderr.strip().splitlines()[-12:]) or "(nothing on stderr)"
                print(f"{tail}\nalternate.py: round {r + 1}, {side}: bench/{a.script} exited with {run.returncode} (its stderr's "
                      "last lines above)", file=sys.stderr)
                sys.exit(run.returncode if run.returncode > 0 else 1)
            kept += [head, run.stdout.rstrip()]
    if not os.environ.get("QWORKER_BENCH_NO_RECORD"):
        path = write_table(f"{Path(a.script).stem}_alternated", "\n".join(kept))
        print(f"(table written to {path})", file=sys.stderr)


if __name__ == "__main__":
    main()
