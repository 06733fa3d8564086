"""An endpoint string a user gives is checked for its form where it enters, naming the option it came from."""

from __future__ import annotations

import pytest

from qworker import ConfigError
from qworker.transport.endpoint import check_endpoint


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:5557", "tcp://[::1]:0", "tcp://127.0.0.1:*", "tcp://*:5555",
                                      "ipc:///tmp/q.sock", "inproc://results", "pgm://eth0;239.192.1.1:5555"])
def test_well_formed_endpoints_pass_unchanged(endpoint):
    assert check_endpoint(endpoint, what="--connect") == endpoint


@pytest.mark.parametrize("endpoint, says", [
    ("127.0.0.1:5557", "--connect '127.0.0.1:5557' is not a ZeroMQ endpoint: write tcp://127.0.0.1:5557"),
    ("localhost", "write tcp://HOST:PORT"),
    ("http://127.0.0.1:5557", "write tcp://HOST:PORT"),
    ("tcp://127.0.0.1:65536", "a port from 0 to 65535"),
    ("tcp://127.0.0.1", "expected tcp://HOST:PORT"),
    ("tcp://:5557", "expected tcp://HOST:PORT"),
    (5557, "--connect 'int' is not a ZeroMQ endpoint"),
])
def test_a_malformed_endpoint_is_a_config_error_naming_the_option(endpoint, says):
    with pytest.raises(ConfigError) as err:
        check_endpoint(endpoint, what="--connect")
    assert says in str(err.value)


def test_a_client_given_a_bare_host_port_refuses_before_opening_a_socket():
    from qworker import Client

    with pytest.raises(ConfigError, match="Client\\(connect=...\\) '127.0.0.1:5557' is not a ZeroMQ endpoint"):
        Client("127.0.0.1:5557")
