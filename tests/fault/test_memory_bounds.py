"""Memory a hostile client leaves behind, measured from outside once its streams closed.

Each test runs the benchmark server in a process of its own (as ``xdscore serve`` runs:
uvloop where installed, the collector tuned), sends it what a hostile or careless client
would, closes the streams, and reads the server's RSS from ``/proc``: what it keeps after
the streams that caused it are gone must come back to within a few MB of where it was.
The clients are grpcio's (a stack the project did not write).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import CLUSTER, ENDPOINT
from xdscore.server._trim import TRIM_DELAY

from ._clients import ADS, UNLIMITED, BenchServer, bench_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

SETTLE = TRIM_DELAY + 1.5
"""Seconds after the last stream closed before the server's RSS is read."""


async def _stream(target: str, request: discovery_pb2.DiscoveryRequest) -> grpc.StatusCode:
    """One stream on a connection of its own: ``request``, its answer ACKed, then closed;
    the status it ended with (OK: answered)."""
    async with grpc.aio.insecure_channel(target, options=UNLIMITED) as channel:
        call = channel.stream_stream(ADS)()
        await call.write(request.SerializeToString())
        try:
            data = await asyncio.wait_for(call.read(), 30)
        except grpc.aio.AioRpcError as error:
            return error.code()
        assert data is not grpc.aio.EOF
        answer = discovery_pb2.DiscoveryResponse.FromString(data)
        ack = discovery_pb2.DiscoveryRequest(
            type_url=request.type_url,
            version_info=answer.version_info,
            response_nonce=answer.nonce,
            resource_names=request.resource_names,
        )
        await call.write(ack.SerializeToString())
        await asyncio.sleep(0.2)
        call.cancel()
        return grpc.StatusCode.OK


async def _settled_rss(server: BenchServer) -> float:
    await asyncio.sleep(SETTLE)
    return server.rss_mb()


async def _baseline(server: BenchServer) -> float:
    """The server's RSS once it has served a small stream (a first stream's one-time
    costs, imports and all, are not what is measured)."""
    small = discovery_pb2.DiscoveryRequest(node=base_pb2.Node(id="warm"), type_url=CLUSTER)
    assert await _stream(server.target, small) == grpc.StatusCode.OK
    return await _settled_rss(server)


def _big_node(index: int, megabytes: int = 10) -> base_pb2.Node:
    """A node with ``megabytes`` of metadata in many small entries, unlike any other."""
    node = base_pb2.Node(id=f"heavy-{index}", cluster="heavy")
    fields = node.metadata.fields
    for key in range(megabytes * 10_000):
        fields[f"k{index}-{key}"].string_value = "x" * 90
    return node


@pytest.mark.parametrize("transport", ["http2", "grpclib"])
async def test_twenty_distinct_ten_megabyte_nodes_leave_nothing_behind(transport: str) -> None:
    with bench_server(clusters=100, transport=transport) as server:
        before = await _baseline(server)
        for index in range(20):
            request = discovery_pb2.DiscoveryRequest(node=_big_node(index), type_url=CLUSTER)
            assert request.ByteSize() > 10_000_000
            assert await _stream(server.target, request) == grpc.StatusCode.OK
        after = await _settled_rss(server)
    assert after - before < 10, f"{before:.1f} MB before, {after:.1f} MB after"


def _names(prefix: str, count: int) -> Sequence[str]:
    return [f"{prefix}-name-{index:06d}" for index in range(count)]


@pytest.mark.parametrize("transport", ["http2", "grpclib"])
async def test_batches_of_large_subscriptions_leave_nothing_behind(transport: str) -> None:
    with bench_server(clusters=100, transport=transport) as server:
        before = await _baseline(server)
        for batch in range(3):
            requests = [
                discovery_pb2.DiscoveryRequest(
                    node=base_pb2.Node(id=f"wide-{batch}-{index}"),
                    type_url=ENDPOINT,
                    resource_names=_names(f"b{batch}-s{index}", 100_000),
                )
                for index in range(10)
            ]
            statuses = await asyncio.gather(*(_stream(server.target, r) for r in requests))
            assert set(statuses) == {grpc.StatusCode.OK}
            after = await _settled_rss(server)
            assert after - before < 10, f"batch {batch}: {before:.1f} MB before, {after:.1f} after"


async def test_a_request_over_the_name_limit_is_refused_before_it_costs_memory() -> None:
    with bench_server(clusters=100) as server:
        await _baseline(server)
        server.reset_peak()
        before = server.peak_mb()
        request = discovery_pb2.DiscoveryRequest(
            node=base_pb2.Node(id="greedy"),
            type_url=ENDPOINT,
            resource_names=_names("huge", 1_000_000),
        )
        size_mb = request.ByteSize() / 1e6
        assert await _stream(server.target, request) == grpc.StatusCode.RESOURCE_EXHAUSTED
        grew = server.peak_mb() - before
    # The request's bytes are read (and the transport's buffers), never 1,000,000 names.
    assert grew < 2 * size_mb + 10, f"peak grew {grew:.1f} MB for a {size_mb:.1f} MB request"


@pytest.mark.parametrize("transport", ["http2", "grpclib"])
async def test_streams_that_come_and_go_leave_under_two_kilobytes_each(transport: str) -> None:
    streams = 1500
    with bench_server(clusters=100, transport=transport) as server:
        before = await _baseline(server)
        started = time.monotonic()
        for batch in range(streams // 50):
            requests = [
                discovery_pb2.DiscoveryRequest(
                    node=base_pb2.Node(id=f"churn-{batch}-{index}"), type_url=CLUSTER
                )
                for index in range(50)
            ]
            statuses = await asyncio.gather(*(_stream(server.target, r) for r in requests))
            assert set(statuses) == {grpc.StatusCode.OK}
        assert time.monotonic() - started < 150
        after = await _settled_rss(server)
    kept_kb = (after - before) * 1024 / streams
    said = f"{kept_kb:.2f} KB per closed stream ({before:.1f} -> {after:.1f} MB)"
    print(f"{transport}: {streams} streams closed, {said}")
    assert kept_kb < 2, said
