"""How ``qworker status`` finds the producers running on this host.

Each producer leaves a note, ``producer-<pid>-<id>.json`` holding its endpoint and
pid, in the per-user runtime directory while it runs.  A note whose process is
gone is stale: ``local_endpoints`` skips it and removes it, with the ``ipc://``
socket file it names.  ``sweep`` (run when a producer starts) also removes the
socket files and worker slots that killed producers and pools left behind: every
file there is named ``<prefix><pid>-...``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os

from ..transport.sockets import runtime_dir

__all__ = ["register", "unregister", "local_endpoints", "sweep"]

_LEFTOVERS = (("producer-", ".json"), ("p", ".sock"), ("slot-", ""))  # (prefix before the pid, suffix)


def register(endpoint: str, tag: str) -> str:
    """Leave a note for this process's producer; returns its path (give it to ``unregister``)."""
    path = os.path.join(runtime_dir(), f"producer-{os.getpid()}-{tag}.json")
    with open(path, "w") as f:
        json.dump({"endpoint": endpoint, "pid": os.getpid()}, f)
    return path


def unregister(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, so not ours to clean
    return True


def local_endpoints() -> list[str]:
    """The endpoints of the producers running on this host; cleans up stale notes."""
    out = []
    for path in sorted(glob.glob(os.path.join(runtime_dir(), "producer-*.json"))):
        try:
            with open(path) as f:
                note = json.load(f)
            endpoint, pid = str(note["endpoint"]), int(note["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not _alive(pid):
            unregister(path)
            if endpoint.startswith("ipc://"):
                with contextlib.suppress(OSError):
                    os.unlink(endpoint[len("ipc://"):])
            continue
        out.append(endpoint)
    return out


def sweep() -> int:
    """Remove runtime files of processes that are gone; returns how many were removed."""
    removed = 0
    base = runtime_dir()
    for prefix, suffix in _LEFTOVERS:
        for path in glob.glob(os.path.join(base, f"{prefix}[0-9]*-*{suffix}")):
            pid_text = os.path.basename(path)[len(prefix):].split("-", 1)[0]
            if pid_text.isdigit() and not _alive(int(pid_text)):
                with contextlib.suppress(OSError):
                    os.unlink(path)
                    removed += 1
    return removed
