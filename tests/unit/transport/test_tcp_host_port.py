"""``tcp_host_port`` is the one split of a ``tcp://HOST:PORT`` endpoint (checking, binding, naming it): at the last
colon, an IPv6 host keeping its brackets, anything after the colon kept for ``check_endpoint`` to judge."""

from __future__ import annotations

import pytest

from qworker.transport.endpoint import tcp_host_port


@pytest.mark.parametrize("endpoint, split", [
    ("tcp://127.0.0.1:5555", ("127.0.0.1", "5555")),
    ("tcp://[::1]:5555", ("[::1]", "5555")),
    ("tcp://*:*", ("*", "*")),
    ("tcp://host", ("", "host")),  # no port: no host either (check_endpoint refuses it)
    ("ipc:///tmp/q.sock", None),
    ("inproc://x", None),
])
def test_a_tcp_endpoint_splits_at_its_last_colon_and_others_are_not_tcp(endpoint, split):
    assert tcp_host_port(endpoint) == split
