"""The launchers' contracts that need no Ray cluster: Ray stays unimported, and
``qworker ray-pools`` takes every pool flag from ``PoolOptions``."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import console_script


def test_importing_the_ray_launcher_does_not_import_ray():
    code = "import sys, qworker, qworker.launchers.ray; assert 'ray' not in sys.modules, 'ray was imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_ray_pools_offers_every_pool_flag_and_needs_an_endpoint():
    qworker = console_script("qworker")
    listed = subprocess.run([qworker, "--help"], capture_output=True, text=True, timeout=60)
    assert "ray-pools" in listed.stdout
    shown = subprocess.run([qworker, "ray-pools", "--help"], capture_output=True, text=True, timeout=60)
    pool_help = subprocess.run([console_script("qworker-pool"), "--help"], capture_output=True, text=True, timeout=60)
    flags = {word.strip(",[]") for word in pool_help.stdout.split() if word.startswith("--")}
    assert flags and all(flag in shown.stdout for flag in flags), flags - set(shown.stdout.split())
    assert "--workers-per-node" in shown.stdout and "--address" in shown.stdout
    missing = subprocess.run([qworker, "ray-pools", "--workers-per-node", "2"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no producer endpoint" in missing.stderr
