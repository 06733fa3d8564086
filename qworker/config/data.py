"""The example rollouts and configs that ship with qworker: ``qworker examples`` and ``qworker configs``.

A wheel carries them inside the package (``qworker/_data/examples/*.jsonl`` and
``qworker/_data/configs/*.yaml``, copied there by ``setup.py`` at build time);
a source checkout (or an editable install) reads the top-level ``examples/``
and ``configs/`` folders.  ``data_dir(kind)`` is whichever exists.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .._exceptions import ConfigError

__all__ = ["data_dir", "data_main", "PATTERNS"]

PATTERNS = {"examples": "*.jsonl", "configs": "*.yaml"}  # what a wheel carries of each folder
_HERE = Path(__file__).resolve().parent.parent  # the qworker package (this module is qworker/config/data.py)


def data_dir(kind: str) -> Path:
    """The folder holding the bundled ``kind`` ('examples' or 'configs'); ``ConfigError`` if neither place has it."""
    for candidate in (_HERE / "_data" / kind, _HERE.parent / kind):
        if any(candidate.glob(PATTERNS[kind])):
            return candidate
    raise ConfigError(f"no bundled {kind} found in {_HERE / '_data' / kind} or {_HERE.parent / kind}: reinstall qworker-rl")


def data_main(kind: str, copy_to: str | None) -> int:
    """Print the folder (and, on a terminal, its files on stderr); with ``copy_to``, copy the files there, keeping existing ones."""
    where = data_dir(kind)
    files = sorted(where.glob(PATTERNS[kind]))
    if copy_to is None:
        print(where)
        if sys.stdout.isatty():  # a person reading it; not "$(qworker examples)" in a command
            print("  " + "  ".join(f.name for f in files), file=sys.stderr)
        return 0
    try:
        os.makedirs(copy_to, exist_ok=True)
        for f in files:
            target = Path(copy_to) / f.name
            if target.exists():
                print(f"qworker {kind}: kept {target} (exists)", file=sys.stderr)
                continue
            shutil.copyfile(f, target)
            print(target)
    except OSError as exc:  # a folder that cannot be made or written: one line, what was copied is printed above
        print(f"qworker {kind}: cannot copy into {copy_to}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0
