from __future__ import annotations

import pytest

from qworker._exceptions import ConfigError, RewardError
from qworker.registry.catalog import Catalog, Composite, Plain
from qworker.registry.fingerprint import CODE_MARK

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
    assert c.resolve("strict_alias", {"tail_chars": 9}) == Plain(
        "math", {"format_bonus": 0.1, "strict": True, "timeout_s": 2, "tail_chars": 9}
    )
    assert c.resolve("gsm8k", {"score": 2}) == Plain("gsm8k", {"score": 2})  # not in the catalog: as given
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


@pytest.mark.parametrize(
    ("section", "match"),
    [  # common config mistakes, each one error at start naming its place
        ({"math": {"format_bonu": 0.1}}, r"cfg\.yaml: rewards\.math: unknown param 'format_bonu' for reward 'math'; it takes: .*format_bonus"),
        ({"s": {"componets": [{"reward": "math"}]}}, r"rewards\.s: 's' is not a known reward.*'componets' -> 'components'"),
        ({"mth": {"strict": True}}, r"rewards\.mth: 'mth' is not a known reward.*did you mean 'math'.*known rewards: .*gsm8k"),
        ({"a": {"reward": "gsm8", "params": {}}}, r"rewards\.a\.reward: 'gsm8' is not a known reward.*did you mean 'gsm8k'"),
        ({"a": {"reward": "gsm8k", "params": {"scor": 1}}}, r"rewards\.a: unknown param 'scor' for reward 'gsm8k'"),
        ({"s": {"components": [{"reward": "format"}, {"reward": "mth"}]}},
         r"rewards\.s\.components\[1\]\.reward: 'mth' is not a known reward.*\(did you mean 'math'\?\)"),
        ({"s": {"components": [{"reward": "format", "params": {"patern": "x"}}]}}, r"components\[0\]: unknown param 'patern'"),
    ],
)
def test_names_and_params_are_checked_against_the_rewards(section, match):
    with pytest.raises(ConfigError, match=match):
        Catalog(section, "cfg.yaml")


def test_an_unknown_reward_near_no_known_one_says_where_rewards_come_from():
    with pytest.raises(ConfigError) as info:
        Catalog({"a": {"reward": "my_len", "params": {}}}, "cfg.yaml")
    assert "'my_len' is not a known reward; known rewards: " in str(info.value)
    assert "named in reward_modules (--reward-modules)" in str(info.value) and "(--config)" in str(info.value)
    with pytest.raises(RewardError) as asked:
        Catalog({}, "cfg.yaml").resolve("math_shaped_by_hand")
    assert "'math_shaped_by_hand' is not a known reward" in str(asked.value) and "(--config)" in str(asked.value)


def test_what_cannot_be_known_here_is_let_through_with_a_warning(caplog):
    # a module:function name that does not import here, and unknown names when remote pools may join
    Catalog({"elsewhere.mod:fn": {"alpha": 1}})
    Catalog({"remote_only": {"alpha": 1}, "s": {"components": [{"reward": "remote_only"}]}}, remote=True)
    assert "'remote_only' is not known in this process" in caplog.text
    # but a known reward's params are still checked
    with pytest.raises(ConfigError, match="unknown param 'alpha'"):
        Catalog({"math": {"alpha": 1}}, remote=True)


def test_params_at_submission_are_checked():
    c = Catalog({"math_strict": {"reward": "math", "params": {"strict": True}}})
    with pytest.raises(ConfigError, match=r"params for reward 'math_strict': unknown param 'strikt' for reward 'math'"):
        c.resolve("math_strict", {"strikt": False})
    with pytest.raises(ConfigError, match="unknown params 'a', 'b' for reward 'gsm8k'; it takes: format_score, score"):
        c.resolve("gsm8k", {"a": 1, "b": 2})
    with pytest.raises(RewardError, match="'no_such_reward' is not a known reward"):  # no worker can have it
        c.resolve("no_such_reward", {"a": 1})
    remote = Catalog(remote=True)  # a remote pool may bring it: the workers say
    assert remote.resolve("no_such_reward", {"a": 1}) == Plain("no_such_reward", {"a": 1})
    assert c.resolve("llm_judge", {"modle": "m"}).params == {"modle": "m"}  # the judge's gate checks its own


def test_kwargs_rewards_accept_anything_and_required_params_are_needed():
    from qworker import reward

    @reward("t_cat_kwargs")
    def takes_anything(payload, **params):
        return 1.0

    @reward("t_cat_required", version="4")
    def needs_k(payload, *, k, j=1):
        return 1.0

    c = Catalog({"t_cat_kwargs": {"whatever": 1}, "t_cat_required": {"j": 2}})  # k may still come at submission
    assert c.resolve("t_cat_kwargs", {"x": 1}).params == {"whatever": 1, "x": 1}
    with pytest.raises(ConfigError, match="reward 't_cat_required' needs param 'k'"):
        c.resolve("t_cat_required")
    assert c.resolve("t_cat_required", {"k": 0}).params == {"j": 2, "k": 0}
    with pytest.raises(ConfigError, match=r"components\[0\]: reward 't_cat_required' needs param 'k'"):
        Catalog({"s": {"components": [{"reward": "t_cat_required"}]}})
    assert c.version("t_cat_required") == "4" and c.version("t_cat_kwargs").startswith(CODE_MARK)  # unversioned: its code


def test_submissions_of_a_reward_not_in_the_config_without_params_share_one_params_dict():
    # the scheduler sizes a run of tasks of one params dict once: a reward service's clients' requests, served in
    # turns, would each bring a dict of their own and have every task sized again
    c = Catalog(SECTION)
    first, again = c.resolve("gsm8k"), c.resolve("gsm8k", {})
    assert first == again == Plain("gsm8k", {}) and first.params is again.params
    assert c.resolve("gsm8k", {"score": 2}).params == {"score": 2}  # params given: their own dict, as before
    with pytest.raises(RewardError):
        c.resolve("no_such_reward_anywhere")
    assert "no_such_reward_anywhere" not in c._bare  # an unknown name asked for is not kept


def test_a_remote_catalog_keeps_no_entry_per_unknown_name_it_lets_through():
    # with remote pools, a name unknown here may be known there: it passes, but many such names keep nothing each
    c = Catalog({}, remote=True)
    for step in range(3):
        assert c.resolve(f"rm_{step}").reward == f"rm_{step}"
    assert c._bare == {}
