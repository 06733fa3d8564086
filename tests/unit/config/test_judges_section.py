"""The config's ``judges:`` section: a judge written once, by name, checked at load, and named by rewards."""

from __future__ import annotations

import pytest
import yaml

import qworker.rewards  # noqa: F401  # the built-ins (urllib3 probes IPv6 with a socket as it is imported): outside the purity guard
from qworker import ConfigError
from qworker.config.file import load
from qworker.judge.control.registry import JudgeGates
from qworker.registry.catalog import Catalog
from tests.conftest import REPO

EP = [{"url": "http://127.0.0.1:9/v1/chat/completions", "weight": 2, "max_concurrency": 8}]
JUDGE = {"model": "m", "endpoints": EP, "timeout_s": 7, "max_attempts": 2, "dead_after_s": 3, "routing": "round_robin",
         "coordinate": False}
ASKS = {"rubric": "be strict", "score_max": 10}


def catalog(config: dict) -> Catalog:
    loaded = load(config)
    return Catalog(loaded["rewards"], loaded["where"], judges=loaded["judges"])


def test_a_reward_naming_a_judge_gets_the_gate_hash_and_task_params_of_the_inline_spelling():
    named = catalog({"judges": {"strict": JUDGE}, "rewards": {"llm_judge": {"judge": "strict", **ASKS}}}).resolve("llm_judge")
    inline = catalog({"rewards": {"llm_judge": {**JUDGE, **ASKS}}}).resolve("llm_judge")
    a, b = JudgeGates().submission(named.params), JudgeGates().submission(inline.params)
    assert a.hashed_params == b.hashed_params == {"model": "m", **ASKS}  # switching spelling never re-pays a judgement
    assert a.task_params == b.task_params and a.task_params["endpoints"] == EP and a.task_params["timeout_s"] == 7
    assert a.timeout_s == b.timeout_s == 7 + 5.0
    assert a.policy.settings == b.policy.settings and a.policy.max_attempts == 2 and a.policy.router.routing == "round_robin"


def test_aliases_composites_and_submissions_name_judges_too():
    c = catalog({
        "judges": {"fast": {**JUDGE, "model": "small"}, "slow": {**JUDGE, "model": "large"}},
        "rewards": {"llm_judge": {"judge": "fast"}, "careful": {"reward": "llm_judge", "params": {"judge": "slow"}},
                    "both": {"components": [{"reward": "careful"}, {"name": "quick", "reward": "llm_judge", "params": {"rubric": "r"}}]}},
    })
    assert c.resolve("llm_judge").params["model"] == "small"
    assert c.resolve("careful").params["model"] == "large"
    assert c.resolve("llm_judge", {"judge": "slow"}).params["model"] == "large"  # given at submission, over the default
    quick = c.resolve("both").components[1].task  # type: ignore[union-attr]
    assert (quick.params["model"], quick.params["rubric"], "judge" in quick.params) == ("small", "r", False)


@pytest.mark.parametrize(("entry", "message"), [
    ({**JUDGE, "timeot_s": 3}, r"judges\.j: unknown key 'timeot_s'; known keys: .*timeout_s"),
    ({**JUDGE, "timeout_s": "3"}, r"judges\.j\.timeout_s: expected number, got str '3'"),
    ({**JUDGE, "coordinate": "yes"}, r"judges\.j\.coordinate: expected bool, got str 'yes'"),
    ({**JUDGE, "endpoints": "http://a"}, r"judges\.j\.endpoints: expected a non-empty list of mappings, got str"),
    ({"endpoints": EP}, r"judges\.j: needs 'model'"),
    ({"model": "m"}, r"judges\.j: needs 'endpoints'"),
    ({**JUDGE, "max_attempts": 0}, r"judges\.j: max_attempts = 0: must be a whole number >= 1"),
    ({**JUDGE, "routing": "fastest"}, r"judges\.j: routing = 'fastest': must be one of capacity, round_robin, prefix"),
    ({**JUDGE, "endpoints": [{"url": "http://a", "rmp": 60}]}, r"judges\.j: endpoints\[0\]: unknown key\(s\) \['rmp'\]"),
    ({**JUDGE, "endpoints": [{"url": "htps://a/v1"}]}, r"judges\.j: endpoints\[0\]\.url = 'htps://a/v1': must start with http:// or https://"),
    ({**JUDGE, "endpoints": [{"url": "http://a:99999/v1"}]}, r"judges\.j: endpoints\[0\]\.url = 'http://a:99999/v1': not a URL with a host"),
    ({**JUDGE, "rubric": "r"}, r"judges\.j: unknown key 'rubric'"),  # what a reward asks is the reward's, not the judge's
    ("http://a", r"judges\.j: expected a mapping of the judge's settings, got str"),
])
def test_a_bad_judge_is_one_config_error_at_load_naming_the_file_the_judge_and_the_key(tmp_path, entry, message):
    path = tmp_path / "judges.yaml"
    path.write_text(yaml.safe_dump({"judges": {"j": entry}}))
    with pytest.raises(ConfigError, match=message) as info:
        load(str(path))
    assert str(info.value).startswith(f"{path}: judges")


def test_two_judges_on_the_same_servers_with_other_gate_settings_are_refused_at_load_naming_both(tmp_path):
    server = {"model": "m", "endpoints": [{"url": "http://127.0.0.1:9/v1/chat/completions"}]}
    path = tmp_path / "judges.yaml"
    path.write_text(yaml.safe_dump({"judges": {"a": {**server, "max_attempts": 2}, "b": {**server, "max_attempts": 5}}}))
    with pytest.raises(ConfigError) as info:
        load(str(path))
    assert str(info.value).startswith(f"{path}: judges.b: calls the same servers as judges.a")
    assert "max_attempts 5 (judges.a has 2)" in str(info.value)


