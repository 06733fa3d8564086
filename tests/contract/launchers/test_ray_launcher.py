"""The Ray launcher on a real multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``).

Every Ray server stays on 127.0.0.1 (see FIELD-NOTES: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``,
``node_ip_address``, no dashboard, no usage stats, a temp dir of our own, which also holds
Ray's "current cluster" file so no other Ray user on this machine finds our cluster).
The producer binds tcp://127.0.0.1:0.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Callable, Iterator

import psutil
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from qworker import PoolOptions, Producer  # noqa: E402
from qworker.launchers.ray import PoolInfo, RayPools  # noqa: E402
from tests.conftest import TEST_REWARDS, console_script, count_lines  # noqa: E402

LOOPBACK = "127.0.0.1"
OPTIONS = PoolOptions(reward_modules=(TEST_REWARDS,), drain_timeout_s=5.0)


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def processes_serving(endpoint: str) -> list[psutil.Process]:
    """Every pool supervisor and worker started against ``endpoint`` (their argv names it)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if endpoint in (proc.info["cmdline"] or []) and proc.pid != os.getpid():
                found.append(proc)
        except psutil.Error:
            continue
    return found


def assert_nothing_left(endpoint: str, infos: list[PoolInfo]) -> None:
    actor_pids = [i.actor_pid for i in infos if i.actor_pid]
    wait_until(lambda: not processes_serving(endpoint), 15, f"the pools and workers of {endpoint} to exit")
    wait_until(lambda: not any(psutil.pid_exists(pid) for pid in actor_pids), 15, "the pool actors' processes to exit")


def alive_node_ids() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def pool_of(worker: str) -> str:
    return worker.split("/")[0]


