"""The CURVE allow-list follows its directory, and a guarded ROUTER stops serving keys removed from it (real sockets)."""

from __future__ import annotations

import os
import shutil
import time

import pytest
import zmq
import zmq.auth

from qworker.transport import security
from qworker.transport.allowlist import DROPS_PER_POLL, AllowList
from qworker.transport.security import CurveClient, CurveServer, create_keys
from qworker.transport.sockets import bind_server, close_server, make_socket, readable


@pytest.fixture
def keys(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    out = {name: create_keys(str(tmp_path / name), name) for name in ("server", "a", "b")}
    for name in ("a", "b"):
        shutil.copy(out[name][0], allowed)
    out["allowed"] = str(allowed)
    return out


def public(path: str) -> bytes:
    return zmq.auth.load_certificate(path)[0]


def test_the_list_follows_its_directory_and_always_holds_the_servers_own_key(keys, caplog):
    own = public(keys["server"][0])
    allow = AllowList(keys["allowed"], own)
    assert allow.keys == {own, public(keys["a"][0]), public(keys["b"][0])}
    assert not allow.reload()  # nothing changed
    os.remove(os.path.join(keys["allowed"], "a.key"))
    assert allow.reload() and allow.keys == {own, public(keys["b"][0])}
    assert "1 removed" in caplog.text
    shutil.copy(keys["a"][0], keys["allowed"])
    assert allow.reload() and allow.allows(public(keys["a"][0]))
    security.reload_all()  # what a SIGHUP handler would call: rereads at once, harmless when nothing changed
    assert allow.allows(public(keys["a"][0])) and allow.allows(own)


def exchange(server: zmq.Socket, client: zmq.Socket, timeout: float = 10.0) -> bool:
    """The client sends; whether the server reads it (within ``timeout``)."""
    client.send_multipart([b"k", b"hello"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        server.poll(100)
        if readable(server):
            return server.recv_multipart()[1:] == [b"k", b"hello"]
    return False


@pytest.fixture
def guarded(keys):
    """A CURVE server's guarded ROUTER and two clients, a and b, whose keys are allowed."""
    ctx, server = bind_server("tcp://127.0.0.1:0", max_message_bytes=1 << 20,
                              curve=CurveServer(keys["server"][1], keys["allowed"]), insecure=False)
    cctx = zmq.Context()
    endpoint = server.getsockopt(zmq.LAST_ENDPOINT).decode()
    clients = {name: make_socket(cctx, zmq.DEALER, connect=endpoint, identity=name.encode(),
                                 curve=CurveClient(keys[name][1], keys["server"][0])) for name in ("a", "b")}
    try:
        yield server, clients
    finally:
        for c in clients.values():
            c.close(linger=0)
        cctx.term()
        close_server(ctx, server)


def revoke(keys, server, name: str) -> None:
    """Remove ``name``'s key from the allowed directory and wait until the server's list follows."""
    os.remove(os.path.join(keys["allowed"], f"{name}.key"))
    deadline = time.monotonic() + 30  # the reloader rereads every RELOAD_EVERY_S
    while server.allow.allows(public(keys[name][0])):
        assert time.monotonic() < deadline, "the removal was not noticed"
        time.sleep(0.05)


def test_a_removed_key_loses_its_open_connection_and_the_others_keep_theirs(keys, guarded):
    server, clients = guarded
    assert exchange(server, clients["a"]) and exchange(server, clients["b"])
    server.send_multipart([b"a", b"to a"])
    assert clients["a"].poll(10_000) and clients["a"].recv_multipart() == [b"to a"]
    revoke(keys, server, "a")
    assert not exchange(server, clients["a"], timeout=1.0)  # read from its open connection no more
    with pytest.raises(zmq.ZMQError) as exc:
        server.send_multipart([b"a", b"to a"])
    assert exc.value.errno == zmq.EHOSTUNREACH
    assert exchange(server, clients["b"])
    server.send_multipart([b"b", b"to b"])
    assert clients["b"].poll(10_000) and clients["b"].recv_multipart() == [b"to b"]


def test_a_revoked_peer_that_floods_cannot_hold_the_polling_thread(keys, guarded):
    server, clients = guarded
    assert exchange(server, clients["a"]) and exchange(server, clients["b"])
    revoke(keys, server, "a")
    flood = 4 * DROPS_PER_POLL
    for _ in range(flood):
        clients["a"].send_multipart([b"k", b"flood"])
    time.sleep(1.0)  # the flood is at the server (its queue holds 1,000 messages per peer)
    calls = 0
    while server._drops.get(b"a", 0) < flood - DROPS_PER_POLL:
        before = server._drops.get(b"a", 0)
        server.poll(100)
        assert not readable(server)  # only revoked messages are waiting
        assert server._drops[b"a"] - before <= DROPS_PER_POLL  # and one call drops a bounded number of them
        calls += 1
        assert calls < 100, "the flood was not drained"
    assert calls >= 2
    for _ in range(flood):  # a receive without a poll first (the reward service's way) is bounded the same way
        clients["a"].send_multipart([b"k", b"flood"])
    time.sleep(1.0)
    before = server._drops[b"a"]
    with pytest.raises(zmq.Again):
        server.recv_multipart(zmq.NOBLOCK)
    assert server._drops[b"a"] - before == DROPS_PER_POLL
    assert exchange(server, clients["b"])  # the allowed peer behind the flood is still served
