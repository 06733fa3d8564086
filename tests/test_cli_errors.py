"""Every entry point turns expected failures into one line naming the fix, with a documented exit code
(2 refused at start, 1 failed while running, 130 Ctrl-C): real processes, as a user runs them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO, console_script


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def run(args: list[str], *, without: str | None = None, tmp=None, timeout: float = 120, stdin: bytes | None = None):
    """Run a console script; ``without``: a module made unimportable, as if its extra were not installed."""
    env = dict(os.environ)
    if without is not None:
        blocker = tmp / f"no-{without}"
        (blocker / without).mkdir(parents=True, exist_ok=True)
        (blocker / without / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{without}'\", name='{without}')\n")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(blocker), env.get("PYTHONPATH")) if p)
    res = subprocess.run([console_script(args[0]), *args[1:]], capture_output=True, timeout=timeout, env=env, input=stdin)
    return res.returncode, res.stdout.decode(), res.stderr.decode()


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_non_utf8_input_to_score_names_the_line(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"response": "#### 1", "ground_truth": "1"}\n{"response": "\xff\xfe"}\n')
    rc, _, err = run(["qworker", "score", str(src), "--reward", "gsm8k", "--out", str(tmp_path / "o.jsonl")])
    assert rc == 2 and f"{src}:2: not UTF-8 (byte 0xff at column 15)" in one_line(err) and "--skip-bad-lines" in err


def test_a_second_serve_on_a_busy_port_fails_before_starting_workers():
    port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        rc, _, err = run(["qworker", "serve", "--listen", f"tcp://127.0.0.1:{port}", "--workers", "1"])
        assert rc == 2 and "already in use" in one_line(err) and "started" not in err
        http = busy.getsockname()[1]
        rc, _, err = run(["qworker", "serve", "--listen", f"tcp://127.0.0.1:{free_port()}", "--workers", "1", "--http", str(http),
                          "--reward", "gsm8k"])
        assert rc == 2 and f"tcp://127.0.0.1:{http} is already in use" in one_line(err)


def test_metrics_port_without_prometheus_client_names_the_extra(tmp_path):
    rc, _, err = run(["qworker", "serve", "--listen", f"tcp://127.0.0.1:{free_port()}", "--workers", "1", "--metrics-port",
                      str(free_port())], without="prometheus_client", tmp=tmp_path)
    assert rc == 2 and "pip install 'qworker-rl[metrics]'" in one_line(err)


@pytest.mark.parametrize("command", [
    ["qworker", "score", "x", "--reward", "gsm8k", "--out", "y"], ["qworker", "serve"], ["qworker", "status"],
    ["qworker-pool", "--connect", "tcp://127.0.0.1:1"], ["qworker", "cache", "stats"],
])
def test_a_bad_log_level_is_one_line(command):
    rc, _, err = run([*command, "--log-level", "foo"])
    assert rc == 2 and "invalid choice: 'FOO'" in one_line(err) and "DEBUG" in err


def test_ray_pools_without_ray_is_one_line(tmp_path):
    rc, _, err = run(["qworker", "ray-pools", "--connect", "tcp://127.0.0.1:1"], without="ray", tmp=tmp_path)
    assert rc == 2 and "pip install 'qworker-rl[ray]'" in one_line(err)


def test_qworker_train_without_torch_names_the_train_extra(tmp_path):
    rc, _, err = run(["qworker-train", "--config", str(REPO / "configs" / "grpo-toy.yaml")], without="torch", tmp=tmp_path)
    assert rc == 2 and "pip install 'qworker-rl[train]'" in one_line(err)


def test_serve_stops_at_start_on_an_unknown_reward():
    rc, _, err = run(["qworker", "serve", "--listen", f"tcp://127.0.0.1:{free_port()}", "--workers", "1", "--http", "0",
                      "--reward", "mth"])
    line = one_line(err)  # before any worker starts: no pool log lines either
    assert rc == 2 and "'mth' is not a known reward; known rewards: " in line and "gsm8k" in line and "did you mean 'math'" in line


def test_serve_http_without_a_reward_is_one_line():
    rc, _, err = run(["qworker", "serve", "--http", "8000"])
    assert rc == 2 and one_line(err) == ("qworker serve: error: --http needs --reward NAME: the reward HTTP requests are scored "
                                         "with (see qworker serve --help)")


def test_version_and_help_show_every_default():
    from qworker import __version__

    rc, out, _ = run(["qworker", "--version"])
    assert rc == 0 and out.strip() == f"qworker {__version__}"
    _, out, _ = run(["qworker", "--help"])
    listed = [line.split()[0] for line in out.split("COMMAND\n", 2)[-1].split("options:")[0].splitlines()
              if line.startswith("    ") and not line.startswith("      ")]
    assert listed == sorted(listed) and {"score", "serve", "status", "keys", "examples", "configs"} <= set(listed)
    _, out, _ = run(["qworker", "status", "--help"])
    out = " ".join(out.split())
    assert "--wait WAIT" in out and "(default: 3.0)" in out and "--log-level LEVEL" in out and "(default: WARNING)" in out
    _, out, _ = run(["qworker", "mock-judge", "--help"])
    out = " ".join(out.split())
    assert "--port PORT" in out and "(default: 8000)" in out


def test_keys_refuse_to_overwrite_without_force(tmp_path):
    rc, _, _ = run(["qworker", "keys", str(tmp_path), "--name", "producer"])
    old = (tmp_path / "producer.key").read_text()
    assert rc == 0
    rc, _, err = run(["qworker", "keys", str(tmp_path), "--name", "producer"])
    assert rc == 2 and "exists" in one_line(err) and "--force" in err
    assert (tmp_path / "producer.key").read_text() == old
    rc, _, _ = run(["qworker", "keys", str(tmp_path), "--name", "producer", "--force"])
    assert rc == 0 and (tmp_path / "producer.key").read_text() != old


def test_pool_rejects_half_a_curve_setting_in_one_line():
    rc, _, err = run(["qworker-pool", "--connect", "tcp://127.0.0.1:1", "--curve-secret-key", "x.key_secret"])
    assert rc == 2 and "CURVE needs both" in one_line(err)


def test_exit_codes_are_documented():
    _, out, _ = run(["qworker", "--help"])
    assert "1 failed while running, 2 refused at start" in " ".join(out.split()) and "130 Ctrl-C" in out
    assert sys.executable  # the console scripts run with this interpreter's environment


def test_the_slurm_script_exits_2_with_one_line_without_an_endpoint():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QWORKER_CONNECT", "SLURM"))}
    res = subprocess.run(["bash", str(REPO / "bin" / "qworker-pool.slurm")], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "give the producer endpoint" in one_line(res.stderr)


def test_mock_judge_on_a_busy_port_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        rc, _, err = run(["qworker", "mock-judge", "--port", str(busy.getsockname()[1])])
    assert rc == 2 and "pick another --port" in one_line(err)
