import pytest

from qworker import RewardError, reward
from qworker.registry.registry import load_modules, modules_to_forward, registered, resolve


def test_decorator_registers_with_kind_and_timeout():
    @reward("t_reg_one", kind="io", timeout=3)
    def one(payload):
        return 1.0

    spec = resolve("t_reg_one")
    assert (spec.fn, spec.kind, spec.timeout_s) == (one, "io", 3)
    assert "t_reg_one" in registered()


def test_bare_decorator_uses_the_function_name():
    @reward
    def t_reg_bare(payload):
        return 0.5

    assert resolve("t_reg_bare").fn is t_reg_bare


def test_a_second_function_under_the_same_name_is_refused():
    @reward("t_reg_dup")
    def first(payload):
        return 1.0

    with pytest.raises(RewardError, match="already registered"):

        @reward("t_reg_dup")
        def second(payload):
            return 2.0


def test_bad_kind_and_timeout_are_refused():
    with pytest.raises(RewardError, match="kind must be one of"):
        reward("x", kind="gpu")
    with pytest.raises(RewardError, match="positive number of seconds"):
        reward("x", timeout=0)


def test_unknown_names_list_what_exists():
    assert load_modules([]) == []  # the built-ins
    with pytest.raises(RewardError, match="unknown reward 'nope'; this worker has: .*gsm8k"):
        resolve("nope")
    with pytest.raises(RewardError, match="cannot import 'no_such_pkg_x'"):
        resolve("no_such_pkg_x:fn")


def test_broken_modules_become_error_lines_not_crashes(tmp_path):
    bad = tmp_path / "bad_rewards.py"
    bad.write_text("raise ImportError('needs a GPU')\n")
    errors = load_modules([str(bad), "no_such_module_y"])
    assert len(errors) == 2
    assert "needs a GPU" in errors[0] and "no_such_module_y" in errors[1]


def test_modules_of_registered_rewards_are_forwarded():
    assert __name__ in modules_to_forward() or "tests.unit.rewards.test_registry" in modules_to_forward()
    assert not any(m.startswith("qworker.rewards") for m in modules_to_forward())


def test_a_version_is_recorded_and_checked():
    @reward("t_reg_versioned", version=2)
    def versioned(payload):
        return 1.0

    assert resolve("t_reg_versioned").version == "2"
    for bad in ("", True, 1.5):
        with pytest.raises(RewardError, match="version must be"):
            reward("x", version=bad)
    with pytest.raises(RewardError, match="without NUL"):
        reward("a\0b")


def test_a_registered_function_keeps_its_spec_under_its_path():
    spec = resolve("tests.unit.rewards.test_registry:_path_versioned")
    assert (spec.kind, spec.timeout_s, spec.version) == ("io", 7, "3")


@reward("t_reg_path_versioned", kind="io", timeout=7, version="3")
def _path_versioned(payload):
    return 1.0


def test_a_generator_function_is_refused_at_registration_in_one_line():
    def counts(payload):
        yield 1.0

    async def acounts(payload):
        yield 1.0

    for fn in (counts, acounts):
        with pytest.raises(RewardError, match=r"is a generator function \(it yields\); a reward returns its score") as info:
            reward(f"t_gen_{fn.__name__}")(fn)
        assert "\n" not in str(info.value)
        assert f"t_gen_{fn.__name__}" not in registered()


def test_an_async_def_reward_registers_like_any_other():
    async def t_async(payload):
        return 1.0

    reward("t_async", kind="io")(t_async)
    assert registered()["t_async"].fn is t_async and registered()["t_async"].kind == "io"
