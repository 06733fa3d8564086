"""A ``qworker.Client`` pointed at a producer's endpoint for pools (``Producer(bind=)``, ``qworker serve --bind``) is
refused at its first request with one line saying what that endpoint is and where Clients connect, not left to wait
``connect_timeout_s`` and blame a missing service; the producer still serves its pools.  Real sockets over tcp."""

from __future__ import annotations

import logging

import pytest

from qworker import Client, Producer, ServiceUnavailable
from tests.contract.service.test_service import free_port, serve, stop

WAIT_S = 120  # the Client's connect_timeout_s: a Client that waited for it would say "did not answer within 120 s"


def test_a_client_at_an_embedded_producers_pool_endpoint_is_told_it_serves_no_clients(caplog):
    caplog.set_level(logging.ERROR, logger="qworker")
    bind = f"tcp://127.0.0.1:{free_port()}"
    with Producer(bind=bind, local_workers=0) as producer:
        with Client(bind, connect_timeout_s=WAIT_S) as client:
            for _ in range(2):  # each request is refused the same way, never taken, never left waiting
                with pytest.raises(ServiceUnavailable) as refused:
                    client.submit_batch("noop", [{"i": 1}])
                line = str(refused.value)
                assert line.startswith(f"the producer's pool endpoint {bind} refused this client: it is for pools and workers "
                                       "('qworker-pool --connect'), not a reward service's Clients"), line
                assert "this producer serves no Clients ('qworker serve' does" in line, line
        assert producer.status()["producer"]["dropped_frames"] >= 2
    said = [r.getMessage() for r in caplog.records if "a Client at the pools' endpoint" in r.getMessage()]
    assert len(said) == 1, said  # one line at the producer for the Client, whatever it sent (submissions, pings)


def test_a_client_at_a_services_pool_endpoint_is_told_where_clients_connect():
    listen_port, bind = free_port(), f"tcp://127.0.0.1:{free_port()}"
    service = serve(listen_port, "--workers", "1", "--bind", bind)
    try:
        with Client(bind, connect_timeout_s=WAIT_S) as client:
            with pytest.raises(ServiceUnavailable) as refused:
                client.map("noop", [{"i": 1}])
            line = str(refused.value)
            assert line.startswith(f"the producer's pool endpoint {bind} refused this client: it is for pools and workers"), line
            assert line.endswith(f"Clients connect to tcp://127.0.0.1:{listen_port}"), line
        with Client(f"tcp://127.0.0.1:{listen_port}", connect_timeout_s=WAIT_S) as client:  # where it was told to go
            assert client.map("noop", [{"i": 1}], timeout=30)[0].ok
    finally:
        stop(service)
