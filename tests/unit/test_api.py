"""The public API: what ``qworker.__all__`` exports is exactly what the package offers."""

import types

import qworker


def test_all_lists_every_public_name_and_only_those():
    public = {name for name, value in vars(qworker).items() if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert set(qworker.__all__) == public
    assert len(qworker.__all__) == len(set(qworker.__all__))


def test_every_exported_name_is_documented():
    for name in qworker.__all__:
        obj = getattr(qworker, name)
        assert getattr(obj, "__doc__", None), f"qworker.{name} has no docstring"


def test_the_exception_tree():
    for name in ("ConfigError", "GatherTimeout", "PoolStartError", "ProducerClosed", "RewardError", "ServiceUnavailable", "WireError"):
        assert issubclass(getattr(qworker, name), qworker.QworkerError)
    assert issubclass(qworker.GatherTimeout, TimeoutError) and issubclass(qworker.ConfigError, ValueError)


def test_the_readme_lists_every_error_kind_and_no_other():
    import re

    from tests.conftest import REPO

    text = (REPO / "README.md").read_text()
    table = text[text.index("| kind | the task failed because |"):]
    table = table[: table.index("\n\n")]
    listed = re.findall(r"^\| `(\w+)` \|", table, flags=re.M)
    assert listed == [k.value for k in qworker.ErrorKind]


def test_the_testing_module_exports_its_documented_doubles_and_only_those():
    import qworker.testing

    public = {name for name, value in vars(qworker.testing).items() if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert set(qworker.testing.__all__) == public
    assert {"MockJudge", "StubTransport"} <= set(qworker.testing.__all__)
    for name in qworker.testing.__all__:
        obj = getattr(qworker.testing, name)
        assert isinstance(obj, int) or getattr(obj, "__doc__", None), f"qworker.testing.{name} has no docstring"
