"""CURVE from the command line: 'qworker status' reaches a CURVE service, and a pool or client whose handshake
fails says, on its own side, that it is a key problem (real processes, real sockets)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from qworker import Client, ServiceUnavailable
from qworker.transport.security import create_keys
from tests.conftest import console_script
from tests.contract.service.test_service import free_port, serve, stop


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    out = {name: create_keys(str(d), name) for name in ("service", "client", "stranger")}  # (public, secret)
    (d / "allowed").mkdir()
    shutil.copy(out["client"][0], d / "allowed")
    return {**out, "allowed": str(d / "allowed")}


@pytest.fixture(scope="module")
def service(keys):
    port, pools = free_port(), free_port()
    proc = serve(port, "--workers", "1", "--bind", f"tcp://127.0.0.1:{pools}", "--curve-secret-key", keys["service"][1],
                 "--curve-allowed-keys", keys["allowed"])
    yield f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{pools}"
    stop(proc)


def status(*args: str):
    return subprocess.run([console_script("qworker"), "status", *args], capture_output=True, text=True, timeout=60)


def test_status_reaches_a_curve_service(service, keys):
    res = status("--connect", service[0], "--curve-secret-key", keys["client"][1], "--curve-server-key", keys["service"][0], "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["service"]["endpoint"] == service[0]
    human = status("--connect", service[0], "--curve-secret-key", keys["client"][1], "--curve-server-key", keys["service"][0])
    assert f"service: clients on {service[0]}" in human.stdout and "no HTTP front" in human.stdout


def test_status_with_the_wrong_keys_says_it_is_a_key_problem(service, keys):
    res = status("--connect", service[0], "--curve-secret-key", keys["stranger"][1], "--curve-server-key", keys["service"][0],
                 "--wait", "2")
    assert res.returncode == 1 and "refused this process's key. A key problem" in res.stderr
    res = status("--connect", service[0], "--curve-secret-key", keys["client"][1], "--curve-server-key", keys["stranger"][0],
                 "--wait", "2")
    assert res.returncode == 1 and "a key problem" in res.stderr and keys["stranger"][0] in res.stderr


def test_a_client_with_a_key_the_service_refuses_is_told_so(service, keys):
    with Client(service[0], connect_timeout_s=3, curve_secret_key=keys["stranger"][1], curve_server_key=keys["service"][0]) as c:
        with pytest.raises(ServiceUnavailable, match="refused this process's key. A key problem: add its public key"):
            c.submit_batch("gsm8k", [{"response": "#### 1", "ground_truth": "1"}])
    with Client(service[0], curve_secret_key=keys["client"][1], curve_server_key=keys["service"][0]) as c:
        assert c.map("gsm8k", [{"response": "#### 1", "ground_truth": "1"}], timeout=60)[0].score == 1.0


def test_a_pool_with_the_wrong_server_key_logs_a_key_problem(service, keys):
    proc = subprocess.Popen([console_script("qworker-pool"), "--connect", service[1], "--workers", "1",
                             "--curve-secret-key", keys["client"][1], "--curve-server-key", keys["stranger"][0]],
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline, seen = time.monotonic() + 60, ""
        while "key problem" not in seen and time.monotonic() < deadline:
            seen += proc.stderr.readline()
        assert "CURVE handshake with " + service[1] + " failed: a key problem" in seen
    finally:
        proc.terminate()
        proc.wait(30)
