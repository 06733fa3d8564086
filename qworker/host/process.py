"""``PoolProcess``: a pool supervisor run as a child process (``python -m qworker pool``).

A ``Producer`` with ``local_workers`` starts one; launchers may start others.
It runs in its own session, so Ctrl-C in the terminal reaches the parent, which
then drains the pool through ``stop``.  Given ``parent_pid`` it exits when that
process dies without stopping it.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from typing import Optional

from ..config.options import PoolOptions

__all__ = ["PoolProcess"]

log = logging.getLogger("qworker")


class PoolProcess:
    def __init__(self, options: PoolOptions) -> None:
        self.options = options
        cmd = [sys.executable, "-m", "qworker", "pool", *options.to_argv()]
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
            log.warning("qworker: pool process %d did not stop in %.0f s; killing it", self.proc.pid, timeout_s)
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        self.proc.kill()
