"""A peer refused for every frame it sends (a ``Client`` at a producer's pool endpoint: its submission, then its ping)
is one log line, however many frames; many peers are rationed as any repeated event is (``LogRation``)."""

from __future__ import annotations

from qworker.transport.ration import FIRST, PEERS, PeerRation


def test_a_peer_is_logged_once_whatever_it_sends():
    ration = PeerRation()
    assert [ration.tick(b"client-a") for _ in range(5)] == [True, False, False, False, False]
    assert ration.tick(b"client-b") and not ration.tick(b"client-a")
    assert ration.count == 7


def test_many_peers_are_rationed_and_remembered_within_a_bound():
    ration = PeerRation()
    logged = [ration.tick(f"client-{i}".encode()) for i in range(3 * PEERS)]
    assert logged[:FIRST] == [True] * FIRST and sum(logged) == FIRST + 3  # then the 1000th, 2000th and 3000th new peer
    assert len(ration._peers) == PEERS
