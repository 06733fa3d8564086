"""A flag given with a config file wins over the file, even when it equals the option's default (a real producer)."""

from __future__ import annotations

import argparse

from qworker import ProducerOptions


def test_a_flag_equal_to_its_default_still_wins_over_the_config_file(tmp_path):
    # qworker serve --config c.yaml --max-attempts 3, with max_attempts: 5 in the file (3 is the default)
    from qworker import Producer

    cfg = tmp_path / "c.yaml"
    cfg.write_text("producer:\n  max_attempts: 5\n")
    ap = argparse.ArgumentParser()
    ProducerOptions.add_arguments(ap)
    given = ProducerOptions.given(ap.parse_args(["--max-attempts", "3", "--workers", "0"]))
    with Producer(config=str(cfg), **given) as p:
        assert p.options.max_attempts == 3
