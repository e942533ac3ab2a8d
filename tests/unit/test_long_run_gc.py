"""`troupe run`'s collector set-up: larger young generations, and what the
caches hold after the initial sync frozen out of every later collection."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from troupe.cli import GC_THRESHOLDS, collect_for_long_run, freeze_synced


@pytest.fixture
def collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("collector")
def test_thresholds_for_a_long_run() -> None:
    collect_for_long_run()
    assert gc.get_threshold() == GC_THRESHOLDS
    young, _, old = GC_THRESHOLDS
    assert young > 700  # CPython's default promotes what is merely in flight
    assert old == 10  # the old generation's rule is CPython's


@pytest.mark.usefixtures("collector")
def test_what_lives_at_sync_is_frozen_and_garbage_is_collected_first() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector frees it

    kept = Node()
    garbage = weakref.ref(Node())
    freeze_synced()
    assert garbage() is None  # collected before the freeze, not kept for good
    assert gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())  # frozen: walked no more
