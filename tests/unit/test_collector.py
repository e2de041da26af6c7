"""tune_collector: the youngest generation's threshold, and what is alive frozen."""

from __future__ import annotations

import gc

import pytest

from xdscore.server import DEFAULT_YOUNG_THRESHOLD, tune_collector


def test_it_sets_the_young_threshold_keeps_the_ratios_and_freezes_the_heap() -> None:
    before = gc.get_threshold()
    try:
        tune_collector(12_345)
        young, middle, old = gc.get_threshold()
        assert (young, middle, old) == (12_345, before[1], before[2])
        assert gc.get_freeze_count() > 1000  # the modules and test objects alive now
        tune_collector()
        assert gc.get_threshold()[0] == DEFAULT_YOUNG_THRESHOLD
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_threshold_must_be_positive() -> None:
    before = gc.get_threshold()
    with pytest.raises(ValueError, match="positive"):
        tune_collector(0)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
