from __future__ import annotations

import pytest

from qworker._catalog import Catalog, Composite, Plain
from qworker._exceptions import ConfigError, RewardError

SECTION = {
    "math": {"format_bonus": 0.1},
    "math_strict": {"reward": "math", "params": {"strict": True}},
    "strict_alias": {"reward": "math_strict", "params": {"timeout_s": 2}},
    "shaped": {
        "on_error": "fallback",
        "components": [
            {"reward": "math_strict", "weight": 1.0, "on_error": "fail"},
            {"reward": "format", "weight": 0.1, "fallback": 0.0},
            {"name": "overlong", "reward": "length_penalty", "params": {"buffer_len": 64}},
        ],
    },
}


def test_defaults_aliases_and_submission_params_merge_in_order():
    c = Catalog(SECTION)
    assert c.resolve("math") == Plain("math", {"format_bonus": 0.1})
    assert c.resolve("math", {"format_bonus": 0.5}) == Plain("math", {"format_bonus": 0.5})
    assert c.resolve("strict_alias", {"x": 1}) == Plain("math", {"format_bonus": 0.1, "strict": True, "timeout_s": 2, "x": 1})
    assert c.resolve("gsm8k", {"a": 1}) == Plain("gsm8k", {"a": 1})  # not in the catalog: as given
    assert "shaped" in c and c.names() == ["math", "math_strict", "shaped", "strict_alias"]


def test_composite_components():
    comp = Catalog(SECTION).resolve("shaped")
    assert isinstance(comp, Composite)
    assert [(x.name, x.task, x.weight, x.on_error, x.fallback) for x in comp.components] == [
        ("math_strict", Plain("math", {"format_bonus": 0.1, "strict": True}), 1.0, "fail", 0.0),
        ("format", Plain("format", {}), 0.1, "fallback", 0.0),
        ("overlong", Plain("length_penalty", {"buffer_len": 64}), 1.0, "fallback", 0.0),
    ]


def test_params_for_a_composite_at_submission_are_refused():
    with pytest.raises(RewardError, match="composite"):
        Catalog(SECTION).resolve("shaped", {"weight": 2})


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ({"a": {"reward": "b"}, "b": {"reward": "a"}}, "aliases loop: a -> b -> a"),
        ({"a": {"reward": "m", "parms": {}}}, r"rewards\.a: unknown key\(s\) \['parms'\]"),
        ({"a": {"reward": 3}}, r"rewards\.a\.reward"),
        ({"a": {"components": []}}, "non-empty list"),
        ({"a": {"components": [{"reward": "m", "weight": "heavy"}]}}, r"components\[0\]\.weight: expected a number"),
        ({"a": {"components": [{"reward": "m"}, {"reward": "m"}]}}, "unique"),
        ({"a": {"components": [{"reward": "m", "on_error": "ignore"}]}}, "on_error"),
        ({"a": {"components": [{"reward": "m", "on_error": "fallback"}]}}, "needs a 'fallback'"),
        ({"a": {"components": [{"reward": "m", "wieght": 1}]}}, r"unknown key\(s\) \['wieght'\]"),
        ({"a": {"components": [{"reward": "b"}]}, "b": {"components": [{"reward": "m"}]}}, "composite cannot be used inside"),
        ({"a": {"components": [{"reward": "m"}], "weights": 1}}, "unknown key"),
        ({"a": 5}, r"rewards\.a: expected a mapping"),
    ],
)
def test_config_errors_name_the_place(section, match):
    with pytest.raises(ConfigError, match=match):
        Catalog(section, "cfg.yaml")
