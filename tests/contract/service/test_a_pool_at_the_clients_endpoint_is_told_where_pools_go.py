"""A ``qworker-pool`` pointed at a reward service's clients' endpoint (``--listen``) is refused at once and exits 2
with one line naming where pools connect, and the service still serves its clients; the service logs one line for
that pool, whatever it sent before it stopped.  Real processes over tcp."""

from __future__ import annotations

import logging
import time

from qworker import Client, Producer
from qworker.service.server import RewardService
from tests.conftest import TEST_REWARDS
from tests.contract.service.test_service import free_port, serve, stop
from tests.contract.transport.test_peers_of_another_wire_protocol import run_pool_until_it_stops


def test_a_pool_at_the_clients_endpoint_exits_with_one_line_naming_where_pools_connect():
    port = free_port()
    listen = f"tcp://127.0.0.1:{port}"
    service = serve(port, "--workers", "1", "--bind", f"tcp://127.0.0.1:{free_port()}")
    try:
        returncode, err = run_pool_until_it_stops("--connect", listen, "--reward-modules", TEST_REWARDS, "--workers", "1")
        refused = [line for line in err.splitlines() if "refused" in line]
        assert returncode == 2, err
        assert len(refused) == 1, err
        assert (f"the reward service's clients' endpoint {listen} refused this pool: it is for qworker.Clients, not pools; "
                "pools connect to tcp://127.0.0.1:") in refused[0], refused[0]
        with Client(listen) as client:  # its clients are served as before
            assert client.map("noop", [{"i": 1}], timeout=30)[0].ok
    finally:
        stop(service)


def test_a_pool_at_the_clients_endpoint_of_a_service_without_bind_is_told_it_takes_no_remote_pools():
    port = free_port()
    listen = f"tcp://127.0.0.1:{port}"
    service = serve(port, "--workers", "1")  # its own pool on a private socket: no endpoint a remote pool could use
    try:
        returncode, err = run_pool_until_it_stops("--connect", listen, "--reward-modules", TEST_REWARDS, "--workers", "1")
        refused = [line for line in err.splitlines() if "refused" in line]
        assert returncode == 2 and len(refused) == 1, err
        assert f"the reward service's clients' endpoint {listen} refused this pool" in refused[0], refused[0]
        assert "this service takes no remote pools: serve it with --bind tcp://HOST:PORT" in refused[0], refused[0]
        assert "ipc://" not in refused[0]
    finally:
        stop(service)


def test_the_service_logs_one_line_for_a_pool_at_its_clients_endpoint_whatever_it_sends(caplog):
    caplog.set_level(logging.ERROR, logger="qworker")
    with Producer(local_workers=0) as producer:
        service = RewardService(producer, listen="tcp://127.0.0.1:0").start()
        try:
            returncode, err = run_pool_until_it_stops("--connect", service.endpoint, "--reward-modules", TEST_REWARDS,
                                                      "--workers", "1", "--id", "astray")
            assert returncode == 2, err
            deadline = time.monotonic() + 30
            while service.dropped_frames < 3 and time.monotonic() < deadline:  # its reports: running, draining, stopped
                time.sleep(0.05)
            assert service.dropped_frames >= 3
        finally:
            service.stop()
    said = [r.getMessage() for r in caplog.records if "refused 'pool:astray'" in r.getMessage()]
    assert len(said) == 1, said
