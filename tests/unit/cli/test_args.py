"""The command-line conventions every qworker command shares (``qworker.cli.args``) and the flags generated from options."""

import argparse

import pytest

from qworker import PoolOptions, ProducerOptions
from qworker.cli.args import Parser, bool_flag, hidden_alias
from qworker.cli.main import _parser
from qworker.cli.serve import _parser as serve_parser


def test_booleans_are_flags_with_a_negative_form():
    ap = serve_parser("qworker serve")
    assert ProducerOptions.given(ap.parse_args(["--insecure"]))["insecure"] is True
    assert ProducerOptions.given(ap.parse_args(["--no-insecure"]))["insecure"] is False
    assert "insecure" not in ProducerOptions.given(ap.parse_args([]))  # not given: the config decides
    assert ProducerOptions.given(ap.parse_args(["--no-cache-read"]))["cache_read"] is False


def test_a_boolean_option_reaches_a_child_as_a_flag():
    opts = PoolOptions(connect="tcp://10.0.0.1:5555", insecure=True)
    argv = opts.to_argv()
    assert "--insecure" in argv and "1" not in argv
    assert PoolOptions.from_argv(argv, "w").insecure is True


@pytest.mark.parametrize("command", [["score", "x", "--reward", "r", "--out", "o"], ["status"]])
def test_every_command_that_connects_or_binds_takes_curve_and_insecure(command):
    args = _parser().parse_args([*command, "--insecure", "--curve-secret-key", "k"])
    assert args.insecure is True and args.curve_secret_key == "k"
    pool = argparse.ArgumentParser()
    PoolOptions.add_arguments(pool)
    given = PoolOptions.given(pool.parse_args(["--insecure", "--curve-secret-key", "a", "--curve-server-key", "b"]))
    assert given == {"insecure": True, "curve_secret_key": "a", "curve_server_key": "b"}


def test_old_spellings_still_work_and_are_hidden():
    ap = serve_parser("qworker serve")
    old = ProducerOptions.given(ap.parse_args(["--cache-path", "c.db", "--cache-ttl-s", "5", "--ready-timeout-s", "9", "--rewards", "m"]))
    new = ProducerOptions.given(ap.parse_args(["--cache", "c.db", "--cache-ttl", "5", "--ready-timeout", "9", "--reward-modules", "m"]))
    assert old == new == {"cache_path": "c.db", "cache_ttl_s": 5.0, "ready_timeout_s": 9.0, "reward_modules": ("m",)}
    text = ap.format_help()
    assert "--cache-path" not in text and "--cache-ttl-s" not in text and "--ready-timeout-s" not in text
    main = _parser()
    assert main.parse_args(["score", "x", "--reward", "r", "--out", "o", "--rewards", "m"]).rewards == ["m"]
    assert main.parse_args(["status", "--timeout", "7"]).wait == 7.0


def test_usage_errors_are_one_line(capsys):
    ap = Parser(prog="p")
    ap.add_argument("--n", type=int, required=True)
    with pytest.raises(SystemExit) as exc:
        ap.parse_args(["--n", "x"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("p: error: argument --n: invalid int value") and "see p --help" in err


def test_help_shows_defaults():
    ap = Parser(prog="p")
    ap.add_argument("--wait", type=float, default=3.0, help="seconds")
    bool_flag(ap, "json", help="raw JSON")
    hidden_alias(ap, "--timeout", dest="wait", type=float)
    text = ap.format_help()
    assert "seconds (default: 3.0)" in text and "--json, --no-json" in text and "--timeout" not in text
    assert "(default: 60.0)" in serve_parser("qworker serve").format_help()  # generated options too
