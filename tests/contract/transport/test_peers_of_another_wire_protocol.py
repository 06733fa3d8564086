"""A peer of another qworker version (another wire protocol) is refused at once, with one line naming both versions:
a ``qworker-pool`` joining a producer, a ``Client`` talking to ``qworker serve``; one at an endpoint not for its kind
is told that, then both versions.  Real processes over tcp; the other
version is this code with its stamp changed (``wire.STAMP``) by a ``sitecustomize`` on the process's path."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import Optional

import pytest

from qworker import Client, Producer, ServiceUnavailable, __version__
from qworker.transport import wire
from tests.conftest import TEST_REWARDS, console_script
from tests.contract.service.test_service import free_port, stop

OTHER = (wire.PROTOCOL + 1, "9.9.9")


def other_version_env(tmp_path) -> dict[str, str]:
    """An environment whose Python processes speak wire protocol ``OTHER``."""
    site = tmp_path / "other-version"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"import qworker.transport.wire as wire\nwire.STAMP = {OTHER!r}\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}


def names_both_versions(line: str) -> bool:
    return (f"qworker 9.9.9 (wire protocol {OTHER[0]})" in line and f"qworker {__version__} (wire protocol {wire.PROTOCOL})" in line
            and "install the same qworker version on both" in line)


def run_pool_until_it_stops(*args: str, env: Optional[dict[str, str]] = None) -> tuple[int, str]:
    """A ``qworker-pool`` with ``args``, expected to stop by itself within 60 s (killed if not): its exit status and
    its stderr."""
    pool = subprocess.Popen([console_script("qworker-pool"), *args], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        _, err = pool.communicate(timeout=60)
    finally:
        if pool.poll() is None:
            pool.kill()
            pool.wait()
    return pool.returncode, err


def test_a_pool_of_another_version_is_refused_and_exits_with_one_line(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="qworker")
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0) as p:
        returncode, err = run_pool_until_it_stops("--connect", p.endpoint, "--rewards", TEST_REWARDS, "--workers", "2",
                                                  "--id", "other", env=other_version_env(tmp_path))
        status = p.status()
    refused = [line for line in err.splitlines() if "refused" in line]
    assert returncode == 2, err
    assert len(refused) == 1 and refused[0].startswith(f"qworker-pool: the producer at {p.endpoint} refused this pool: "), err
    assert names_both_versions(refused[0]), refused[0]
    assert status["pools"] == [] and p._dispatcher.workers_ready == 0  # neither it nor a worker of it was taken
    assert status["producer"]["dropped_frames"] >= 1  # what it sent is counted as dropped
    said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(said) == 1 and names_both_versions(said[0]), said  # one line at the producer too


def test_a_client_of_another_version_is_refused_at_its_first_request(tmp_path):
    port = free_port()
    env = other_version_env(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "qworker", "serve", "--listen", f"tcp://127.0.0.1:{port}", "--reward-modules", TEST_REWARDS,
         "--workers", "1"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        line = proc.stderr.readline()
        while "clients on" not in line:
            assert proc.poll() is None and line, f"qworker serve did not start: {line}{proc.stderr.read()}"
            line = proc.stderr.readline()
        with Client(f"tcp://127.0.0.1:{port}", connect_timeout_s=120) as c:
            for _ in range(2):  # each request is refused the same way, never taken, never left waiting
                with pytest.raises(ServiceUnavailable) as refused:
                    c.submit_batch("noop", [{"i": 1}])
                line = str(refused.value)
                assert line.startswith(f"the reward service at tcp://127.0.0.1:{port} refused this client: "), line
                assert names_both_versions(line), line
    finally:
        stop(proc)
    said = [line for line in proc.stderr.read().splitlines() if "refused" in line]
    assert len(said) == 1 and names_both_versions(said[0]), said  # one line at the service, however many requests


CLIENT_AT = """
import sys
from qworker import Client, ServiceUnavailable
with Client(sys.argv[1], connect_timeout_s=120) as c:
    try:
        c.submit_batch("noop", [{"i": 1}])
    except ServiceUnavailable as exc:
        print(exc)
"""


def test_a_client_of_another_version_at_a_producers_pool_endpoint_is_told_where_clients_go_and_both_versions(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="qworker")
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0) as p:
        client = subprocess.run([sys.executable, "-c", CLIENT_AT, p.endpoint], env=other_version_env(tmp_path),
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    line = client.stdout.strip()
    assert line.startswith(f"the producer's pool endpoint {p.endpoint} refused this client: it is for pools and workers"), client
    assert "this producer serves no Clients ('qworker serve' does" in line and names_both_versions(line), line
    said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(said) == 1 and "a Client at the pools' endpoint" in said[0], said  # the producer: one line, naming what it is