@pytest.mark.parametrize(("rewards", "where"), [
    ({"llm_judge": {"judge": "strikt"}}, "rewards.llm_judge"),
    ({"careful": {"reward": "llm_judge", "params": {"judge": "strikt"}}}, "rewards.careful"),
    ({"both": {"components": [{"reward": "math"}, {"reward": "llm_judge", "params": {"judge": "strikt"}}]}}, r"rewards.both.components\[1\]"),
])
def test_a_reward_naming_no_judge_of_the_section_is_refused_at_start_listing_the_judges(rewards, where):
    with pytest.raises(ConfigError, match=rf"^config: {where}: judge: 'strikt' names no judge of the config's judges: section; "
                                          r"its judges: lenient, strict$"):
        catalog({"judges": {"strict": JUDGE, "lenient": JUDGE}, "rewards": rewards})


def test_a_judge_named_at_submission_that_the_config_lacks_is_refused_naming_the_params():
    c = catalog({"judges": {"strict": JUDGE}})
    with pytest.raises(ConfigError, match=r"^params for reward 'llm_judge': judge: 'other' names no judge .*its judges: strict$"):
        c.resolve("llm_judge", {"judge": "other"})


def test_a_judge_setting_written_beside_the_judge_name_is_refused_naming_the_entry_it_belongs_in():
    with pytest.raises(ConfigError, match=r"rewards\.llm_judge: 'max_attempts', 'timeout_s' are settings of judge 'strict': "
                                          r"set them in its entry \(judges\.strict\)"):
        catalog({"judges": {"strict": JUDGE}, "rewards": {"llm_judge": {"judge": "strict", "timeout_s": 3, "max_attempts": 5}}})


@pytest.mark.parametrize("name", ["judge.yaml", "demo-judge.yaml"])
def test_the_bundled_judge_configs_write_their_judge_once_in_the_judges_section(name):
    loaded = load(str(REPO / "configs" / name))
    (judge,) = loaded["judges"]
    params = Catalog(loaded["rewards"], loaded["where"], judges=loaded["judges"]).resolve("llm_judge").params
    assert loaded["rewards"]["llm_judge"]["judge"] == judge and params["model"] == loaded["judges"][judge]["model"]
    assert not {"model", "endpoints", "timeout_s"} & set(loaded["rewards"]["llm_judge"])


def test_a_named_judge_and_the_same_judge_inline_share_one_gate():
    judge = {**JUDGE, "ceiling": 64, "initial_concurrency": 8}  # whole numbers, as YAML reads them
    c = catalog({"judges": {"strict": judge},
                 "rewards": {"named": {"reward": "llm_judge", "params": {"judge": "strict"}},
                             "inline": {"reward": "llm_judge", "params": judge}}})
    gates = JudgeGates()
    assert gates.submission(c.resolve("named").params).policy is gates.submission(c.resolve("inline").params).policy


def test_a_judge_a_reward_names_is_expanded_once_per_entry_at_load_and_not_again_per_submission(monkeypatch):
    import qworker.registry.catalog as catalog_module

    calls: list[str] = []
    real = catalog_module.expand
    monkeypatch.setattr(catalog_module, "expand", lambda params, judges, where: calls.append(where) or real(params, judges, where))
    c = catalog({"judges": {"strict": JUDGE}, "rewards": {
        "llm_judge": {"judge": "strict", **ASKS}, "careful": {"reward": "llm_judge", "params": {"rubric": "r"}},
        "both": {"components": [{"reward": "careful"}, {"name": "quick", "reward": "llm_judge"}]}}})
    assert sorted(calls) == ["config: rewards.both.components[0]", "config: rewards.both.components[1]",
                             "config: rewards.careful", "config: rewards.llm_judge"]
    calls.clear()
    for _ in range(3):
        assert c.resolve("llm_judge").params["model"] == "m" and c.resolve("careful").params["rubric"] == "r"
        c.resolve("both")
    assert calls == []  # a submission without params of its own takes the entry as resolved at load
    assert c.resolve("llm_judge", {"rubric": "other"}).params["rubric"] == "other" and len(calls) == 1


def test_a_reward_registered_after_the_catalog_was_built_still_gets_its_named_judges_settings(monkeypatch):
    from qworker.registry import registry

    monkeypatch.setattr(registry, "_registry", dict(registry._registry))  # the registration is this test's alone
    loaded = load({"judges": {"strict": JUDGE}, "rewards": {
        "late_judge": {"judge": "strict", **ASKS}, "mixed": {"components": [{"reward": "late_judge"}]}}})
    c = Catalog(loaded["rewards"], loaded["where"], judges=loaded["judges"], remote=True)  # a remote pool may have it
    assert c.resolve("late_judge").params["judge"] == "strict"  # unknown here yet: passed on as written

    @registry.reward("late_judge", kind="io", admission="qworker.judge.control.registry:JudgeGates")
    def late_judge(response, **params):  # pragma: no cover - never called
        return 0.0

    expanded = c.resolve("late_judge").params
    assert "judge" not in expanded and expanded["model"] == "m" and expanded["endpoints"] == EP
    assert c.resolve("late_judge").params is c.resolve("late_judge").params  # resolved again once, not per submission
    component = c.resolve("mixed").components[0].task  # type: ignore[union-attr]
    assert "judge" not in component.params and component.params["rubric"] == "be strict"
