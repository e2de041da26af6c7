"""The load generator's lean HTTP/2 client (benchmarks/h2client.py) against real servers.

The benchmarks measure every server with it, so it must behave as an ordinary gRPC client
to each: here its fleet converges on, and follows a push from, both of xdscore's transports
(``GrpclibTransport`` runs h2's independent HTTP/2 implementation), SotW and Delta, just as
the grpcio client does; a response larger than the server's frames and windows arrives
whole; and a client whose connection is refused reconnects once the server is there.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from xdscore import GrpclibTransport, Http2Transport, XdsServer
from xdscore.testing import free_port

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from h2client import H2Call  # noqa: E402
from loadgen import Fleet  # noqa: E402
from xds_server import Workload  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CLUSTERS = 30
TransportKind = type[Http2Transport] | type[GrpclibTransport]


@asynccontextmanager
async def serving(
    kind: TransportKind, clusters: int = CLUSTERS, endpoints: int = 2, port: int = 0
) -> AsyncIterator[tuple[Workload, int]]:
    workload = Workload(clusters, endpoints)
    workload.push(clusters, endpoints, None)
    async with kind(XdsServer(workload.cache, metrics=False)) as transport:
        yield workload, await transport.start("127.0.0.1", port)


async def converge(fleet: Fleet) -> list[asyncio.Task[None]]:
    tasks = [asyncio.create_task(fleet.run_client(client)) for client in fleet.clients]
    async with asyncio.timeout(20):
        await fleet.all_converged.wait()
    return tasks


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("client", ["h2", "grpcio"])
@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
@pytest.mark.parametrize("kind", [Http2Transport, GrpclibTransport], ids=["http2", "grpclib"])
async def test_a_fleet_converges_and_follows_a_push(
    kind: TransportKind, delta: bool, client: str
) -> None:
    async with serving(kind) as (workload, port):
        fleet = Fleet(f"127.0.0.1:{port}", 5, CLUSTERS, delta, client=client)
        tasks = await converge(fleet)
        try:
            assert all(c.converged(CLUSTERS) for c in fleet.clients)
            assert not [c.error for c in fleet.clients if c.error]
            fleet.arm_push(3)
            workload.push(CLUSTERS, 2, 3)
            async with asyncio.timeout(10):
                await fleet.all_updated.wait()
            assert all(c.updated_at for c in fleet.clients)
            assert all(c.bytes > 0 for c in fleet.clients)
        finally:
            await stop(tasks)


async def test_a_response_larger_than_frames_and_windows_arrives_whole() -> None:
    """3,000 load assignments of 40 endpoints: an EDS response of several MB, split by the
    server into 16 KiB frames, past the 64 KiB windows a server starts with."""
    async with serving(Http2Transport, clusters=3_000, endpoints=40) as (_, port):
        fleet = Fleet(f"127.0.0.1:{port}", 2, 3_000, False)
        tasks = await converge(fleet)
        try:
            assert all(c.bytes > 3_000 * 40 * 20 for c in fleet.clients)
        finally:
            await stop(tasks)


async def test_a_refused_client_reconnects_once_the_server_listens() -> None:
    port = free_port()
    fleet = Fleet(f"127.0.0.1:{port}", 3, CLUSTERS, False)
    tasks = [asyncio.create_task(fleet.run_client(client)) for client in fleet.clients]
    try:
        await asyncio.sleep(0.3)  # connections refused meanwhile
        async with serving(Http2Transport, port=port):
            async with asyncio.timeout(20):
                await fleet.all_converged.wait()
        assert all(c.reconnects >= 1 for c in fleet.clients)
        assert not [c.error for c in fleet.clients if c.error]
    finally:
        await stop(tasks)


@pytest.mark.parametrize("cut", [1, 2, 3, 4, 5, 6, 7, 11, 1000])
def test_messages_split_anywhere_are_read_whole(cut: int) -> None:
    """Messages (an empty one among them) arriving in DATA payloads cut every ``cut``
    bytes, so that prefixes and bodies straddle frames, come out whole and in order."""
    bodies = [b"a" * 10, b"", b"b" * 3, bytes(range(256)) * 4]
    stream = b"".join(b"\x00" + len(b).to_bytes(4, "big") + b for b in bodies)
    call = H2Call("127.0.0.1:1", "/x")
    out: list[bytes] = []
    data = memoryview(stream)
    for start in range(0, len(stream), cut):
        call._data(data[start : start + cut], out)
    assert list(call._messages) == bodies
    assert call.received_bytes == sum(map(len, bodies))
