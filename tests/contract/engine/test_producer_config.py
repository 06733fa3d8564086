"""A Producer takes its configuration as a mapping, and refuses a misspelt key."""

from __future__ import annotations

import pytest

from qworker import ConfigError, Producer


def test_producer_takes_a_config_dict():
    with Producer(config={"producer": {"local_workers": 1, "fallback_score": -1.0}}) as p:
        [r] = p.map("no_such_module_z:fn", [{}])
    assert r.error and r.score == -1.0
    with pytest.raises(ConfigError):
        Producer(config={"producer": {"local_wrokers": 1}})
