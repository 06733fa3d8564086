"""``qworker keys`` writes a key pair where it is told, or says in one line why it cannot (pure: files only)."""

from __future__ import annotations

import pytest

from qworker import ConfigError
from qworker.transport.security import create_keys


def test_a_key_pair_cannot_be_written_where_a_file_stands_and_the_error_names_the_place(tmp_path):
    where = tmp_path / "scores.jsonl"
    where.write_text("{}\n")
    with pytest.raises(ConfigError) as err:
        create_keys(str(where), "producer")
    assert str(err.value) == f"cannot write a key pair in {where}: File exists"


@pytest.mark.parametrize("damage", ["cut", "bad character"])
def test_a_key_file_with_a_damaged_key_is_one_line_naming_it_not_a_socket_error(tmp_path, damage):
    from qworker.transport.security import _load

    public, secret = create_keys(str(tmp_path), "producer")
    text = open(public).read()
    key = text.split('public-key = "', 1)[1].split('"', 1)[0]
    damaged = tmp_path / "damaged.key"
    damaged.write_text(text.replace(key, key[:-2] if damage == "cut" else "~" + key[1:]))
    with pytest.raises(ConfigError) as err:
        _load(str(damaged), secret=False)
    assert str(err.value).startswith(f"{damaged} holds a damaged key"), err.value
    assert _load(public, secret=False)[0] == key.encode() and _load(secret, secret=True)[1]  # a good pair still loads


def test_a_missing_or_keyless_key_file_says_what_is_wrong_with_it(tmp_path):
    from qworker.transport.security import _load

    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "noeq.key").write_text('public-key "abc"\n')  # a key line without its '=' (a hand edit)
    keyless = "it holds no key line as 'qworker keys' writes them"
    for path, why in ((tmp_path / "nope.key", "no such file"), (tmp_path / "notes.txt", keyless),
                      (tmp_path / "noeq.key", keyless), (tmp_path, "Is a directory")):
        with pytest.raises(ConfigError) as err:
            _load(str(path), secret=False)
        assert str(err.value) == f"cannot read CURVE key file {path}: {why}"
