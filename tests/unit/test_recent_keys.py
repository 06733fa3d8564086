"""``RecentKeys``, the bounded set behind a ``Client``'s known targets and a ``PeerRation``'s peers: it keeps the keys
most recently used (looked up or added), at most its size, and says whether an added key is new."""

from __future__ import annotations

import pytest

from qworker._recent import RecentKeys


def test_the_keys_kept_are_the_most_recently_used():
    known: RecentKeys[bytes] = RecentKeys(2)
    for key in (b"a", b"b"):
        known.add(key)
    assert b"a" in known  # used: b is now the least recently used
    known.add(b"c")
    assert b"a" in known and b"c" in known and b"b" not in known
    assert len(known) == 2


def test_adding_says_whether_the_key_is_new_and_refreshes_one_held():
    known: RecentKeys[bytes] = RecentKeys(2)
    assert known.add(b"a") and known.add(b"b")
    assert not known.add(b"a")  # held: now the most recently used
    assert known.add(b"c") and b"b" not in known and b"a" in known


def test_a_key_forgotten_or_cleared_is_new_again():
    known: RecentKeys[bytes] = RecentKeys(4)
    known.add(b"a")
    known.add(b"b")
    known.discard(b"a")
    known.discard(b"never held")
    assert b"a" not in known and known.add(b"a")
    known.clear()
    assert len(known) == 0 and known.add(b"b")


def test_a_set_of_no_keys_is_refused():
    with pytest.raises(ValueError):
        RecentKeys(0)
