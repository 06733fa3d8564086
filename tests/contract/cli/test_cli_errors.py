"""Every entry point turns expected failures into one line naming the fix, with a documented exit code
(2 refused at start, 1 failed while running, 130 Ctrl-C): real processes, as a user runs them."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO, console_script


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def run(args: list[str], *, without: str | None = None, tmp=None, timeout: float = 120, stdin: bytes | None = None, cwd=None):
    """Run a console script; ``without``: a module made unimportable, as if its extra were not installed."""
    env = dict(os.environ)
    if without is not None:
        blocker = tmp / f"no-{without}"
        (blocker / without).mkdir(parents=True, exist_ok=True)
        (blocker / without / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{without}'\", name='{without}')\n")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(blocker), env.get("PYTHONPATH")) if p)
    res = subprocess.run([console_script(args[0]), *args[1:]], capture_output=True, timeout=timeout, env=env, input=stdin, cwd=cwd)
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
        line = one_line(err)  # the HTTP port answers no 'qworker status': the message must not suggest it
        assert rc == 2 and f"HTTP port {http} on 127.0.0.1 is already in use" in line and "qworker status" not in line


def test_an_address_of_another_host_is_refused_before_any_worker_starts():
    endpoint = f"tcp://192.0.2.1:{free_port()}"  # TEST-NET-1 (RFC 5737): an address no host of ours has
    rc, _, err = run(["qworker", "serve", "--listen", endpoint, "--insecure", "--workers", "1"])
    assert rc == 2 and f"cannot bind {endpoint}: " in one_line(err) and "no interface of this host has that address" in err


@pytest.mark.parametrize("where", ["--listen", "--bind"])
def test_serving_every_interface_without_curve_is_refused_before_any_worker_starts(where):
    endpoint = f"tcp://0.0.0.0:{free_port()}"
    other = {"--listen": "--bind", "--bind": "--listen"}[where]
    rc, _, err = run(["qworker", "serve", where, endpoint, other, f"tcp://127.0.0.1:{free_port()}", "--workers", "1"])
    assert rc == 2 and f"refusing to bind {endpoint} without authentication" in one_line(err) and "started" not in err


def test_score_binding_a_busy_port_for_pools_is_one_line(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "#### 1", "ground_truth": "1"}\n')
    port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        rc, _, err = run(["qworker", "score", str(src), "--reward", "gsm8k", "--bind", f"tcp://127.0.0.1:{port}", "--workers", "1",
                          "--out", str(tmp_path / "o.jsonl")])
    assert rc == 2 and f"cannot bind tcp://127.0.0.1:{port}: Address already in use" in one_line(err) and "pick another port" in err


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
    assert "--port PORT" in out and "(default: 18600)" in out  # not the quick start's --http 8000


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


# -- bounded waits, checks before any worker starts, help that shows every default ------------------------
def test_score_with_no_workers_and_no_bind_fails_at_once_in_one_line(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "#### 1", "ground_truth": "1"}\n')
    rc, _, err = run(["qworker", "score", str(src), "--reward", "gsm8k", "--out", str(tmp_path / "o.jsonl"), "--workers", "0"],
                     timeout=60)
    assert rc == 2 and "--workers 0" in one_line(err) and "--bind" in err
    assert not (tmp_path / "o.jsonl").exists()
    # a reward module the command's own process cannot import (its warnings) does not come first
    (tmp_path / "proj" / "mine").mkdir(parents=True)
    (tmp_path / "proj" / "mine" / "__init__.py").write_text("from qworker import reward\n\n@reward('mine')\ndef mine(p):\n    return 1.0\n")
    rc, _, err = run(["qworker", "score", str(src), "--reward", "mine", "--reward-modules", "mine", "--out", str(tmp_path / "o.jsonl"),
                      "--workers", "0"], timeout=60, cwd=tmp_path / "proj")
    assert rc == 2 and "--workers 0" in one_line(err)


def test_score_bind_with_no_pool_says_what_it_waits_for_and_gives_up_after_its_pool_timeout(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "#### 1", "ground_truth": "1"}\n')
    port = free_port()
    rc, _, err = run(["qworker", "score", str(src), "--reward", "gsm8k", "--out", str(tmp_path / "o.jsonl"),
                      "--bind", f"tcp://127.0.0.1:{port}", "--pool-timeout", "1"], timeout=60)
    waiting, gave_up = err.strip().splitlines()
    assert rc == 1 and "Traceback" not in err
    assert f"waiting up to 1 s (--pool-timeout) for a pool on tcp://127.0.0.1:{port}" in waiting
    assert f"qworker-pool --connect tcp://127.0.0.1:{port}" in waiting
    assert f"no pool connected to tcp://127.0.0.1:{port} within 1 s" in gave_up
    _, out, _ = run(["qworker", "score", "--help"])
    assert "--pool-timeout S" in out and "(default: 300.0)" in " ".join(out.split())


def test_score_bind_scores_once_a_pool_arrives(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "#### 1", "ground_truth": "1"}\n{"response": "#### 2", "ground_truth": "1"}\n')
    port = free_port()
    score = subprocess.Popen([console_script("qworker"), "score", str(src), "--reward", "gsm8k", "--out", str(tmp_path / "o.jsonl"),
                              "--bind", f"tcp://127.0.0.1:{port}", "--pool-timeout", "120", "--no-cache"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert "waiting up to 120 s" in score.stderr.readline()  # it says so before any pool comes
    pool = subprocess.Popen([console_script("qworker-pool"), "--connect", f"tcp://127.0.0.1:{port}", "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert score.wait(120) == 0, score.stderr.read()
    finally:
        pool.terminate()
        pool.wait(60)
        if score.poll() is None:
            score.kill()
    assert [json.loads(line)["score"] for line in (tmp_path / "o.jsonl").read_text().splitlines()] == [1.0, 0.0]


@pytest.mark.parametrize("command", [
    ["qworker", "score", "x", "--reward", "gsm8k", "--out", "y", "--timeout", "0"],
    ["qworker", "score", "x", "--reward", "gsm8k", "--out", "y", "--timeout", "-5"],
    ["qworker", "serve", "--timeout", "0"],
    ["qworker", "serve", "--ready-timeout", "-1"],
    ["qworker", "status", "--wait", "0"],
    ["qworker-pool", "--connect", "tcp://127.0.0.1:1", "--heartbeat", "0"],
])
def test_a_duration_that_is_not_above_0_is_refused_in_one_line(command):
    rc, _, err = run(command, timeout=60)
    assert rc == 2 and "must be above 0 seconds" in one_line(err)


def test_a_pool_of_no_workers_is_refused_in_one_line_not_given_the_cpu_count():
    rc, _, err = run(["qworker-pool", "--connect", "tcp://127.0.0.1:1", "--workers", "0"], timeout=60)
    assert rc == 2 and "workers: must be at least 1, got 0" in one_line(err), err


def test_a_producer_refuses_a_zero_task_timeout():
    from qworker import ProducerOptions
    from qworker._exceptions import ConfigError

    with pytest.raises(ConfigError, match="task_timeout_s: must be above 0 seconds"):
        ProducerOptions.from_mapping({"task_timeout_s": 0})


@pytest.mark.parametrize("command", [
    ["qworker", "serve", "--max-message-bytes", "0"],
    ["qworker-pool", "--connect", "tcp://127.0.0.1:1", "--max-message-bytes", "0"],
])
def test_a_frame_limit_that_is_not_above_0_is_refused_in_one_line_before_anything_starts(command):
    rc, _, err = run(command, timeout=60)  # it waited 60 s for workers that could receive nothing, then blamed them
    assert rc == 2 and "max_message_bytes: must be at least 65,536, got 0" in one_line(err), err


def test_a_frame_limit_too_small_for_a_workers_hello_is_refused_in_one_line():
    rc, _, err = run(["qworker", "serve", "--max-message-bytes", "50"], timeout=60)  # a worker's Ready is ~100+ bytes
    assert rc == 2 and "max_message_bytes: must be at least 65,536, got 50" in one_line(err), err


def test_a_producer_refuses_a_frame_limit_of_zero():
    from qworker import ProducerOptions
    from qworker._exceptions import ConfigError

    with pytest.raises(ConfigError, match="max_message_bytes: must be at least 65,536, got 0"):
        ProducerOptions.from_mapping({"max_message_bytes": 0})


@pytest.mark.parametrize("verb", ["score", "serve"])
def test_a_reward_module_that_does_not_import_stops_before_any_worker_starts(tmp_path, verb):
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "#### 1", "ground_truth": "1"}\n')
    args = ([str(src), "--reward", "gsm8k", "--out", str(tmp_path / "o.jsonl")] if verb == "score"
            else ["--listen", f"tcp://127.0.0.1:{free_port()}"])
    rc, _, err = run(["qworker", verb, *args, "--reward-modules", "myrewardz.contains", "--workers", "1", "--log-level", "INFO"],
                     timeout=60)
    line = one_line(err)  # INFO would show a pool starting: nothing started
    assert rc == 2 and "cannot import reward module 'myrewardz.contains'" in line and "--reward-modules" in line


def test_cache_clear_of_a_reward_with_no_rows_and_no_such_name_suggests_the_closest(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"response": "#### 1", "ground_truth": "1"}\n')
    cache = str(tmp_path / "c.sqlite")
    assert run(["qworker", "score", str(src), "--reward", "gsm8k", "--out", str(tmp_path / "o.jsonl"), "--workers", "1",
                "--cache", cache])[0] == 0
    rc, _, err = run(["qworker", "cache", "clear", "--reward", "gsm8kk", "--cache", cache])
    assert rc == 2 and "matches no rows and no known reward (did you mean 'gsm8k'?)" in one_line(err)
    rc, _, err = run(["qworker", "cache", "stats", "--reward", "gsm8kk", "--cache", cache])
    assert rc == 2 and "did you mean 'gsm8k'?" in one_line(err)
    rc, out, _ = run(["qworker", "cache", "clear", "--reward", "math", "--cache", cache])  # known, no rows: nothing to do
    assert rc == 0 and "deleted 0 rows of reward 'math'" in out
    rc, out, _ = run(["qworker", "cache", "clear", "--reward", "gsm8k", "--cache", cache])
    assert rc == 0 and "deleted 1 rows of reward 'gsm8k'" in out


def _options_without_a_default(help_text: str) -> list[str]:
    """The options of a --help, but required ones, whose text says no default."""
    usage = help_text.split("\n\n", 1)[0]
    required = {m for m in re.findall(r"(?<![\[\w-])(--[a-z][\w-]*)", usage)}  # not in [brackets]: required
    body = help_text.split("options:", 1)[1]
    entries = re.split(r"\n  (?=-)", "\n" + body)
    return [e.split()[0] for e in entries if e.strip().startswith("--") and "default" not in e and not e.startswith("-h")
            and not e.strip().startswith(("--help", "--version")) and e.split()[0] not in required]


@pytest.mark.parametrize("command", [
    ["qworker", "serve"], ["qworker", "score"], ["qworker-pool"], ["qworker", "ray-pools"], ["qworker", "mock-judge"],
    ["qworker", "status"], ["qworker", "cache"], ["qworker", "keys"],
])
def test_help_shows_every_options_default(command):
    rc, out, _ = run([*command, "--help"], timeout=60)
    assert rc == 0 and _options_without_a_default(out) == []
    assert out.count("(default: auto)") <= 1


def test_serve_first_worker_timeout_refuses_clients_and_keeps_its_older_spelling():
    from qworker import Client
    from qworker._exceptions import ServiceUnavailable

    _, out, _ = run(["qworker", "serve", "--help"])
    assert "--first-worker-timeout S" in out and "--no-workers-grace" not in out
    for flag in ("--first-worker-timeout", "--no-workers-grace"):
        port = free_port()
        proc = subprocess.Popen([console_script("qworker"), "serve", "--listen", f"tcp://127.0.0.1:{port}", "--workers", "0",
                                 flag, "0"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stderr.readline()
            while "clients on" not in line:
                assert proc.poll() is None and line, line + proc.stderr.read()
                line = proc.stderr.readline()
            with Client(f"tcp://127.0.0.1:{port}") as client:
                with pytest.raises(ServiceUnavailable, match="no workers"):
                    client.submit_batch("gsm8k", [{"response": "#### 1", "ground_truth": "1"}])
        finally:
            proc.terminate()
            proc.wait(60)


@pytest.mark.parametrize("flag", [["--capacity", "0"], ["--latency", "-1"], ["--p-error", "1.5"], ["--tokens-mean", "0"]])
def test_mock_judge_refuses_numbers_out_of_range(flag):
    rc, _, err = run(["qworker", "mock-judge", "--port", "0", *flag], timeout=60)
    assert rc == 2 and f"{flag[0]} must be" in one_line(err)


def test_serve_http_refuses_at_start_a_length_penalty_that_http_requests_cannot_measure():
    rc, _, err = run(["qworker", "serve", "--listen", f"tcp://127.0.0.1:{free_port()}", "--workers", "1", "--config",
                      str(REPO / "configs" / "rewards.yaml"), "--http", str(free_port()), "--reward", "math_shaped"], timeout=60)
    line = one_line(err)  # before any worker starts
    assert rc == 2 and "component 'overlong' of 'math_shaped' is length_penalty with no max_len" in line
    assert "math_shaped_chars" in line


@pytest.mark.parametrize("args, named", [
    (["qworker-pool", "--connect", "127.0.0.1:5557"], "--connect / pool.connect '127.0.0.1:5557'"),
    (["qworker", "serve", "--listen", "127.0.0.1:5557", "--workers", "1"], "--listen '127.0.0.1:5557'"),
    (["qworker", "status", "--connect", "127.0.0.1:5557"], "--connect '127.0.0.1:5557'"),
])
def test_an_endpoint_without_its_scheme_is_refused_in_one_line_before_anything_starts(args, named):
    rc, _, err = run(args, timeout=60)
    line = one_line(err)
    assert rc == 2 and named in line and "write tcp://127.0.0.1:5557" in line and "started" not in err


def test_an_http_port_out_of_range_is_a_usage_error():
    rc, _, err = run(["qworker", "serve", "--http", "80000", "--reward", "math", "--workers", "1"], timeout=60)
    assert rc == 2 and "port 80000 is out of range (0-65535)" in one_line(err)


def test_copying_the_configs_into_a_folder_that_cannot_be_made_says_so(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    rc, out, err = run(["qworker", "configs", "--copy", str(blocker / "sub")], timeout=60)
    assert rc == 1 and f"cannot copy into {blocker / 'sub'}" in one_line(err) and out == ""
