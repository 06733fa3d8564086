import pytest

from qworker import ConfigError
from qworker.config.file import load


def test_yaml_sections_load(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("producer:\n  max_attempts: 5\n  cache_ttl_s: 3600\npool:\n  workers: 4\n  max_rss_mb: 2048\n")
    cfg = load(str(path))
    assert cfg["producer"] == {"max_attempts": 5, "cache_ttl_s": 3600}
    assert cfg["pool"] == {"workers": 4, "max_rss_mb": 2048}


@pytest.mark.parametrize(
    "text, match",
    [
        ("producer:\n  max_atempts: 5\n", "unknown key 'max_atempts'"),
        ("producer:\n  max_attempts: five\n", r"max_attempts: expected int, got str"),
        ("producer:\n  heartbeat_s: -1\n", "must not be negative"),
        ("producer:\n  max_attempts: true\n", "expected int, got bool"),
        ("worker:\n  x: 1\n", r"unknown section\(s\) \['worker'\]"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("producer: [1, 2\n", "not valid YAML"),
    ],
)
def test_broken_configs_name_file_section_and_key(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        load(str(path))
    assert str(path) in str(info.value)


@pytest.mark.parametrize("text, near", [
    ("producer:\n  local_worker: 4\n", "local_workers"),  # a typo
    ("producer:\n  rewards: [my_rewards]\n", "reward_modules"),  # the key's name in older configs
    ("pool:\n  worker: 8\n", "workers"),
])
def test_an_unknown_key_names_the_known_key_it_is_nearest(tmp_path, text, near):
    path = tmp_path / "old.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(str(path))
    assert str(info.value).endswith(f"(did you mean {near!r}?)")


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load(str(tmp_path / "nope.yaml"))


def test_the_shipped_config_is_valid():
    from tests.conftest import REPO

    cfg = load(str(REPO / "configs" / "qworker.yaml"))
    assert cfg["producer"]["max_attempts"] == 3 and cfg["pool"]["workers"] == 8
    assert cfg["producer"]["reward_modules"] == () and cfg["pool"]["task_timeout_s"] == 60.0


def test_the_shipped_config_lists_every_option():
    from qworker import PoolOptions, ProducerOptions
    from tests.conftest import REPO

    cfg = load(str(REPO / "configs" / "qworker.yaml"))
    assert set(cfg["producer"]) == set(ProducerOptions.yaml_keys())
    assert set(cfg["pool"]) == set(PoolOptions.yaml_keys())
