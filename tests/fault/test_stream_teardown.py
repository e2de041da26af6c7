"""A stream that ends leaves none of its state for the cycle collector.

A busy server rarely runs a full collection, so whatever an ended stream leaves in a
reference cycle stays in memory for a long time: before these tests, every stream a client
reset kept its driver, its state machine and the last response it held (grpclib and anyio
keep the exception that ended it in a cycle, and its traceback held the stream's frames;
grpclib's own stream stayed in the cycle of the error it raised),
which the soak benchmark saw as RSS growing with stream churn. Each test runs with the
collector off and counts the runtime's per-stream objects still alive after the streams end.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import anyio
import grpclib.protocol
import pytest

from xdscore.protocol import DeltaServer, SotwServer
from xdscore.server import ServerDriver
from xdscore.transport.h2.call import Call

from ._clients import (
    ADS,
    DELTA_ADS,
    ON_BOTH_TRANSPORTS,
    Plane,
    TransportKind,
    channel,
    control_plane,
    delta_request,
    eventually,
    request,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(60),
    ON_BOTH_TRANSPORTS,
]

STREAMS = 20


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


OURS = (ServerDriver, SotwServer, DeltaServer, Call)


def left_behind() -> dict[str, int]:
    """Drivers, server machines and calls still alive, and what of them and of grpclib's streams
    only a collection would free (what is in reference cycles)."""
    alive = _alive()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
    finally:
        gc.set_debug(0)
    kinds = (*OURS, grpclib.protocol.Stream)
    cyclic = sum(1 for o in gc.garbage if isinstance(o, kinds))
    gc.garbage.clear()
    return {"alive": alive, "in cycles": cyclic}


def _alive() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, OURS))


async def settled(plane: Plane) -> None:
    """Every stream ended and its handler finished (what a cycle keeps never goes: the
    assertion that follows says how much)."""
    await eventually(lambda: plane.active() == 0)
    with contextlib.suppress(TimeoutError):
        await eventually(lambda: _alive() == 0)
    await anyio.sleep(0.02)  # grpclib's done callbacks, after its handler tasks end


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
async def test_streams_the_client_resets_leave_nothing_behind(
    no_collector: None, delta: bool, transport_kind: TransportKind
) -> None:
    async with control_plane(transport_kind=transport_kind) as plane:
        for index in range(STREAMS):
            async with channel(plane.target) as connection:
                call = connection.open(DELTA_ADS if delta else ADS, delta=delta)
                node_id = f"churned-{index}"
                await call.send(
                    delta_request(node_id=node_id) if delta else request(node_id=node_id)
                )
                await call.recv()
                call.cancel()  # RST_STREAM, then the connection closes
        await settled(plane)
        assert left_behind() == {"alive": 0, "in cycles": 0}


async def test_streams_whose_connection_drops_leave_nothing_behind(
    no_collector: None, transport_kind: TransportKind
) -> None:
    async with control_plane(transport_kind=transport_kind) as plane:
        for index in range(STREAMS):
            async with channel(plane.target) as connection:
                call = connection.open(ADS)
                await call.send(request(node_id=f"dropped-{index}"))
                await call.recv()
            # leaving the block closes the channel with the call still open
        await settled(plane)
        assert left_behind() == {"alive": 0, "in cycles": 0}


async def test_streams_ended_by_a_protocol_error_leave_nothing_behind(
    no_collector: None, transport_kind: TransportKind
) -> None:
    async with control_plane(transport_kind=transport_kind) as plane:
        for _ in range(STREAMS):
            async with channel(plane.target) as connection:
                call = connection.open(ADS)
                await call.send(b"\xff not a request")
                await call.failure()
        await settled(plane)
        assert left_behind() == {"alive": 0, "in cycles": 0}
