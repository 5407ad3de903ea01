"""The garbage collector around a run (runs/heap.py): paused at the command line's start, resumed when the load
starts with everything made before it frozen; a Python caller's own setting is left as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from loadrepro.runs.heap import frozen_heap, pause_until_load, resume


@pytest.fixture
def collector() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    resume()
    if enabled:
        gc.enable()
    else:
        gc.disable()


def test_collection_paused_at_the_start_goes_on_from_the_load_with_what_came_before_frozen(collector):
    pause_until_load()
    assert not gc.isenabled()
    made = [[] for _ in range(1000)]
    with frozen_heap():
        assert gc.isenabled() and gc.get_freeze_count() >= len(made)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with frozen_heap():  # a second load (a sweep's next level) finds it going on
        assert gc.isenabled()


def test_a_callers_own_collector_setting_is_left_as_it_set_it(collector):
    gc.disable()
    with frozen_heap():
        assert not gc.isenabled()
    resume()
    assert not gc.isenabled()
    gc.enable()
    with frozen_heap():
        assert gc.isenabled()
