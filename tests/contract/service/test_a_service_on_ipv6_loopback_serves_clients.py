"""``qworker serve --listen tcp://[::1]:P`` (IPv6 loopback, which counts as local: no CURVE needed) serves a
``Client`` connected there, and a pool connects to ``--bind tcp://[::1]:P``.  Real processes over tcp."""

from __future__ import annotations

import socket

import pytest

from qworker import Client, Producer
from tests.contract.service.test_service import free_port, serve, stop


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _ipv6_loopback(), reason="this host has no IPv6 loopback (::1)")


def test_a_service_listening_on_ipv6_loopback_serves_a_client_there():
    port = free_port()
    service = serve(port, "--workers", "1", "--listen", f"tcp://[::1]:{port}")
    try:
        with Client(f"tcp://[::1]:{port}", connect_timeout_s=120) as client:
            assert client.map("noop", [{"i": 1}], timeout=60)[0].ok
    finally:
        stop(service)


def test_a_producer_binds_ipv6_loopback_for_its_pools():
    with Producer(bind="tcp://[::1]:0", local_workers=0) as producer:
        assert producer.endpoint.startswith("tcp://[::1]:")
