"""The retry hint of a stream refused for ``max_initial_syncs`` (server/_admission.py): its
turn, once the streams syncing now would be done and the streams refused before it have had
theirs, at the rate syncs have been finishing."""

from __future__ import annotations

import itertools

import pytest

from xdscore import GrpcStatus, RemoteProtocolError, SnapshotCache, XdsServer, same_for_all
from xdscore.server import ServerLimits
from xdscore.server._admission import (
    SYNC_HINT_MAX,
    SYNC_HINT_MIN,
    SYNC_RATE_GUESS,
    RateMeter,
    SyncTurns,
    refusal,
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
def test_the_first_turn_is_the_time_the_backlog_takes(
    syncing: int, rate: float, hint: float
) -> None:
    assert SyncTurns(clock=Clock()).retry_after(syncing, rate) == pytest.approx(hint)


def test_each_refused_stream_gets_the_next_turn_at_the_pace_of_syncs() -> None:
    clock = Clock()
    turns = SyncTurns(clock=clock)
    hints = [turns.retry_after(5_000, 2_000.0) for _ in range(5_000)]
    assert hints[0] == pytest.approx(2.5)  # the 5,000 syncing take 2.5 s at 2,000 a second
    assert hints[-1] == pytest.approx(2.5 + 4_999 / 2_000.0)  # then one turn each
    assert all(b - a == pytest.approx(1 / 2_000.0) for a, b in itertools.pairwise(hints))
    clock.now += 60.0  # the turns given are past: the next one starts from the backlog
    assert turns.retry_after(100, 2_000.0) == pytest.approx(SYNC_HINT_MIN)


def test_the_hint_is_stretched_by_at_most_the_spread() -> None:
    for _ in range(200):
        message = refusal("busy", 2.0, spread=0.1).message
        hint = float(message.rsplit("retry after ", 1)[1].removesuffix(" s"))
        assert 2.0 <= hint <= 2.2 + 0.05  # (printed to 0.1 s)


def test_a_stream_is_refused_once_the_syncs_ahead_would_take_too_long() -> None:
    clock = Clock()
    limits = ServerLimits(max_initial_syncs=0, max_sync_seconds=2.0, new_streams_per_second=0)
    server = XdsServer(SnapshotCache(group=same_for_all), server_limits=limits)
    server._syncs_done = RateMeter(clock=clock)
    server._syncing = 50
    for _ in range(50):  # syncs finishing with no backlog: they say nothing of the server
        server._synced()
        clock.now += 0.01
    server._syncing = 10_000
    server._admit_first()  # no rate known: only the cap (none here) applies
    server._syncing = 400
    for _ in range(200):  # with a backlog behind them: 100 syncs a second
        server._synced()
        clock.now += 0.01
    assert server.syncing == 200
    server._syncing = 199
    server._admit_first()  # 1.99 s of syncs queued: let in (now 200)
    with pytest.raises(RemoteProtocolError) as refused:
        server._admit_first()
    assert refused.value.status == GrpcStatus.RESOURCE_EXHAUSTED
    assert "2.0 s of syncs at the 100 a second they finish at" in refused.value.message
    assert server.syncing == 200
