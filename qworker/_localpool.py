"""The local pool: a ``qworker pool`` child process that a ``Producer`` starts and stops.

It runs in its own session, so Ctrl-C in the terminal reaches the trainer,
which then drains the pool through ``stop``.  It watches the trainer's pid and
exits if the trainer dies without closing it.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
from typing import Optional

__all__ = ["LocalPool"]

log = logging.getLogger("qworker")

_numbers = itertools.count(1)  # local pool ids stay distinct within a process


class LocalPool:
    def __init__(
        self, *, connect: str, workers: int, modules: list[str], task_timeout_s: float, heartbeat_s: float,
        max_message_bytes: int,
    ) -> None:
        cmd = [
            sys.executable, "-m", "qworker", "pool", "--connect", connect, "--workers", str(workers),
            "--id", f"local-{os.getpid()}-{next(_numbers)}", "--parent-pid", str(os.getpid()),
            "--timeout", repr(float(task_timeout_s)), "--heartbeat", repr(heartbeat_s),
            "--log-level", logging.getLevelName(log.getEffectiveLevel()),  # the trainer's logging decides
            "--max-message-bytes", str(max_message_bytes),
        ]
        if modules:
            cmd += ["--rewards", ",".join(modules)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exit_code(self) -> Optional[int]:
        """None while the pool runs."""
        return self.proc.poll()

    def stop(self, timeout_s: float) -> None:
        """SIGTERM: the pool drains its workers; killed if it takes over ``timeout_s``."""
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("qworker: local pool did not stop in %.0f s; killing it", timeout_s)
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        self.proc.kill()
