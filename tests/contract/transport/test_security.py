"""CURVE across hosts: allowed pools serve; unknown, missing and raw peers are refused (real sockets, real pools)."""

from __future__ import annotations

import logging
import shutil
import signal
import socket
import subprocess
import time

import pytest

from qworker import ConfigError, Producer
from qworker.transport.security import check_bind, create_keys, is_loopback
from tests.conftest import TEST_REWARDS, console_script


@pytest.fixture
def keys(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    out = {}
    for name in ("producer", "pool", "stranger"):
        out[name] = create_keys(str(tmp_path / name), name)  # (public, secret)
    shutil.copy(out["pool"][0], allowed)  # only the pool's public key is admitted
    out["allowed"] = str(allowed)
    return out


def pool(endpoint: str, pool_id: str, *curve: str) -> subprocess.Popen:
    return subprocess.Popen(
        [console_script("qworker-pool"), "--connect", endpoint, "--workers", "1", "--id", pool_id, "--reward-modules", TEST_REWARDS,
         "--heartbeat", "0.3", *curve], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1]


def test_only_the_allowed_pool_serves_and_the_others_are_refused_and_logged(keys, caplog):
    caplog.set_level(logging.WARNING, logger="qworker")
    producer_pub, producer_sec = keys["producer"]
    with Producer(bind="tcp://127.0.0.1:0", local_workers=0, curve_secret_key=producer_sec, curve_allowed_keys=keys["allowed"]) as p:
        good = pool(p.endpoint, "good", "--curve-secret-key", keys["pool"][1], "--curve-server-key", producer_pub)
        stranger = pool(p.endpoint, "stranger", "--curve-secret-key", keys["stranger"][1], "--curve-server-key", producer_pub)
        keyless = pool(p.endpoint, "keyless")
        host, port = p.endpoint[len("tcp://"):].rsplit(":", 1)
        raw = socket.create_connection((host, int(port)))
        raw.sendall(b"\xff" * 64 + b"GET / HTTP/1.1\r\n\r\n")
        try:
            p.wait_for_workers(1, timeout=30)
            results = p.map("gsm8k", [{"response": f"#### {i}", "ground_truth": str(i)} for i in range(300)], timeout=60)
            time.sleep(1.5)  # long enough for the refused pools' workers to have tried several times
            status = p.status()
        finally:
            raw.close()
            for proc in (stranger, keyless):
                stop(proc)
            stop(good)
    assert all(r.ok and r.score == 1.0 for r in results)
    assert {r.worker.split("/")[0] for r in results} == {"good"}
    assert [pl["pool"] for pl in status["pools"]] == ["good"]  # nothing from the others reached the producer
    assert status["producer"]["dropped_frames"] == 0
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert any("from 127.0.0.1" in m and "not among the allowed keys" in m for m in refusals)  # the stranger, with its address
    assert any("CURVE handshake failed" in m for m in refusals)  # the keyless pool and the raw client
    assert not any(k in m for m in refusals for k in (open(producer_sec).read().split('"')[1::2][-1],))  # no secret key logged


def test_curve_on_and_off_give_the_same_results(keys):
    payloads = [{"response": f"#### {i % 7}", "ground_truth": "3"} for i in range(200)]
    with Producer(local_workers=1) as p:
        plain = [(r.score, r.extra) for r in p.map("gsm8k", payloads, timeout=60)]
    producer_pub, producer_sec = keys["producer"]
    with Producer(bind="tcp://127.0.0.1:0", local_workers=1, curve_secret_key=producer_sec, curve_allowed_keys=keys["allowed"]) as p:
        secured = [(r.score, r.extra) for r in p.map("gsm8k", payloads, timeout=60)]
    assert secured == plain


def test_binding_beyond_loopback_needs_curve_or_insecure(keys):
    assert is_loopback("tcp://127.0.0.1:5") and is_loopback("ipc:///tmp/x") and is_loopback("tcp://[::1]:5")
    assert not is_loopback("tcp://0.0.0.0:5") and not is_loopback("tcp://*:5") and not is_loopback("tcp://10.1.2.3:5")
    with pytest.raises(ConfigError, match="refusing to bind tcp://0.0.0.0:0 without authentication"):
        check_bind("tcp://0.0.0.0:0", None, insecure=False)
    check_bind("tcp://0.0.0.0:0", None, insecure=True)
    with pytest.raises(ConfigError, match="refusing to bind"):
        Producer(bind="tcp://0.0.0.0:0", local_workers=0)


def test_half_a_curve_setting_and_bad_key_files_are_config_errors(keys, tmp_path):
    with pytest.raises(ConfigError, match="both curve_secret_key and curve_allowed_keys"):
        Producer(bind="tcp://127.0.0.1:0", local_workers=0, curve_secret_key=keys["producer"][1])
    with pytest.raises(ConfigError, match="holds no secret key"):
        Producer(bind="tcp://127.0.0.1:0", local_workers=0, curve_secret_key=keys["producer"][0], curve_allowed_keys=keys["allowed"])
    with pytest.raises(ConfigError, match="cannot read CURVE key file"):
        Producer(bind="tcp://127.0.0.1:0", local_workers=0, curve_secret_key=str(tmp_path / "nope"), curve_allowed_keys=keys["allowed"])


def test_qworker_keys_writes_a_pair(tmp_path):
    out = subprocess.run([console_script("qworker"), "keys", str(tmp_path / "k"), "--name", "host1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "k" / "host1.key").exists() and (tmp_path / "k" / "host1.key_secret").stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("endpoint", ["ipc:///tmp/x.sock", "inproc://x", "tcp://127.0.0.1:5", "tcp://127.1.2.3:5", "tcp://localhost:5",
                                      "tcp://[::1]:5"])
def test_local_endpoints_are_loopback(endpoint):
    assert is_loopback(endpoint)


@pytest.mark.parametrize("endpoint", ["tipc://{5560,0,0}", "pgm://eth0;239.192.1.1:5555", "epgm://eth0;239.192.1.1:5555",
                                      "vmci://1:5555", "udp://10.0.0.1:5555", "ws://127.0.0.1:5", "tcp://127.example.com:5",
                                      "tcp://eth0:5", "tcp://0.0.0.0:5", "tcp://*:5"])
def test_every_other_scheme_or_host_needs_curve_or_insecure(endpoint):
    assert not is_loopback(endpoint)
    with pytest.raises(ConfigError, match="refusing to bind"):
        check_bind(endpoint, None, insecure=False)
