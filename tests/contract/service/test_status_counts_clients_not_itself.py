"""``qworker status`` against a reward service counts the Clients that used it, not the status requests (which come
from a peer of their own each time): a service no Client has used shows 0.  Real processes, real sockets."""

from __future__ import annotations

import json
import subprocess

from qworker import Client
from tests.conftest import console_script
from tests.contract.service.test_service import free_port, serve, stop


def _clients(endpoint: str) -> int:
    res = subprocess.run([console_script("qworker"), "status", "--connect", endpoint, "--json"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    (status,) = json.loads(res.stdout) if res.stdout.lstrip().startswith("[") else [json.loads(res.stdout)]
    return int(status["service"]["clients"])


def test_a_service_counts_its_clients_and_not_the_status_requests():
    port = free_port()
    service = serve(port, "--workers", "1")
    endpoint = f"tcp://127.0.0.1:{port}"
    try:
        assert _clients(endpoint) == 0
        assert _clients(endpoint) == 0  # a second status request is not a client either
        with Client(endpoint, connect_timeout_s=20) as client:
            assert all(r.ok for r in client.map("noop", [{"i": 1}], timeout=30))
        assert _clients(endpoint) == 1
    finally:
        stop(service)
