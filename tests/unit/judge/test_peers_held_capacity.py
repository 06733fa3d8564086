"""A level producers hold together is a capacity seen only once held without a gap: notes from before a time
without peers (or a stalled dispatcher) are not evidence that the level is held now."""

from __future__ import annotations

from types import SimpleNamespace

from qworker.judge.control.peers import HELD_S, MemoryBoard, Note, Peers


def test_a_level_held_before_a_gap_without_peers_is_not_a_capacity_seen_when_they_return():
    clock = [0.0]
    limit = SimpleNamespace(drops=0, rtt=0.2, knee_level=1000.0)
    endpoint = SimpleNamespace(url="http://judge", peers=[], limit=limit, load=0, total_at_server=lambda: endpoint.load)
    peers = Peers(MemoryBoard(clock=lambda: clock[0]), [endpoint])

    def note(at: float, load: int) -> float:
        clock[0] = at
        endpoint.peers = [Note("other", 0, 100.0, True, at)]
        endpoint.load = load
        return peers._held_level(0, endpoint, at)

    assert note(0.0, 60) == 0.0 and note(0.1, 60) == 0.0  # not yet held for HELD_S
    assert note(600.0, 60) == 0.0  # a peer again after 10 minutes: held since now, not since t=0
    t = 600.0
    while t < 600.0 + HELD_S:
        t = round(t + 0.1, 3)
        note(t, 60)
    assert note(t + 0.1, 60) == 60.0  # held for HELD_S without a gap: a capacity seen
