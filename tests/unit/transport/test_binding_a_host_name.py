"""Binding ``tcp://NAME:PORT`` without CURVE: only ``localhost`` or an address counts as loopback, and a host name that
resolves to this host's loopback alone (``/etc/hosts``' 127.0.0.1 or 127.0.1.1 for the host's own name) is refused
with a line saying so and what to write, not the line about authentication (pure: the resolution is replaced)."""

from __future__ import annotations

import pytest

from qworker import ConfigError
from qworker.transport import security

HOSTS = {"vm": ["127.0.0.1"], "debian": ["127.0.1.1", "127.0.1.1"], "v6": ["::1"], "gpu7": ["10.0.0.7"],
         "mixed": ["127.0.0.1", "10.0.0.7"]}


@pytest.fixture(autouse=True)
def hosts(monkeypatch):
    monkeypatch.setattr(security, "_addresses", lambda host: HOSTS.get(host, []))


@pytest.mark.parametrize("name, write", [("vm", "tcp://127.0.0.1:5557"), ("debian", "tcp://127.0.1.1:5557"),
                                         ("v6", "tcp://[::1]:5557")])
def test_a_host_name_for_this_hosts_loopback_is_refused_naming_the_address_to_write(name, write):
    with pytest.raises(ConfigError) as err:
        security.check_bind(f"tcp://{name}:5557", None, insecure=False)
    line = str(err.value)
    assert line.startswith(f"refusing to bind tcp://{name}:5557: '{name}' names this host's loopback address "), line
    assert f"write {write} to serve this host alone" in line and "\n" not in line


@pytest.mark.parametrize("name", ["gpu7", "mixed", "unknown"])
def test_a_host_name_that_may_reach_beyond_this_host_needs_authentication(name):
    with pytest.raises(ConfigError, match=f"refusing to bind tcp://{name}:5557 without authentication"):
        security.check_bind(f"tcp://{name}:5557", None, insecure=False)


def test_insecure_binds_a_loopback_name_as_asked():
    security.check_bind("tcp://vm:5557", None, insecure=True)
