"""A synced stream's request is answered by the read task at once when the transport can
write without waiting (``try_send_parts``); otherwise, and during the initial sync, by the
write task, in order. Push slots: established pushes do not queue one after another; syncs
queue behind them."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
import pytest

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    Snapshot,
    SnapshotCache,
    XdsServer,
    make_resource,
    same_for_all,
)
from xdscore import builders as b
from xdscore.protocol import SUPPORTS_TTL, DeltaClient, DeltaResponse, SotwClient
from xdscore.server import ByteStream, ClientDriver, PushSlots
from xdscore.server._admission import WAKES_PER_TURN
from xdscore.testing import MemoryByteStream, byte_stream_pair
from xdscore.wire import make_node

from .test_driver import DEADLINE, NODE, Recorder, config, until

pytestmark = pytest.mark.anyio


class AtOnceStream(ByteStream):
    """A server end that can also write at once, while ``room`` says so, and records which
    way each message went."""

    def __init__(self, end: MemoryByteStream) -> None:
        self._end = end
        self.room = True
        self.at_once: list[bytes] = []
        self.waited: list[bytes] = []

    async def receive(self) -> bytes | None:
        return await self._end.receive()

    async def send(self, data: bytes) -> None:
        await self._end.send(data)
        self.waited.append(data)

    def writable(self, size: int) -> bool:
        return self._end.writable(size)

    async def closed(self) -> None:
        await self._end.closed()

    def counts(self) -> tuple[int, int]:
        """(messages the write task wrote, messages written at once) so far."""
        return len(self.waited), len(self.at_once)

    def try_send_parts(self, parts: Sequence[bytes]) -> bool:
        if not self.room:
            return False
        data = b"".join(parts)
        self._end._outgoing.send_nowait(data)
        self.at_once.append(data)
        return True


def sotw(client: ClientDriver) -> SotwClient:
    machine = client.machine
    assert isinstance(machine, SotwClient)
    return machine


@asynccontextmanager
async def open_stream(
    recorder: Recorder, slots: PushSlots | None = None
) -> AsyncIterator[tuple[AtOnceStream, ClientDriver, XdsServer, anyio.abc.TaskGroup]]:
    """A SotW ADS stream served from ``config(80)`` (with ``slots``, if given) and a
    client driver on its other end, both running; nothing asked for yet."""
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, config(80))
    server = XdsServer(cache, callbacks=recorder)
    if slots is not None:
        server._slots = slots
        server._settings = attrs.evolve(server._settings, slots=slots)
    client_end, server_end = byte_stream_pair(16)
    stream = AtOnceStream(server_end)
    client = ClientDriver(SotwClient(node=NODE), client_end, on_response=recorder.client_saw)
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: server.run_stream(stream, protocol="sotw"))
        group.start_soon(client.run)
        yield stream, client, server, group
        group.cancel_scope.cancel()


@asynccontextmanager
async def synced_stream(
    recorder: Recorder,
) -> AsyncIterator[tuple[AtOnceStream, ClientDriver, XdsServer, anyio.abc.TaskGroup]]:
    """A SotW ADS stream whose client holds clusters, endpoints, listener and route."""
    async with open_stream(recorder) as (stream, client, server, group):
        await client.watch(CLUSTER, None)
        await client.watch(LISTENER, None)
        machine = sotw(client)
        await until(
            lambda: (
                all(machine.holds(t) for t in (CLUSTER, ENDPOINT, LISTENER, ROUTE))
                and [s.driver.session.synced for s in server.streams()] == [True]
            ),
            lambda: recorder.changed,
        )
        yield stream, client, server, group


async def test_the_initial_sync_is_answered_at_once_too() -> None:
    recorder = Recorder()
    async with synced_stream(recorder) as (stream, _, _, _):
        # Clusters, listener, endpoints and route; the first may come before the write
        # task is between rounds.
        assert len(stream.at_once) + len(stream.waited) == 4
        assert len(stream.at_once) >= 3


async def test_a_syncing_stream_without_a_free_slot_is_answered_by_the_write_task() -> None:
    recorder = Recorder()
    slots = PushSlots(1)
    assert slots.try_acquire(syncing=True)  # held by another sync for now
    async with open_stream(recorder, slots) as (stream, client, _, _):
        await client.watch(CLUSTER, None)
        with anyio.move_on_after(0.1):
            await until(lambda: bool(recorder.responses), lambda: recorder.changed)
        assert recorder.responses == []  # waiting for the slot
        slots.release(at_turn_end=True)
        await until(lambda: len(recorder.responses) == 2, lambda: recorder.changed)
        assert len(stream.waited) == 1  # the write task took the slot and answered it


async def test_a_synced_streams_request_is_answered_at_once() -> None:
    recorder = Recorder()
    async with synced_stream(recorder) as (stream, client, _, _):
        machine = sotw(client)
        before = stream.counts()
        await client.watch(ENDPOINT, ["a"])  # narrowed: a new selection is due
        await until(
            lambda: len(recorder.responses) == 5 and len(machine.holds(ENDPOINT)) == 1,
            lambda: recorder.changed,
        )
        assert stream.counts() == (before[0], before[1] + 1)


async def test_without_room_the_write_task_answers_in_order() -> None:
    recorder = Recorder()
    async with synced_stream(recorder) as (stream, client, _, _):
        machine = sotw(client)
        before = stream.counts()
        stream.room = False
        await client.watch(ENDPOINT, ["b"])
        await until(lambda: len(recorder.responses) == 5, lambda: recorder.changed)
        stream.room = True
        await client.watch(ENDPOINT, ["a", "b"])
        await until(
            lambda: len(recorder.responses) == 6 and set(machine.holds(ENDPOINT)) == {"a", "b"},
            lambda: recorder.changed,
        )
        assert stream.counts() == (before[0] + 1, before[1] + 1)


async def test_a_cache_change_is_still_pushed_by_the_write_task() -> None:
    recorder = Recorder()
    async with synced_stream(recorder) as (stream, client, server, _):
        machine = sotw(client)
        before = stream.counts()
        server.cache.set_snapshot(None, config(81))  # type: ignore[attr-defined]
        await until(
            lambda: (
                {r.version for r in machine.holds(ENDPOINT).values()}
                == {r.version for r in (config(81).resources(ENDPOINT) or {}).values()}
            ),
            lambda: recorder.changed,
        )
        # Pushed by the write task; the ACK of the push makes nothing due.
        assert stream.counts() == (before[0] + 1, before[1])


async def test_established_pushes_take_free_slots_at_once() -> None:
    slots = PushSlots(1)
    order: list[str] = []

    queued: list[int] = []

    async def push(name: str) -> None:
        await slots.acquire(syncing=False)
        order.append(name)
        queued.append(slots.waiting)
        slots.release()  # a push that wrote without waiting

    async with anyio.create_task_group() as group:
        for name in ("a", "b", "c"):
            group.start_soon(push, name)
    assert order == ["a", "b", "c"]
    assert queued == [0, 0, 0]  # none queued for a slot: one slot served all three
    assert (slots.in_use, slots.waiting) == (0, 0)


async def test_a_free_slot_is_taken_without_yielding() -> None:
    slots = PushSlots(1)
    others_ran = anyio.Event()

    async def other() -> None:
        others_ran.set()

    async with anyio.create_task_group() as group:
        group.start_soon(other)
        await slots.acquire(syncing=False)  # ready before it: had this yielded, it ran
        assert not others_ran.is_set()
        slots.release()


async def test_syncing_streams_keep_their_slot_to_the_turn_end_and_queue_behind() -> None:
    slots = PushSlots(1)
    order: list[str] = []
    release = anyio.Event()

    async def sync(name: str) -> None:
        await slots.acquire(syncing=True)
        order.append(name)
        await release.wait()
        slots.release(at_turn_end=True)

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as group:
            group.start_soon(sync, "s1")
            group.start_soon(sync, "s2")
            while slots.waiting < 1:  # s2 waits for s1's slot
                await anyio.lowlevel.checkpoint()
            assert order == ["s1"]
            release.set()
    assert order == ["s1", "s2"]
    assert (slots.in_use, slots.waiting) == (0, 0)


async def test_an_established_push_never_waits_for_a_syncs_slot() -> None:
    slots = PushSlots(1)
    assert slots.try_acquire(syncing=True)
    slots.release(at_turn_end=True)  # the sync's slot comes back at the turn's end only
    assert not slots.try_acquire(syncing=True)
    # Its own pool: taken at once, in the same turn, without yielding.
    await slots.acquire(syncing=False)
    assert not slots.try_acquire(syncing=False)  # that pool's one slot is taken
    slots.release()
    assert slots.try_acquire(syncing=False)
    slots.release()
    await anyio.lowlevel.checkpoint()
    assert (slots.in_use, slots.waiting) == (0, 0)


async def test_a_loop_turn_runs_at_most_capacity_syncs() -> None:
    slots = PushSlots(2)
    assert slots.try_acquire(syncing=True)
    slots.release(at_turn_end=True)
    assert slots.try_acquire(syncing=True)
    slots.release(at_turn_end=True)
    # Both syncs of this turn gave their slots back, but not before the turn ends.
    assert not slots.try_acquire(syncing=True)
    assert slots.in_use == 2
    await anyio.lowlevel.checkpoint()
    assert slots.in_use == 0
    assert slots.try_acquire(syncing=True)
    slots.release()  # an established push's slot comes back at once
    assert slots.in_use == 0


async def test_a_slot_given_back_at_the_turn_end_goes_to_a_waiter() -> None:
    slots = PushSlots(1)
    assert slots.try_acquire(syncing=True)
    granted: list[str] = []

    async def wait(name: str) -> None:
        await slots.acquire(syncing=True)
        granted.append(name)
        slots.release(at_turn_end=True)

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as group:
            group.start_soon(wait, "first")
            group.start_soon(wait, "second")
            while slots.waiting < 2:
                await anyio.lowlevel.checkpoint()
            slots.release(at_turn_end=True)
            assert granted == []  # not within the turn
    assert granted == ["first", "second"]
    assert (slots.in_use, slots.waiting) == (0, 0)


async def test_try_acquire_never_waits_and_respects_who_goes_first() -> None:
    slots = PushSlots(1)
    assert slots.try_acquire(syncing=False)
    assert not slots.try_acquire(syncing=False)  # full
    waiter_started = anyio.Event()

    async def wait_established() -> None:
        waiter_started.set()
        await slots.acquire(syncing=False)
        slots.release()

    async with anyio.create_task_group() as group:
        group.start_soon(wait_established)
        await waiter_started.wait()
        await anyio.lowlevel.checkpoint()
        assert slots.waiting == 1
        slots.release()  # handed to the waiting push
        assert not slots.try_acquire(syncing=False)
    assert slots.try_acquire(syncing=False)
    assert PushSlots(0).try_acquire(syncing=True)  # no bound


async def test_a_ttl_resource_answered_at_once_still_gets_its_heartbeats() -> None:
    # The write task waits for the heartbeat time it last saw (none): a response with a TTL
    # written by the read task must tell it the new one.
    listener = make_resource(b.http_listener("l", 10000, "r"), ttl=0.3)
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, Snapshot([listener]))
    recorder = Recorder()
    server = XdsServer(cache, callbacks=recorder)
    client_end, server_end = byte_stream_pair(16)
    stream = AtOnceStream(server_end)
    node = make_node(id="ttl", client_features=(SUPPORTS_TTL,))
    client = ClientDriver(DeltaClient(node=node), client_end, follow=False)
    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: server.run_stream(stream, protocol="delta"))
            group.start_soon(client.run)
            await client.subscribe(LISTENER)
            await anyio.sleep(0.6)
            beats = [r for r in recorder.responses if isinstance(r, DeltaResponse) and r.heartbeat]
            assert stream.at_once  # the listener itself went out from the read task
            assert 3 <= len(beats) <= 8, len(beats)  # every 0.1 s, a third of the TTL
            group.cancel_scope.cancel()


async def test_without_a_storm_a_change_wakes_every_stream_at_once() -> None:
    slots = PushSlots(1)
    woken: list[int] = []
    for order in range(3 * WAKES_PER_TURN):
        slots.wake(lambda order=order: woken.append(order), order=order)
    assert woken == list(range(3 * WAKES_PER_TURN))
    assert slots.to_wake == 0


async def test_in_a_storm_a_change_wakes_a_share_a_turn_oldest_first() -> None:
    deferred: list[None] = []
    slots = PushSlots(1, on_deferred=lambda: deferred.append(None))
    assert slots.try_acquire(syncing=True)
    woken: list[int] = []

    def wake(order: int) -> None:
        slots.wake(lambda: woken.append(order), order=order)

    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(slots.acquire, syncing=True))  # a storm's sync waits
        while not slots.waiting:
            await anyio.lowlevel.checkpoint()
        # A change wakes streams in the order they were watched, the oldest first.
        for order in range(1, 3 * WAKES_PER_TURN + 1):
            wake(order)
        assert woken == list(range(1, WAKES_PER_TURN + 1))  # this turn's share
        assert slots.to_wake == 2 * WAKES_PER_TURN
        wake(10_000)  # the turn's share is used: a younger stream waits its turn...
        wake(0)  # ...and so does an older one, first in the next turn
        assert len(woken) == WAKES_PER_TURN
        await anyio.lowlevel.checkpoint()
        assert woken[WAKES_PER_TURN:] == [0, *range(WAKES_PER_TURN + 1, 2 * WAKES_PER_TURN)]
        wake(-1)  # older than every stream still to wake: ahead of them, at once
        assert woken[-1] == -1
        while slots.to_wake:
            await anyio.lowlevel.checkpoint()
        assert woken[-1] == 10_000
        assert sorted(woken) == [-1, *range(3 * WAKES_PER_TURN + 1), 10_000]
        assert len(deferred) == 2 * WAKES_PER_TURN + 2  # all but those woken ahead of the queue
        slots.release(at_turn_end=True)
