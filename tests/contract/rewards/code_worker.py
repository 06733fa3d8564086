"""A stand-in reward worker for sandbox tests: a separate process that scores ``code_tests`` payloads.

It is started with a secret in its environment (as a worker holding an API key
is), so that ``/proc/<pid>/environ`` and its memory really hold the secret; the
test talks to it over stdin/stdout, one JSON line per payload.
"""

from __future__ import annotations

import json
import os
import select
import site
import subprocess
import sys
from typing import Any, Optional

SECRET_NAME = "QWORKER_TEST_API_KEY"

_SCRIPT = r"""
import json, os, sys
from qworker.rewards.code_tests import code_tests
print(json.dumps({"pid": os.getpid()}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    try:
        out = code_tests({"response": req["code"], "ground_truth": req["tests"]}, **req["params"])
    except Exception as e:
        out = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out), flush=True)
"""


def as_user_prefix(uid: int) -> list[str]:
    """A command prefix that runs the rest as ``uid`` (its own group, no supplementary groups, no capability)."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]


class UserCannotRun(RuntimeError):
    """The other user cannot run a Python that imports this checkout (a private home, say)."""


def interpreter_for(prefix: list[str], env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """A Python that the user of ``prefix`` can run, re-run as ``sys.executable`` and import qworker with; and its env.

    A venv under a private home may not be runnable by another user: then another interpreter of
    this version is tried, given this one's site-packages.
    """
    probe = "import subprocess, sys, qworker.rewards.code_tests; subprocess.run([sys.executable, '-c', ''], check=True)"
    for python in (sys.executable, os.path.realpath(sys.executable), "/usr/bin/python3"):
        run_env = env
        if python != sys.executable:
            paths = [env.get("PYTHONPATH", ""), *site.getsitepackages()]
            run_env = {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        if subprocess.run([*prefix, python, "-c", probe], capture_output=True, env=run_env).returncode == 0:
            return python, run_env
    raise UserCannotRun(f"{' '.join(prefix)} can run no Python that imports qworker from this checkout")


class CodeWorker:
    """One worker process; ``score`` sends it a program and its tests and returns ``code_tests``' dict."""

    def __init__(self, *, secret: str, env: Optional[dict] = None, as_user: Optional[int] = None) -> None:
        full_env = {**os.environ, **(env or {}), SECRET_NAME: secret}
        prefix = as_user_prefix(as_user) if as_user is not None else []
        python = sys.executable
        if as_user is not None:
            python, full_env = interpreter_for(prefix, full_env)
        self.proc = subprocess.Popen([*prefix, python, "-c", _SCRIPT], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=full_env, text=True)
        self.pid: int = json.loads(self._line(60))["pid"]

    def _line(self, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        assert ready, f"the worker process did not answer within {timeout_s:.0f} s (stopped?)"
        line = self.proc.stdout.readline()
        assert line, f"the worker process ended (exit code {self.proc.poll()})"
        return line

    def score(self, code: str, tests: Any, **params: Any) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"code": code, "tests": tests, "params": {"timeout_s": 2, "cpu_s": 2, **params}}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line(60))

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
