"""An endpoint string a user gives is checked for its form where it enters, naming the option it came from."""

from __future__ import annotations

import os

import pytest

from qworker import ConfigError
from qworker.transport.endpoint import IPC_PATH_MAX, check_endpoint, oversize_ipc_path, reachable
from qworker.transport.sockets import new_ipc_endpoint


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:5557", "tcp://[::1]:0", "tcp://127.0.0.1:*", "tcp://*:5555",
                                      "ipc:///tmp/q.sock", "inproc://results", "pgm://eth0;239.192.1.1:5555"])
def test_well_formed_endpoints_pass_unchanged(endpoint):
    assert check_endpoint(endpoint, what="--connect") == endpoint


@pytest.mark.parametrize("endpoint, says", [
    ("127.0.0.1:5557", "--connect '127.0.0.1:5557' is not a ZeroMQ endpoint: write tcp://127.0.0.1:5557"),
    ("localhost", "write tcp://HOST:PORT"),
    ("tcp:/127.0.0.1:5557", "write tcp://127.0.0.1:5557 "),  # a scheme written wrong: what was meant
    ("tcp:127.0.0.1:5557", "write tcp://127.0.0.1:5557 "),
    ("tcp//127.0.0.1:5557", "write tcp://127.0.0.1:5557 "),
    ("TCP://127.0.0.1:5557", "write tcp://127.0.0.1:5557 "),
    ("ipc:/tmp/q.sock", "write ipc:///tmp/q.sock "),
    ("http://127.0.0.1:5557", "write tcp://HOST:PORT"),
    ("tcp://127.0.0.1:65536", "a port from 0 to 65535"),
    ("tcp://127.0.0.1", "expected tcp://HOST:PORT"),
    ("tcp://:5557", "expected tcp://HOST:PORT"),
    ("tcp:///127.0.0.1:5557", "a tcp host has no leading slash: write tcp://127.0.0.1:5557"),
    ("tcp://my host:5557", "a tcp host has no spaces or control characters: write tcp://HOST:PORT with HOST a name or an address, e.g. tcp://myhost:5557"),
    ("tcp://127.0.0.1 :5557", "e.g. tcp://127.0.0.1:5557"),
    ("tcp://host\n:5557", "a tcp host has no spaces or control characters"),
    ("tcp:5555", "write tcp://127.0.0.1:5555 "),  # a port alone after a miswritten scheme: this host's
    ("tcp:", "write tcp://HOST:PORT "),
    ("tcp:localhost", "write tcp://HOST:PORT "),
    (5557, "--connect 'int' is not a ZeroMQ endpoint: write tcp://127.0.0.1:5557"),
    ("5557", "--connect '5557' is not a ZeroMQ endpoint: write tcp://127.0.0.1:5557"),
    ("99999", "--connect '99999' is not a ZeroMQ endpoint: write tcp://HOST:PORT"),  # no port: not told to write one
    (0, "--connect 'int' is not a ZeroMQ endpoint: write tcp://HOST:PORT"),
    ("udp:/x", "write tcp://HOST:PORT "),  # another scheme, not a host and port: no tcp://udp:/x
    ("http:/h:80", "write tcp://HOST:PORT "),
    ("tcp:\u0665", "write tcp://HOST:PORT "),  # a digit, but not an ASCII port
])
def test_a_malformed_endpoint_is_a_config_error_naming_the_option(endpoint, says):
    with pytest.raises(ConfigError) as err:
        check_endpoint(endpoint, what="--connect")
    assert says in str(err.value)


def test_a_client_given_a_bare_host_port_refuses_before_opening_a_socket():
    from qworker import Client

    with pytest.raises(ConfigError, match="Client\\(connect=...\\) '127.0.0.1:5557' is not a ZeroMQ endpoint"):
        Client("127.0.0.1:5557")


def test_an_ipc_path_too_long_for_a_unix_socket_is_a_config_error_naming_the_option():
    fits = "ipc:///" + "a" * (IPC_PATH_MAX - 1)
    assert check_endpoint(fits, what="--bind") == fits
    with pytest.raises(ConfigError) as err:
        check_endpoint(fits + "a", what="--bind")
    assert f"--bind {fits + 'a'!r}: the path is {IPC_PATH_MAX + 1} bytes, over the {IPC_PATH_MAX}" in str(err.value)


def test_a_runtime_directory_too_long_for_its_sockets_is_a_config_error_naming_the_variable(tmp_path, monkeypatch):
    long_dir = tmp_path / ("d" * max(1, IPC_PATH_MAX - len(str(tmp_path))))
    monkeypatch.setenv("QWORKER_RUNTIME_DIR", str(long_dir))
    with pytest.raises(ConfigError) as err:
        new_ipc_endpoint()
    assert f"qworker's runtime directory {long_dir} (from QWORKER_RUNTIME_DIR)" in str(err.value)
    assert "set QWORKER_RUNTIME_DIR to a shorter directory" in str(err.value)
    monkeypatch.setenv("QWORKER_RUNTIME_DIR", str(tmp_path))
    assert check_endpoint(new_ipc_endpoint(), what="the runtime directory")  # a short one makes a path that fits


