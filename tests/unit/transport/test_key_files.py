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
