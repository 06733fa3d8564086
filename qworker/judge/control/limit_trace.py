"""A debug trace of every change of an adaptive limit, with its cause: off unless ``QWORKER_LIMIT_TRACE`` names a file.

With ``QWORKER_LIMIT_TRACE=PATH`` in the producer's environment, each change of an
``AdaptiveLimit``'s limit or mode appends one JSON line to PATH (``<pid>`` in PATH
is replaced by the process id):

  ``{"t": monotonic seconds, "pid", "id": the limiter's id, "call": the entry point (on_success, on_drop,
  on_server_load, adopt, cap, reset), "why": the last cut path that acted in that call (the limiter's ``_why``,
  e.g. "batch:burst 17", "queue:latency knee=54.5 g=1.37", "refusal:lone"; "" for growth alone: a queue reading whose
  knee is above the limit leaves its name on the growth that follows it in the same call), "from", "to": the limit, "mode": "before->after",
  "args": the entry point's arguments; for a batch cut, "bands": the (mean level, mean latency, answers) per band
  that ``BatchKnee`` read}``

Unset, nothing is wrapped and the limiter runs exactly as written (no cost).  For
diagnosis only: not a metric, not read back by qworker.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import threading
import time
from typing import Any, Callable, Optional, TextIO

__all__ = ["ENV", "install"]

ENV = "QWORKER_LIMIT_TRACE"
TRACED = ("on_success", "on_drop", "on_server_load", "adopt", "cap", "reset")

_lock = threading.Lock()
_out: Optional[TextIO] = None
_failed = False  # the trace could not be written: off for the rest of the process
log = logging.getLogger("qworker")


def _write(line: dict) -> None:
    """Append ``line``; a trace that cannot be written (a bad path, a full disk) is turned off with one warning and
    never raises into the limiter's caller."""
    global _out, _failed
    with _lock:
        if _failed:
            return
        try:
            if _out is None:
                _out = open(os.environ[ENV].replace("<pid>", str(os.getpid())), "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (kept open)
            _out.write(json.dumps(line) + "\n")
        except (OSError, ValueError) as e:
            _failed = True
            log.warning("%s: the limit trace is off: cannot write %s (%s)", ENV, os.environ.get(ENV, ""), e)


def _traced(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        before, mode = self.limit, self.mode
        self._why = ""
        try:
            return method(self, *args, **kwargs)
        finally:
            if self.limit != before or self.mode is not mode:
                _write({"t": round(time.monotonic(), 4), "pid": os.getpid(), "id": id(self), "call": name, "why": self._why,
                        "from": round(before, 3), "to": round(self.limit, 3), "mode": f"{mode.value}->{self.mode.value}",
                        "args": [round(a, 4) if isinstance(a, float) else a for a in args]
                        + [f"{k}={round(v, 4) if isinstance(v, float) else v}" for k, v in kwargs.items()],
                        **({"bands": [(round(lv, 1), round(math.exp(x), 4), n) for lv, x, n in self.batch.points()]}
                           if self._why.startswith("batch:") else {})})

    return wrapper


def install(cls: type) -> None:
    """Wrap ``cls``'s entry points (``TRACED``) when ``QWORKER_LIMIT_TRACE`` is set; else leave it as it is."""
    if not os.environ.get(ENV):
        return
    for name in TRACED:
        setattr(cls, name, _traced(name, getattr(cls, name)))