@pytest.mark.parametrize("over", [0, 1])
def test_a_path_qworker_makes_and_one_a_user_gives_are_held_to_one_ipc_length_rule(tmp_path, monkeypatch, over):
    """At the limit, in bytes of multibyte names: the runtime directory's socket path and the same path given as an
    endpoint fit, or are refused, together."""
    suffix = len(f"/p{os.getpid()}-") + 8 + len(".sock")  # what new_ipc_endpoint adds to the directory
    room = IPC_PATH_MAX + over - suffix - len(str(tmp_path).encode()) - 1  # bytes left for one more directory name
    assert room >= 2, f"pytest's tmp_path {tmp_path} leaves no room under the limit"
    name = "é" * (room // 2) + "d" * (room % 2)  # two bytes each
    monkeypatch.setenv("QWORKER_RUNTIME_DIR", str(tmp_path / name))
    given = "ipc://" + str(tmp_path / name / f"p{os.getpid()}-{'0' * 8}.sock")
    assert len(given[len("ipc://"):].encode()) == IPC_PATH_MAX + over
    if over:
        with pytest.raises(ConfigError):
            new_ipc_endpoint()
        with pytest.raises(ConfigError):
            check_endpoint(given, what="--bind")
    else:
        assert check_endpoint(new_ipc_endpoint(), what="the runtime directory")
        assert check_endpoint(given, what="--bind") == given
    assert (oversize_ipc_path(given[len("ipc://"):]) is None) is not bool(over)


def test_a_port_in_use_on_every_interface_is_named_with_an_address_one_can_connect_to():
    import errno

    from qworker.transport.sockets import bind_refusal
    for bound in ("tcp://*:5555", "tcp://0.0.0.0:5555"):
        line = bind_refusal(bound, errno.EADDRINUSE)
        assert line.startswith(f"cannot bind {bound}:") and "'qworker status --connect tcp://127.0.0.1:5555'" in line


@pytest.mark.parametrize("endpoint", ["tcp://*:5555", "tcp://0.0.0.0:5555", "tcp://[::]:5555", "tcp://127.0.0.1:*",
                                      "tcp://127.0.0.1:0"])
def test_a_bind_address_given_to_connect_to_is_a_config_error_naming_what_to_write(endpoint):
    assert check_endpoint(endpoint, what="--bind") == endpoint  # a bind takes it
    with pytest.raises(ConfigError, match="an address to bind, not to connect to"):
        check_endpoint(endpoint, what="--connect", connect=True)


def test_a_bound_endpoint_on_every_interface_is_named_by_its_port_when_a_peer_is_told_to_connect():
    assert reachable("tcp://0.0.0.0:5557") == "port 5557 of this host (tcp://0.0.0.0:5557)"
    assert reachable("tcp://*:5557") == "port 5557 of this host (tcp://*:5557)"
    assert reachable("tcp://[::]:5557") == "port 5557 of this host (tcp://[::]:5557)"
    assert reachable("tcp://127.0.0.1:5557") == "tcp://127.0.0.1:5557"
    assert reachable("ipc:///tmp/q.sock") == "ipc:///tmp/q.sock"


def test_a_tcp_host_with_a_space_is_not_told_to_write_an_address_that_connect_refuses():
    with pytest.raises(ConfigError) as err:
        check_endpoint("tcp://* :5555", what="--connect", connect=True)
    assert "a tcp host has no spaces" in str(err.value) and "e.g." not in str(err.value)
    with pytest.raises(ConfigError, match=r"e\.g\. tcp://\*:5555"):  # a bind takes it
        check_endpoint("tcp://* :5555", what="--bind")


@pytest.mark.parametrize("endpoint, says", [
    ("tcp://host:\uff15\uff15\uff15\uff15", "a port from 0 to 65535"),  # full-width digits: libzmq reads ASCII only
    ("tcp://127.0.0.1:00", "an address to bind, not to connect to"),  # port 0 however written
    ("tcp://my host:99999", "with HOST a name or an address"),
])
def test_a_port_is_read_as_libzmq_reads_it_and_no_example_is_one_the_check_refuses(endpoint, says):
    with pytest.raises(ConfigError) as err:
        check_endpoint(endpoint, what="--connect", connect=True)
    assert says in str(err.value) and "e.g. tcp://myhost" not in str(err.value)  # tcp://myhost:99999 is refused too
