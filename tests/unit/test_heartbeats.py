"""When the runtime sends heartbeats: the schedule on a fake clock, and one Delta stream in
memory (the real driver, machines and codec) with a 0.3 s TTL on the real clock."""

from __future__ import annotations

import functools

import anyio
import pytest

from xdscore import (
    LISTENER,
    ROUTE,
    Snapshot,
    SnapshotCache,
    XdsServer,
    make_resource,
    same_for_all,
)
from xdscore import builders as b
from xdscore.protocol import SUPPORTS_TTL, DeltaClient, DeltaResponse
from xdscore.server import ClientDriver, Pacing
from xdscore.server._heartbeat import HeartbeatSchedule
from xdscore.testing import byte_stream_pair
from xdscore.wire import make_node

from .test_driver import Recorder

TTL = 0.3


def test_the_schedule_beats_every_fraction_of_the_shortest_ttl() -> None:
    schedule = HeartbeatSchedule(1 / 3, ())
    assert schedule.wait(0.0) is None
    assert not schedule.due(0.0)
    schedule.held(3.0, 0.0)
    assert schedule.wait(0.0) == pytest.approx(1.0)
    assert not schedule.due(0.99)
    assert schedule.due(1.0)
    schedule.beaten(3.0, 1.0)
    assert schedule.wait(1.0) == pytest.approx(1.0)  # from now, not from the missed time
    schedule.held(0.6, 1.5)  # a shorter TTL arrives: its beat comes first
    assert schedule.wait(1.5) == pytest.approx(0.2)
    schedule.held(30.0, 1.5)  # a longer one never postpones the planned beat
    assert schedule.wait(1.5) == pytest.approx(0.2)
    schedule.beaten(0.6, 1.5)
    assert schedule.wait(1.5) == pytest.approx(0.2)
    schedule.beaten(None, 1.5)  # nothing the client holds expires any more: no more heartbeats
    assert schedule.wait(1.5) is None
    schedule.held(0.6, 1.5)
    schedule.held(None, 1.5)  # nor after a send that left it nothing with a TTL
    assert schedule.wait(1.5) is None
    off = HeartbeatSchedule(0, ())
    off.held(1.0, 1.5)
    assert off.wait(1.5) is None


def heartbeats(recorder: Recorder) -> list[DeltaResponse]:
    return [r for r in recorder.responses if isinstance(r, DeltaResponse) and r.heartbeat]


@pytest.mark.anyio
@pytest.mark.parametrize("features", [(SUPPORTS_TTL,), ()], ids=["ttl", "no-ttl"])
async def test_a_stream_heartbeats_what_it_holds_until_told_to_stop(
    features: tuple[str, ...],
) -> None:
    listener = make_resource(b.http_listener("l", 10000, "r"), ttl=TTL)
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, Snapshot([listener]))
    recorder = Recorder()
    server = XdsServer(cache, callbacks=recorder)
    client_end, server_end = byte_stream_pair()
    node = make_node(id="ttl", client_features=features)
    client = ClientDriver(DeltaClient(node=node), client_end, follow=False)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(functools.partial(server.run_stream, server_end, protocol="delta"))
            group.start_soon(client.run)
            await client.subscribe(LISTENER)
            await anyio.sleep(1.0)
            beats = heartbeats(recorder)
            machine = client.machine
            assert isinstance(machine, DeltaClient)
            assert machine.holds(LISTENER)["l"].version == listener.version
            # The client read the TTL only if it said it supports TTLs.
            assert machine.holds(LISTENER)["l"].ttl == (TTL if features else None)
            if not features:
                assert beats == []
                assert len(recorder.responses) == 1
                group.cancel_scope.cancel()
                return
            # Every 0.1 s, a third of the TTL: about ten in one second, all of "l", no body.
            assert 6 <= len(beats) <= 12, len(beats)
            assert {r.name for beat in beats for r in beat.resources} == {"l"}
            assert server.metrics is not None
            sample = server.metrics.registry.get_sample_value
            assert sample("xdscore_heartbeats_total", {"type": "lds"}) == len(beats)
            assert sample("xdscore_heartbeat_resources_total", {"type": "lds"}) == len(beats)

            server.stop_heartbeats(LISTENER, "l")
            await anyio.sleep(0.15)  # one already planned may still go out
            stopped = len(heartbeats(recorder))
            await anyio.sleep(0.5)
            assert len(heartbeats(recorder)) == stopped

            mark = len(recorder.responses)
            server.resume_heartbeats(LISTENER, "l")
            await anyio.sleep(0.5)
            after = recorder.responses[mark:]
            assert after, "nothing sent after resuming"
            refreshed = after[0]
            assert isinstance(refreshed, DeltaResponse)
            assert not refreshed.heartbeat  # in full first: the client may have dropped it
            assert [r.name for r in refreshed.resources] == ["l"]
            assert len(heartbeats(recorder)) > stopped  # and heartbeats again

            # The TTL goes: the listener is sent again without it, and heartbeats end.
            cache.set_snapshot(None, Snapshot([make_resource(b.http_listener("l", 10000, "r"))]))
            await anyio.sleep(0.2)
            ended = len(heartbeats(recorder))
            await anyio.sleep(0.5)
            assert len(heartbeats(recorder)) == ended
            assert machine.holds(LISTENER)["l"].ttl is None
            group.cancel_scope.cancel()


@pytest.mark.anyio
async def test_heartbeats_do_not_wait_for_a_burst_of_changes_to_settle() -> None:
    """Debounce holds a burst of cache writes until it settles (here: never, for 1.2 s, the
    quiet window being longer than the gap between writes); the heartbeats of what is
    unchanged go out on time all the same, and the burst is still not pushed early."""
    listener = make_resource(b.http_listener("l", 10000, "r"), ttl=TTL)
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, Snapshot([listener, b.route_configuration("r", [("/", "c0")])]))
    recorder = Recorder()
    server = XdsServer(cache, callbacks=recorder, pacing=Pacing(quiet=0.3, max_delay=5.0))
    client_end, server_end = byte_stream_pair()
    node = make_node(id="ttl", client_features=(SUPPORTS_TTL,))
    client = ClientDriver(DeltaClient(node=node), client_end, follow=False)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(functools.partial(server.run_stream, server_end, protocol="delta"))
            group.start_soon(client.run)
            await client.subscribe(LISTENER)
            await client.subscribe(ROUTE, ["r"])
            await anyio.sleep(0.3)
            before, sent = len(heartbeats(recorder)), len(recorder.responses)
            for step in range(24):  # a write every 0.05 s: the burst never goes quiet
                routes = [b.route_configuration("r", [("/", f"c{step + 1}")])]
                cache.set_snapshot(None, Snapshot([listener, *routes]))
                await anyio.sleep(0.05)
            during = recorder.responses[sent:]
            beats = len(heartbeats(recorder)) - before
            assert 8 <= beats <= 16, beats  # about one every 0.1 s
            assert all(isinstance(r, DeltaResponse) and r.heartbeat for r in during), [
                (r.type_url[-10:], r.heartbeat, [x.name for x in r.resources], r.removed)
                for r in during
                if isinstance(r, DeltaResponse)
            ]
            await anyio.sleep(0.5)  # the burst settles: the last route goes out, once
            routes_sent = [
                r
                for r in recorder.responses[sent:]
                if isinstance(r, DeltaResponse) and r.type_url == ROUTE
            ]
            assert len(routes_sent) == 1
            group.cancel_scope.cancel()
