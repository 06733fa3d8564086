"""``CollectorPause``: a large submission's long-lived objects skip the young collections; nothing else changes."""

from __future__ import annotations

import gc

import pytest

from qworker.engine.gcpause import PROMOTE_AT, CollectorPause


class Thing:
    """A GC-tracked object, as a future is."""


def young(objs: list) -> int:
    """How many of ``objs`` the young and middle generations hold (what young collections would scan)."""
    ids = {id(o) for o in objs}
    return sum(id(o) in ids for gen in (0, 1) for o in gc.get_objects(generation=gen))


@pytest.fixture(autouse=True)
def collector_restored():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_the_objects_a_large_block_made_go_straight_to_the_oldest_generation_and_the_collector_runs_again():
    gc.enable()
    with CollectorPause() as pause:
        assert not gc.isenabled()
        made = [Thing() for _ in range(PROMOTE_AT)]
        pause.made = len(made)
    assert gc.isenabled()
    assert young(made) == 0 and gc.get_freeze_count() == 0
    assert gc.get_count()[0] < 10  # the young generation starts empty: no collection rescans the block's objects soon


def test_a_small_block_only_pauses_the_collector_so_young_garbage_is_still_freed_by_young_collections():
    gc.enable()
    with CollectorPause() as pause:
        made = [Thing() for _ in range(10)]
        pause.made = len(made)
    assert gc.isenabled() and young(made) == len(made)


def test_objects_someone_froze_stay_frozen_and_a_collector_paused_by_someone_else_stays_paused():
    gc.enable()
    gc.freeze()
    frozen = gc.get_freeze_count()
    with CollectorPause() as pause:
        pause.made = PROMOTE_AT
    assert gc.get_freeze_count() == frozen and gc.isenabled()
    gc.unfreeze()
    gc.disable()
    with CollectorPause() as pause:
        pause.made = PROMOTE_AT
    assert not gc.isenabled()
