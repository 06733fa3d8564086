"""Options: one definition per option gives defaults, YAML checks, flags and the child's argv."""

import argparse
import dataclasses

import pytest

from qworker import ConfigError, PoolOptions, ProducerOptions
from qworker.config.options import DEFAULT_MAX_MESSAGE_BYTES, WorkerOptions


def test_defaults_are_written_once_and_shared():
    assert PoolOptions().task_timeout_s == ProducerOptions().task_timeout_s == WorkerOptions().task_timeout_s == 60.0
    assert PoolOptions().max_message_bytes == ProducerOptions().max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES
    assert PoolOptions().max_hold == WorkerOptions().max_hold == 512


def test_options_are_frozen_and_keyword_only():
    with pytest.raises(TypeError):
        PoolOptions("tcp://x")  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        PoolOptions().workers = 3  # type: ignore[misc]


def test_later_layers_win_and_none_means_default():
    opts = PoolOptions.from_mapping({"workers": 2, "heartbeat_s": 2}, {"workers": 4, "max_rss_mb": None})
    assert (opts.workers, opts.heartbeat_s, opts.max_rss_mb) == (4, 2.0, None)
    assert isinstance(opts.heartbeat_s, float)


@pytest.mark.parametrize(
    "section, match",
    [
        ({"wrokers": 2}, "unknown key 'wrokers'"),
        ({"workers": "two"}, "workers: expected int, got str"),
        ({"workers": True}, "expected int, got bool"),
        ({"heartbeat_s": -1}, "must not be negative"),
        ({"reward_modules": [1]}, "expected a list of strings"),
        ({"parent_pid": 3}, "unknown key 'parent_pid'"),  # internal: not settable from YAML
    ],
)
def test_bad_sections_name_the_key(section, match):
    with pytest.raises(ConfigError, match=match):
        PoolOptions.check_mapping(section, "f.yaml: pool")


def test_negative_is_allowed_only_where_it_makes_sense():
    assert ProducerOptions.from_mapping({"fallback_score": -1}).fallback_score == -1.0


@pytest.mark.parametrize("cls", [PoolOptions, WorkerOptions, ProducerOptions])
def test_argv_round_trips(cls):
    changed = {}
    for f in dataclasses.fields(cls):
        tp = type(f.default) if f.default is not None else None
        if isinstance(f.default, bool):
            changed[f.name] = not f.default
        elif f.name in ("reward_modules",):
            changed[f.name] = ("a.b", "/x/y.py")
        elif tp is float or f.name in ("max_rss_mb", "cache_ttl_s"):
            changed[f.name] = 0.125
        elif tp is int or f.name in ("workers", "parent_pid", "local_workers", "metrics_port"):
            changed[f.name] = 7 + (f.metadata.get("minimum") or 0)  # above any least value the option takes
        elif f.name == "log_level":  # one of the levels the flag accepts
            changed[f.name] = "DEBUG"
        else:
            changed[f.name] = "s-" + f.name
    opts = cls(**changed)
    assert cls.from_argv(opts.to_argv(), prog="t") == opts
    assert cls.from_argv(cls().to_argv(), prog="t") == cls()


def test_a_pool_passes_its_options_to_each_worker():
    pool = PoolOptions(connect="tcp://127.0.0.1:9", reward_modules=("m",), task_timeout_s=5.0, io_threads=3, workers=2)
    w = pool.worker(worker_id="p/w0.1", pool_id="p", slot_path="/s", parent_pid=11)
    assert (w.connect, w.reward_modules, w.task_timeout_s, w.io_threads) == ("tcp://127.0.0.1:9", ("m",), 5.0, 3)
    assert (w.worker_id, w.pool_id, w.slot_path, w.parent_pid) == ("p/w0.1", "p", "/s", 11)
    assert WorkerOptions.from_argv(w.to_argv(), prog="w") == w


def test_pool_flags_come_from_the_options():
    ap = argparse.ArgumentParser()
    PoolOptions.add_arguments(ap)
    args = ap.parse_args(["--connect", "tcp://h:1", "--rewards", "a,b", "--reward-modules", "c", "--timeout", "9", "--id", "x"])
    opts = PoolOptions.from_args(args, {"workers": 3})
    assert (opts.connect, opts.reward_modules, opts.task_timeout_s, opts.pool_id, opts.workers) == ("tcp://h:1", ("a", "b", "c"), 9.0, "x", 3)
    helps = ap.format_help()
    assert "--max-rss-mb" in helps and "--parent-pid" not in helps  # internal flags are hidden


def test_producer_rejects_unknown_options():
    from qworker import Producer

    with pytest.raises(TypeError, match="local_wrokers"):
        Producer(local_wrokers=1)


