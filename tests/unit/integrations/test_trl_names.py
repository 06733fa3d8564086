"""The names a ``QworkerReward`` logs under in TRL: no module path, colon or doubled prefix."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from qworker.integrations.trl import QworkerReward, default_name, log_names  # noqa: E402


def test_metric_names_hold_the_rewards_own_name_once():
    assert default_name("math") == "qworker_math"
    assert default_name("tests.qworker_trl_rewards:has_digit") == "qworker_has_digit"  # rewards/qworker_has_digit/mean
    assert log_names("qworker_math") == ("qworker/math/failed", "qworker_error/math")
    assert log_names("my_judge") == ("qworker/my_judge/failed", "qworker_error/my_judge")  # a name= of the user's own
    assert QworkerReward("pkg.mod:has_digit", client=object()).__name__ == "qworker_has_digit"  # type: ignore[arg-type]
