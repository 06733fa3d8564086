"""Producers on one host that share a judge endpoint without a service (``judge.control.peers``), in simulated time.

Targets: a producer that starts while another holds the whole
endpoint gets an even share (within 25%) within 30 s, on a refusing cap, a token
bucket and a queueing server without a metrics URL; a producer alone runs
exactly as without notes.  Without the board the latecomer gets 2-8%.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import time

import pytest

from qworker import ConfigError
from qworker.engine.task import Pending
from qworker.judge.control.gate import Gate
from qworker.judge.control.limiter import AdaptiveLimit
from qworker.judge.control.peers import REMOVE_S, STALE_S, DirBoard, MemoryBoard, Note, endpoint_key
from qworker.judge.control.registry import JudgeGates
from tests.contract.judge import judgesim
from tests.contract.judge.judgesim import Server, Sim

LATE = 20.0


def servers(seed: int) -> dict[str, Server]:
    return {
        "refuse": Server(capacity=64, latency=0.3, sigma=0.6, seed=seed),
        "refuse-slowly": Server(capacity=64, latency=0.3, sigma=0.6, seed=seed, retry_after="s", refusal_latency=(0.05, 0.3),
                                load_slope=0.2),
        "bucket": Server(rate=150, latency=0.3, sigma=0.6, seed=seed, retry_after="s"),
        "queue": Server(mode="queue", capacity=64, latency=0.3, sigma=0.6, seed=seed),
    }


def staggered(server: Server, starts: list[float], n: list[int], until: float, shared: bool = True) -> list[judgesim.Client]:
    sim = Sim()
    board = MemoryBoard(clock=lambda: sim.t) if shared else None
    clients: list[judgesim.Client] = []
    for i, (at, count) in enumerate(zip(starts, n, strict=True)):
        sim.at(at, lambda t, i=i, count=count: clients.append(judgesim.Client(sim, server, count, name=f"c{i}-", board=board)))
    while sim.events and sim.events[0][0] <= until:
        t, _, fn = heapq.heappop(sim.events)
        sim.t = t
        fn(t)
    return clients


def shares(clients: list[judgesim.Client], lo: float, hi: float) -> tuple[list[float], float]:
    """(each client's share of the answers in (lo, hi], answers/s)."""
    counts = [sum(1 for x in c.done_at if lo < x <= hi) for c in clients]
    return [c / max(1, sum(counts)) for c in counts], sum(counts) / (hi - lo)


def refused(clients: list[judgesim.Client], lo: float, hi: float) -> float:
    n = sum(1 for c in clients for x in c.done_at if lo < x <= hi)
    r = sum(1 for c in clients for x in c.refused_at if lo < x <= hi)
    return r / max(1, n + r)


ALLOWED = {"refuse": 64 / 0.3, "refuse-slowly": 64 / 0.3 / 1.2, "bucket": 150.0, "queue": 64 / 0.3}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kind", ["refuse", "refuse-slowly", "bucket", "queue"])
def test_a_latecomer_gets_an_even_share_within_30_s(kind, seed):
    server = servers(seed)[kind]
    clients = staggered(server, [0.0, LATE], [60000, 60000], until=LATE + 30.0)
    (first, late), _ = shares(clients, LATE + 25.0, LATE + 30.0)
    assert 0.375 <= late <= 0.625, (first, late)
    _, rate = shares(clients, LATE + 20.0, LATE + 30.0)
    assert rate >= 0.9 * ALLOWED[kind], rate  # together they still use the endpoint
    assert refused(clients, LATE, LATE + 30.0) <= 0.02
    if kind == "queue":  # and the queue stays short: both judge it against the whole load
        waits = [w for t, w in server.waits if LATE + 10.0 < t <= LATE + 30.0]
        assert sum(waits) / len(waits) <= 0.25 * 0.3


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kind", ["refuse", "refuse-slowly", "queue"])
def test_the_endpoint_stays_full_while_a_latecomer_takes_its_share(kind, seed):
    # From 2 s to 10 s after the second producer starts, the two together are served most of what the server
    # allows: the first drains to its share as the second fills, each judging its room by the other's fresh count
    clients = staggered(servers(seed)[kind], [0.0, LATE], [60000, 60000], until=LATE + 10.0)
    _, rate = shares(clients, LATE + 2.0, LATE + 10.0)
    assert rate >= 0.8 * ALLOWED[kind], rate / ALLOWED[kind]


def test_without_the_board_the_latecomer_starves():
    # The defect the board answers (and what ``coordinate: false`` still does)
    clients = staggered(servers(1)["refuse"], [0.0, LATE], [60000, 60000], until=LATE + 30.0, shared=False)
    (_, late), _ = shares(clients, LATE + 25.0, LATE + 30.0)
    assert late < 0.15


@pytest.mark.parametrize("kind", ["refuse", "bucket", "queue"])
def test_three_producers_split_in_thirds_and_the_rest_take_back_what_one_leaves(kind):
    server = servers(1)[kind]
    clients = staggered(server, [0.0, 10.0, 20.0], [60000, 60000, 1500], until=90.0)
    thirds, _ = shares(clients, 25.0, 30.0)
    assert all(0.25 <= s <= 0.42 for s in thirds), thirds
    gone = max(clients[2].done_at)
    assert len(clients[2].done_at) == 1500 and gone < 80.0
    halves, rate = shares(clients[:2], gone + 3.0, gone + 8.0)
    assert all(0.375 <= s <= 0.625 for s in halves), halves
    assert rate >= 0.9 * ALLOWED[kind]


@pytest.mark.parametrize("kind", ["refuse", "bucket", "queue"])
def test_a_producer_alone_runs_exactly_as_without_the_board(kind):
    alone = staggered(servers(2)[kind], [0.0], [6000], until=3600.0, shared=False)[0]
    with_board = staggered(servers(2)[kind], [0.0], [6000], until=3600.0, shared=True)[0]
    assert with_board.done_at == alone.done_at and with_board.refused_at == alone.refused_at


def gate_with(board, url: str = "http://judge") -> Gate:
    return Gate({"model": "m", "endpoints": [{"url": url}]}, board=board)


def test_a_note_that_stops_coming_is_not_counted():
    clock = [0.0]
    board = MemoryBoard(clock=lambda: clock[0])
    key = endpoint_key("http://judge")
    board.publish(key, Note("other", 40, 64.0, True, 0.0))
    g = gate_with(board)
    e = g.endpoints[0]
    e.limit.limit = 64.0
    g.tick(0.0)
    assert len(e.peers) == 1 and e.share() == 24  # 64 less the 40 the other holds now
    clock[0] = STALE_S + 0.1
    g.tick(1.0)
    assert e.peers == [] and e.share() == 64


def test_shares_count_only_producers_with_tasks_waiting():
    board = MemoryBoard(clock=lambda: 0.0)
    key = endpoint_key("http://judge")
    board.publish(key, Note("busy", 20, 60.0, True, 0.0))
    board.publish(key, Note("idle", 4, 64.0, False, 0.0))  # holds 4, wants no more
    g = gate_with(board)
    e = g.endpoints[0]
    e.limit.limit = 64.0
    g.tick(0.0)
    # the lowest limit among those that want more (60), less what the idle one holds, split between two
    assert e.share() == 28
    assert e.total_at_server() == 24


def test_a_joining_producer_starts_from_its_peers_limit_and_capacity():
    board = MemoryBoard(clock=lambda: 0.0)
    board.publish(endpoint_key("http://judge"), Note("there", 60, 63.5, True, 0.0, high=64.0))
    g = gate_with(board)
    g.tick(0.0)
    lim = g.endpoints[0].limit
    assert lim.limit == 63.5 and lim.high == 64.0


def test_a_joining_producer_says_in_its_first_note_the_limit_it_adopted():
    # (its initial limit, the lowest, would otherwise be everyone's until its next note)
    board = MemoryBoard(clock=lambda: 0.0)
    key = endpoint_key("http://judge")
    board.publish(key, Note("there", 60, 63.5, True, 0.0, high=64.0))
    g = gate_with(board)
    g.queue.append(object())  # type: ignore[arg-type]
    g.tick(0.0)
    (mine,) = [n for n in board.read(key) if n.producer == g.peers.producer]
    assert mine.limit == 63.5 and mine.wants
    there = gate_with(board)
    there.peers.producer = "there"
    there.endpoints[0].limit.limit = 63.5
    there.endpoints[0].in_flight = 60
    there.queue.append(object())  # type: ignore[arg-type]
    there.tick(0.0)
    assert there.endpoints[0].share() == 31  # an even half of 63, not of the joiner's initial 32


@pytest.mark.parametrize("scale, answers", [(1.0, 24), (2.0, 12)])
def test_a_limit_shared_with_peers_climbs_back_per_answer_of_the_endpoint(scale, answers):
    # Each producer hears only its share of the answers: a limit every producer judges against the whole load
    # climbs back to the level it knows as fast as one producer's alone (whose climb is unchanged)
    lim = AdaptiveLimit(initial=40.0)
    lim.slow_start = False
    lim.memory.refusal_level = 65.0
    lim.answers_scale = scale
    t, n = 0.0, 0
    while lim.limit < 64.0:
        t, n = t + 0.01, n + 1
        lim.on_success(0.3, lim.limit, t)
    assert n == answers


def test_a_dir_board_rewrites_a_note_in_place_without_renaming_a_file_over_it(tmp_path):
    # A file renamed over another is flushed to disk by ext4 (some 4 ms, on the dispatcher thread, every note)
    board, other = DirBoard(str(tmp_path)), DirBoard(str(tmp_path))
    key = endpoint_key("http://judge")
    board.publish(key, Note("p", 40, 64.0, True, time.time()))
    path = tmp_path / key / "p.json"
    inode = path.stat().st_ino
    board.publish(key, Note("p", 7, 64.0, True, time.time()))
    assert path.stat().st_ino == inode and sorted(os.listdir(tmp_path / key)) == ["p.json"]
    assert [n.in_flight for n in other.read(key)] == [7]
    board.withdraw(key, "p")
    assert not path.exists()


def test_a_note_removed_by_a_peer_while_its_producer_was_stopped_is_written_again(tmp_path):
    # a producer stopped past REMOVE_S has its note aged out by a peer; resumed, its next note must be seen
    board, other = DirBoard(str(tmp_path)), DirBoard(str(tmp_path))
    key = endpoint_key("http://judge")
    board.publish(key, Note("p", 40, 64.0, True, time.time()))
    (tmp_path / key / "p.json").unlink()
    board.publish(key, Note("p", 12, 64.0, True, time.time()))
    assert [n.in_flight for n in other.read(key)] == [12]


def test_a_note_caught_half_rewritten_counts_as_its_producers_last_whole_note(tmp_path):
    board, reader = DirBoard(str(tmp_path)), DirBoard(str(tmp_path))
    key = endpoint_key("http://judge")
    now = time.time()
    board.publish(key, Note("p", 40, 64.0, True, now))
    path = tmp_path / key / "p.json"
    whole = path.read_bytes()
    assert [n.in_flight for n in reader.read(key)] == [40]
    board.publish(key, Note("p", 25, 61.0, True, now + 0.1))
    new = path.read_bytes()
    half = new.index(b'"limit"')
    path.write_bytes(new[:half] + whole[half:])  # read in the middle of the rewrite: the new count, the old limit
    assert [(n.in_flight, n.limit) for n in reader.read(key)] == [(40, 64.0)]
    path.write_bytes(new)
    assert [(n.in_flight, n.limit) for n in reader.read(key)] == [(25, 61.0)]


def test_dir_board_notes_pass_between_gates_and_old_ones_are_removed(tmp_path):
    a, b = gate_with(DirBoard(str(tmp_path))), gate_with(DirBoard(str(tmp_path)))
    a.endpoints[0].in_flight = 7
    a.queue.append(object())  # type: ignore[arg-type]  # tasks waiting: it wants more
    a.tick(0.0)
    b.tick(0.0)
    (note,) = b.endpoints[0].peers
    assert note.in_flight == 7 and note.wants and note.producer == a.peers.producer
    folder = tmp_path / endpoint_key("http://judge")
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert "judge" not in "".join(p.read_text() for p in folder.iterdir())  # counts and a hash, no URL
    now = time.time()
    for name, bad in (("nan", {"limit": float("nan")}), ("negative", {"in_flight": -5}), ("huge", {"in_flight": 10**9}),
                      ("list", None)):
        note = {"producer": name, "in_flight": 1, "limit": 8.0, "wants": True, "at": now, **(bad or {})}
        (folder / f"{name}.json").write_text(json.dumps(note if bad else [note]))
    (folder / "garbage.json").write_text("{not json")
    old = time.time() - REMOVE_S - 5
    os.utime(folder / "garbage.json", (old, old))
    b.peers.due = 0.0
    b.tick(1.0)
    assert len(b.endpoints[0].peers) == 1 and not (folder / "garbage.json").exists()


def test_a_producer_that_closes_withdraws_its_notes_and_the_others_take_its_share_at_once(tmp_path):
    for board in (MemoryBoard(clock=lambda: 0.0), DirBoard(str(tmp_path))):
        a, b = gate_with(board), gate_with(board)
        for g in (a, b):
            g.endpoints[0].limit.limit = 64.0
            g.queue.append(object())  # type: ignore[arg-type]
        a.endpoints[0].in_flight = 30
        a.tick(0.0)
        b.tick(0.0)
        assert b.endpoints[0].share() == 32
        a.close()
        a.close()  # twice is harmless
        b.peers.due = 0.0
        b.tick(0.1)  # well before the note would go stale
        assert b.endpoints[0].peers == [] and b.endpoints[0].share() == 64
        a.tick(1.0)  # a closed gate writes no more notes
        assert [n.producer for n in board.read(endpoint_key("http://judge"))] == [b.peers.producer]


def test_a_capacity_held_is_learnt_from_live_notes_held_for_a_second_only():
    clock = [0.0]
    board = MemoryBoard(clock=lambda: clock[0])
    key = endpoint_key("http://judge")
    g = gate_with(board)
    e = g.endpoints[0]
    e.in_flight = 30
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        clock[0] = t
        board.publish(key, Note("live", 40, 70.0, True, t))
        g.peers.due = 0.0
        g.tick(t)
        if t == 0.5:  # held for a moment: a token bucket's burst holds any level that long
            assert e.limit.high == 0
    assert e.limit.high == 70  # both held 70 together for a second with no refusal
    g2 = gate_with(MemoryBoard(clock=lambda: clock[0]))
    g2.peers.board.publish(key, Note("killed", 40, 70.0, True, 0.0))  # SIGKILLed: its last note stays until stale
    e2 = g2.endpoints[0]
    e2.in_flight = 30
    for t in (1.25, 1.5, 1.75):
        clock[0] = t
        g2.peers.due = 0.0
        g2.tick(t)
    assert len(e2.peers) == 1 and e2.limit.high == 0  # the 40 it claims may be gone: no capacity learnt from it


def test_a_dir_board_that_never_wrote_a_note_creates_nothing_on_leaving(tmp_path):
    DirBoard(str(tmp_path / "judges")).withdraw(endpoint_key("http://judge"), "p")
    assert not (tmp_path / "judges").exists()


def test_a_board_that_fails_on_leaving_does_not_stop_the_close():
    class Stuck(MemoryBoard):
        def withdraw(self, key, producer):
            raise OSError(30, "Read-only file system")

    g = gate_with(Stuck(clock=lambda: 0.0))
    g.tick(0.0)
    g.close()
    assert g.peers.board is None


def test_a_board_that_fails_turns_sharing_off_once_and_dispatch_goes_on(tmp_path, caplog):
    class FullDisk(MemoryBoard):
        calls = 0

        def publish(self, key, note):
            FullDisk.calls += 1
            raise OSError(28, "No space left on device")

    g = gate_with(FullDisk())
    g.endpoints[0].limit.answers_scale, g.endpoints[0].limit.peers = 2.0, 1  # as with a peer, before the board failed
    caplog.set_level(logging.WARNING, logger="qworker")
    g.tick(0.0)
    g.tick(10.0)
    assert FullDisk.calls == 1 and g.peers.board is None
    assert [r.getMessage() for r in caplog.records if "share board failed" in r.getMessage()] == [
        "qworker: judge endpoints' share board failed ([Errno 28] No space left on device); this producer now keeps its own "
        "limits, unaware of other producers on this host"]
    assert g.endpoints[0].free(0.0, 10.0) == 32  # its own limit, as alone
    assert g.endpoints[0].limit.answers_scale == 1.0 and g.endpoints[0].limit.peers == 0  # alone again


def test_a_board_that_raises_anything_turns_sharing_off_and_dispatch_goes_on(caplog):
    class Broken(MemoryBoard):
        def read(self, key):
            raise RuntimeError("a bug in the board")

    g = gate_with(Broken())
    g.queue.append(Pending(b"k", "llm_judge", {}, b"x", None, None, 0.0))
    sent, failed = g.admit(0.0, 10)
    assert g.peers.board is None and len(sent) == 1 and not failed
    assert any("share board failed (a bug in the board)" in r.getMessage() for r in caplog.records)


def test_a_board_directory_open_to_others_is_refused(tmp_path, caplog):
    root = tmp_path / "judges"
    root.mkdir(mode=0o777)
    os.chmod(root, 0o777)
    g = gate_with(DirBoard(str(root)))
    g.tick(0.0)
    assert g.peers.board is None
    assert any("closed to others" in r.getMessage() for r in caplog.records)


def test_coordinate_is_checked_and_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("QWORKER_RUNTIME_DIR", str(tmp_path))
    gates = JudgeGates()
    on = gates.for_params({"model": "m", "endpoints": [{"url": "http://a"}]})
    off = gates.for_params({"model": "m", "endpoints": [{"url": "http://b"}], "coordinate": False})
    assert on.peers is not None and off.peers is None
    with pytest.raises(ConfigError, match="coordinate = 'yes': must be true or false"):
        gates.for_params({"model": "m", "endpoints": [{"url": "http://c"}], "coordinate": "yes"})
    with pytest.raises(ConfigError, match="coordinate False"):
        gates.for_params({"model": "m", "endpoints": [{"url": "http://a"}], "coordinate": False})
    on.tick(0.0)
    assert (tmp_path / "judges" / endpoint_key("http://a")).is_dir()
