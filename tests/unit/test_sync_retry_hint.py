"""The retry hint of a stream refused for ``max_initial_syncs`` (server/_admission.py):
the time the streams syncing now take to finish at the rate syncs have been finishing."""

from __future__ import annotations

import pytest

from xdscore.server._admission import (
    SYNC_HINT_MAX,
    SYNC_HINT_MIN,
    SYNC_RATE_GUESS,
    RateMeter,
    sync_retry_after,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_meter_measures_the_span_of_its_window() -> None:
    clock = Clock()
    meter = RateMeter(2.0, clock=clock)
    for _ in range(9):
        meter.mark()
    assert meter.rate() == 0.0  # too few to tell
    clock.now += 600.0  # a quiet spell, then a burst of 200 a second for 1.5 s
    for _ in range(300):
        meter.mark()
        clock.now += 0.005
    assert meter.rate() == pytest.approx(200.0, rel=0.01)  # not diluted by the quiet spell
    clock.now += 1.0  # the events of the first 0.5 s left the window
    assert meter.rate() == pytest.approx(200 / 2.0, rel=0.02)
    clock.now += 5.0
    assert meter.rate() == 0.0


@pytest.mark.parametrize(
    ("syncing", "rate", "hint"),
    [
        (5_000, 500.0, 10.0),  # the time the syncing streams take to drain
        (5_000, 0.0, 5_000 / SYNC_RATE_GUESS),  # nothing finished yet: the guess
        (20, 100.0, SYNC_HINT_MIN),  # a small backlog: never less than the floor
        (100_000, 10.0, SYNC_HINT_MAX),  # a stalled server: never more than the ceiling
    ],
)
def test_the_hint_is_the_time_the_backlog_takes(syncing: int, rate: float, hint: float) -> None:
    assert sync_retry_after(syncing, rate) == pytest.approx(hint)
