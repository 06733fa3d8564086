"""What ``submit_batch`` and ``gather`` take, checked where it enters (``qworker.engine.arguments``, ``gather``)."""

from __future__ import annotations

import pytest

from qworker import ConfigError
from qworker.engine.arguments import check_payloads, check_timeout_s
from qworker.engine.result import Result, ResultFuture, gather


class _Frame:
    """Shaped as a data frame is: iterating it gives its column names."""

    columns = ["prompt", "response"]

    def to_dict(self, orient: str) -> list:
        return []

    def __iter__(self):
        return iter(self.columns)


def test_a_data_frame_of_payloads_is_refused_naming_what_to_pass():
    with pytest.raises(TypeError, match=r"to_dict\('records'\)"):
        check_payloads(_Frame())


def test_a_timeout_past_a_floats_range_is_a_config_error():
    with pytest.raises(ConfigError, match="finite number of seconds"):
        check_timeout_s(10**400)
    assert check_timeout_s(30) == 30.0


def test_gather_takes_futures_from_any_iterable():
    futures = [ResultFuture() for _ in range(3)]
    for k, f in enumerate(futures):
        f.set_result(Result(score=float(k)))
    assert [r.score for r in gather(f for f in futures)] == [0.0, 1.0, 2.0]


class _PolarsFrame(_Frame):
    """Shaped as a polars frame is: its rows come from to_dicts()."""

    def to_dicts(self) -> list:
        return []


def test_a_polars_shaped_frame_is_told_to_dicts():
    with pytest.raises(TypeError, match=r"to_dicts\(\)"):
        check_payloads(_PolarsFrame())


def test_gather_refuses_futures_in_no_order():
    futures = [ResultFuture() for _ in range(2)]
    for f in futures:
        f.set_result(Result(score=1.0))
    for unordered in (set(futures), dict.fromkeys(futures)):
        with pytest.raises(TypeError, match="in the order of its futures"):
            gather(unordered)
