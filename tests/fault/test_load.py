"""Protection under load, against a real server on loopback: every test asserts a figure.

A storm of new streams is shed with RESOURCE_EXHAUSTED and a retry hint, every client
converges after retrying, and established clients keep their push latency; a stream that
never sends a request is ended at its deadline; clients that stop reading pin no backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import statistics
import time
from pathlib import Path

import anyio
import anyio.to_thread
import grpc
import pytest
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import CLUSTER, ENDPOINT, LISTENER
from xdscore.protocol import SotwClient
from xdscore.server import ClientDriver, ServerLimits
from xdscore.wire import make_node

from ._clients import (
    ADS,
    UNLIMITED,
    Failure,
    HealthyClient,
    Plane,
    ack,
    bench_server,
    channel,
    control_plane,
    eventually,
    healthy_client,
    request,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

_RETRY = re.compile(r"retry after ([0-9.]+) s")


async def _storm_client(
    plane: Plane, index: int, outcome: dict[str, list[float]], stack: contextlib.AsyncExitStack
) -> None:
    """Open a stream, take the snapshot, ACK it; on RESOURCE_EXHAUSTED wait the hint and
    try again. Records refusals and the time it converged; the stream stays open."""
    started = time.monotonic()
    chan = await stack.enter_async_context(channel(plane.target))
    if True:
        while True:
            call = chan.open(ADS)
            await call.send(request(CLUSTER, node_id=f"storm-{index}"))
            item = await call.next(timeout=30)
            if isinstance(item, Failure):
                assert item.code == grpc.StatusCode.RESOURCE_EXHAUSTED, item
                hint = _RETRY.search(item.details)
                assert hint is not None, item.details
                outcome["refused"].append(float(hint.group(1)))
                await anyio.sleep(min(float(hint.group(1)), 2.0))
                continue
            response = discovery_pb2.DiscoveryResponse.FromString(item)
            await call.send(ack(response))
            outcome["converged"].append(time.monotonic() - started)
            return


async def test_a_storm_is_shed_and_every_client_converges_after_retrying() -> None:
    bounds = ServerLimits(max_initial_syncs=20, new_streams_burst=60, new_streams_per_second=150)
    async with control_plane(server_limits=bounds) as plane, contextlib.AsyncExitStack() as stack:
        established: list[HealthyClient] = [
            await stack.enter_async_context(healthy_client(plane, f"established-{i}"))
            for i in range(10)
        ]
        outcome: dict[str, list[float]] = {"refused": [], "converged": []}
        latencies: list[float] = []
        async with anyio.create_task_group() as group:
            for index in range(200):
                group.start_soon(_storm_client, plane, index, outcome, stack)
            # Pushes to established clients while the storm goes on.
            for _ in range(5):
                generation = plane.publish()
                for client in established:
                    latencies.append(await client.reached(generation, timeout=5))
        await eventually(lambda: plane.server.syncing == 0)
    assert len(outcome["converged"]) == 200
    assert outcome["refused"], "the storm was not shed at all"
    assert all(0.0 < hint <= 4.0 for hint in outcome["refused"])
    assert max(latencies) < 1.0, latencies
    assert plane.server.metrics is not None
    refused = sum(
        plane.server.metrics.registry.get_sample_value(
            "xdscore_refused_streams_total", {"reason": reason}
        )
        or 0.0
        for reason in ("initial_syncs", "rate")
    )
    assert refused == len(outcome["refused"])


async def test_a_stream_that_sends_nothing_is_ended_at_its_deadline() -> None:
    bounds = ServerLimits(first_request_timeout=0.5)
    async with control_plane(server_limits=bounds) as plane, healthy_client(plane) as healthy:
        async with channel(plane.target) as chan:
            silent = chan.open(ADS)
            started = time.monotonic()
            await silent.call.wait_for_connection()
            failure = await silent.failure(timeout=5)
            took = time.monotonic() - started
        assert failure.code == grpc.StatusCode.DEADLINE_EXCEEDED, failure
        assert "no request within 0.5 s" in failure.details
        assert 0.4 < took < 2.0, took
        assert plane.active() == 1  # only the healthy client is left
        await healthy.still_served()


class _Stream:
    """A grpcio stream as a byte stream for the client driver."""

    def __init__(self, call: grpc.aio.StreamStreamCall) -> None:  # type: ignore[type-arg]
        self._call = call

    async def receive(self) -> bytes | None:
        data = await self._call.read()
        return None if data is grpc.aio.EOF else bytes(data)

    async def send(self, data: bytes) -> None:
        await self._call.write(data)


async def test_clients_that_stop_reading_pin_no_backlog() -> None:
    with bench_server(clusters=1000) as bench:
        channels = [grpc.aio.insecure_channel(bench.target, options=UNLIMITED) for _ in range(4)]
        try:
            stalled = []
            for index, chan in enumerate(channels[:3]):
                call = chan.stream_stream(ADS)()
                await call.write(request(CLUSTER, node_id=f"stalled-{index}").SerializeToString())
                names = [f"c_{i:05d}" for i in range(1000)]
                await call.write(request(ENDPOINT, names).SerializeToString())
                stalled.append(call)  # never read: the window fills and the server waits
            machine = SotwClient(node=make_node(id="healthy"))
            versions: list[str] = []
            arrived = asyncio.Event()

            def seen(response: object, _: object) -> None:
                if getattr(response, "type_url", "") == ENDPOINT:
                    versions.append(response.version_info)  # type: ignore[attr-defined]
                    arrived.set()

            call = channels[3].stream_stream(ADS)()
            driver = ClientDriver(machine, _Stream(call), on_response=seen)
            latencies = []
            async with anyio.create_task_group() as group:
                group.start_soon(driver.run)
                await driver.watch(CLUSTER, None)
                await driver.watch(LISTENER, None)
                with anyio.fail_after(20):
                    while len(machine.holds(ENDPOINT)) < 1000:
                        arrived.clear()
                        await arrived.wait()
                rss = []
                for push in range(30):
                    before = len(versions)
                    started = time.monotonic()
                    await anyio.to_thread.run_sync(bench.push)
                    with anyio.fail_after(5):
                        while len(versions) == before:
                            arrived.clear()
                            await arrived.wait()
                    latencies.append(time.monotonic() - started)
                    if push in (4, 29):
                        rss.append(bench.rss_mb())
                group.cancel_scope.cancel()
            for each in stalled:
                each.cancel()
            call.cancel()
        finally:
            for chan in channels:
                await chan.close()
    growth = rss[1] - rss[0]
    assert growth < 20, f"RSS grew {growth:.1f} MB from push 5 to push 30 ({rss})"
    assert statistics.median(latencies) < 0.5, latencies
    assert max(latencies) < 1.5, latencies


def test_the_admission_bounds_show_in_the_limits_page() -> None:
    """The defaults the docs state are the code's."""
    page = (Path(__file__).parents[2] / "docs" / "limits.md").read_text()
    defaults = ServerLimits()
    assert f"| `max_streams` | {defaults.max_streams:,} |" in page
    assert f"| `max_initial_syncs` | {defaults.max_initial_syncs:,} |" in page
    assert f"| `max_sync_seconds` | {defaults.max_sync_seconds:g} s |" in page
    assert f"| `push_concurrency` | {defaults.push_concurrency} |" in page