def ray_processes(temp_dir: str) -> list[psutil.Process]:
    """Ray's servers (their argv names ``temp_dir``) and everything they started."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(temp_dir in a for a in proc.info["cmdline"] or []):
                found.update((p.pid, p) for p in [proc, *proc.children(recursive=True)])
        except psutil.Error:
            continue
    return list(found.values())


def non_loopback_listeners(procs: list[psutil.Process]) -> list[str]:
    """``pid ip:port`` of every listening TCP socket of ``procs`` that is not on loopback."""
    found = []
    for proc in procs:
        try:
            conns = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        found += [f"{proc.pid} {c.laddr.ip}:{c.laddr.port}" for c in conns if c.status == psutil.CONN_LISTEN and not is_loopback(c.laddr.ip)]
    return found


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # Short path: Ray puts unix sockets under it (108-byte limit).
    tmp = tempfile.mkdtemp(prefix="qwray-", dir="/tmp")
    os.makedirs(os.path.join(tmp, "ray"))
    mp = pytest.MonkeyPatch()
    for key, value in {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": tmp,
        "QWORKER_RUNTIME_DIR": os.path.join(tmp, "qworker"),
    }.items():
        mp.setenv(key, value)  # for every process Ray starts
    # Ray read RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER when it was imported, before this fixture ran.
    mp.setattr(ray._private.ray_constants, "ENABLE_RAY_CLUSTER", False)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": LOOPBACK, "include_dashboard": False, "temp_dir": tmp})
    c.add_node(num_cpus=1, node_ip_address=LOOPBACK)
    try:
        assert c.address.startswith(f"{LOOPBACK}:"), f"Ray's GCS is not on loopback: {c.address}"
        ray.init(address=c.address, _node_ip_address=LOOPBACK)
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {LOOPBACK}
        assert not non_loopback_listeners(ray_processes(tmp))
        yield c
    finally:
        tree = ray_processes(tmp)
        ray.shutdown()
        c.shutdown()
        _, alive = psutil.wait_procs(tree, timeout=30)
        mp.undo()
        shutil.rmtree(tmp, ignore_errors=True)
        assert not alive, f"Ray processes left after shutdown: {[p.pid for p in alive]}"


@pytest.fixture
def producer() -> Iterator[Producer]:
    with Producer(bind=f"tcp://{LOOPBACK}:0", local_workers=0) as p:
        yield p


def test_a_pool_per_node_serves_and_a_killed_pool_actor_loses_nothing(cluster, producer, tmp_path):
    p = producer
    with RayPools(connect=p.endpoint, options=OPTIONS, poll_s=0.5) as pools:
        infos = pools.pools()
        assert {i.node_id for i in infos} == alive_node_ids() and len(infos) == 2
        assert all(i.state == "running" and i.workers == 1 and i.node_id[:8] in i.pool_id for i in infos)
        p.wait_for_workers(2, timeout=60)
        results = p.map("count_eval", [{"log": str(tmp_path / "a"), "i": i, "sleep_ms": 10} for i in range(100)], timeout=60)
        assert all(r.ok for r in results)
        assert {pool_of(r.worker) for r in results} == {i.pool_id for i in infos}  # tasks ran on every node
        running = ray_processes(cluster.head_node.get_temp_dir_path()) + processes_serving(p.endpoint)
        assert len(processes_serving(p.endpoint)) == 4 and not non_loopback_listeners(running)

        # Kill one node's pool actor (SIGKILL: no goodbye) while tasks are in flight.
        victim = infos[0]
        log = tmp_path / "b"
        futures = p.submit_batch("count_eval", [{"log": str(log), "i": i, "sleep_ms": 20} for i in range(200)])
        wait_until(lambda: count_lines(log) >= 20, 30, "work to start")
        os.kill(victim.actor_pid, signal.SIGKILL)
        results = p.gather(futures, timeout=90)
        assert [r.score for r in results] == [float(i) for i in range(200)]  # nothing lost
        assert all(r.ok for r in results)

        # The pool comes back on the same node, under a new id, and serves.
        def back() -> bool:
            now = {i.node_id: i for i in pools.pools()}
            return now[victim.node_id].state == "running" and now[victim.node_id].restarts == 1

        wait_until(back, 60, "the killed pool to be restarted")
        reborn = next(i for i in pools.pools() if i.node_id == victim.node_id)
        assert reborn.pool_id == f"{victim.pool_id}-r1" and reborn.actor_pid != victim.actor_pid
        assert not psutil.pid_exists(victim.pid)  # the orphaned supervisor drained and left by itself
        wait_until(lambda: any(pl["pool"] == reborn.pool_id and any(w["alive"] for w in pl["workers"]) for pl in p.status()["pools"]), 60, "the new pool's worker")
        results = p.map("count_eval", [{"log": str(tmp_path / "c"), "i": i, "sleep_ms": 10} for i in range(100)], timeout=60)
        assert all(r.ok for r in results) and reborn.pool_id in {pool_of(r.worker) for r in results}

        # A supervisor that dies under a live actor is noticed too (the actor reports its exit code).
        os.kill(reborn.pid, signal.SIGKILL)
        wait_until(lambda: {i.node_id: i for i in pools.pools()}[victim.node_id].restarts == 2, 30, "the dead supervisor to be noticed")
        wait_until(lambda: all(i.state == "running" for i in pools.pools()), 30, "the second restart")
        assert {i.node_id: i for i in pools.pools()}[victim.node_id].pool_id == f"{victim.pool_id}-r2"
        final = pools.pools()
    assert_nothing_left(p.endpoint, [*infos, reborn, *final])


def test_pools_follow_nodes_that_join_and_leave(cluster, producer, tmp_path):
    p = producer
    pools = RayPools(connect=p.endpoint, options=OPTIONS.replace(pool_id="follow"), poll_s=0.5).start()
    try:
        assert len(pools.pools()) == 2
        node = cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK)
        wait_until(lambda: len(pools.pools()) == 3 and all(i.state == "running" for i in pools.pools()), 60, "a pool on the new node")
        new = next(i for i in pools.pools() if i.node_id == node.node_id)
        assert new.pool_id.startswith("follow-") and new.restarts == 0
        p.wait_for_workers(3, timeout=60)
        results = p.map("count_eval", [{"log": str(tmp_path / "a"), "i": i, "sleep_ms": 10} for i in range(150)], timeout=60)
        assert all(r.ok for r in results)
        assert {pool_of(r.worker) for r in results} == {i.pool_id for i in pools.pools()}
        seen = pools.pools()

        cluster.remove_node(node)
        wait_until(lambda: node.node_id not in {i.node_id for i in pools.pools()}, 60, "the departed node's pool to be forgotten")
        assert len(pools.pools()) == 2 and all(i.restarts == 0 for i in pools.pools())  # the others were left alone
        results = p.map("count_eval", [{"log": str(tmp_path / "b"), "i": i} for i in range(50)], timeout=60)
        assert all(r.ok for r in results)
    finally:
        pools.stop()
    pools.stop()  # idempotent
    assert_nothing_left(p.endpoint, seen)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 0), (signal.SIGINT, 130)], ids=["sigterm-0", "ctrl-c-130"])
def test_the_cli_runs_pools_until_sigterm_or_ctrl_c_which_exits_130(cluster, producer, sig, code):
    p = producer
    cli = subprocess.Popen(
        [console_script("qworker"), "ray-pools", "--address", cluster.address, "--connect", p.endpoint, "--rewards", TEST_REWARDS,
         "--workers-per-node", "2", "--id", "cli", "--drain-timeout", "5", "--poll", "0.5", "--log-level", "INFO"],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        p.wait_for_workers(4, timeout=60)  # two pools of two
        results = p.map("noop", [{"i": i} for i in range(100)], timeout=60)
        pools = {pl["pool"] for pl in p.status()["pools"]}
    finally:
        cli.send_signal(sig)
        _, err = cli.communicate(timeout=60)
    assert all(r.ok for r in results)
    assert len(pools) == 2 and all(pl.startswith("cli-") for pl in pools)
    assert cli.returncode == code, err
    assert "stopped 2 pool(s)" in err
    assert_nothing_left(p.endpoint, [])
