"""Http2Transport on uvloop's event loop, which embedders often run: its transports are not
subclasses of asyncio's (the transport used to assert they were, and failed every
connection). A SotW exchange, a response larger than the client's window, and a stop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from .test_http2_transport import (
    ADS,
    OK,
    _complete,
    _granted,
    cds_request,
    client,
    cluster_names,
    large_responses,
    serving,
    sotw,
)

pytestmark = pytest.mark.timeout(30)


def _on_uvloop(test: Callable[[], Awaitable[None]]) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)
        runner.run(test())


def test_an_exchange_and_a_stop_on_uvloop() -> None:
    async def exchange() -> None:
        async with serving() as served, client(served.port) as peer:
            stream = await peer.open(ADS)
            await peer.send_message(stream, cds_request())
            await peer.until(lambda p: _complete(p, stream), what="the response")
            (response,) = map(sotw, peer.responses(stream))
            assert cluster_names(response) == [
                "cluster-00000",
                "cluster-00001",
                "cluster-00002",
            ]
            ack = cds_request(
                None, version_info=response.version_info, response_nonce=response.nonce
            )
            await peer.send_message(stream, ack)
            stopping = asyncio.create_task(served.transport.stop())
            await peer.until(lambda p: p.status(stream) is not None, what="the trailers")
            peer.h2.reset_stream(stream)  # as gRPC's client answers trailers
            await peer.flush()
            await peer.closed(timeout=2)
            await stopping
            assert peer.status(stream) == (OK, "")
            assert served.recorder.requests == 2

    _on_uvloop(exchange)


def test_a_response_larger_than_the_window_on_uvloop() -> None:
    async def windowed() -> None:
        async with large_responses(1000) as (_, peer, [stream]):
            await _granted(peer, stream, 1000)
            peer.h2.increment_flow_control_window(100_000, stream_id=stream)
            peer.h2.increment_flow_control_window(100_000)
            await peer.flush()
            await peer.until(lambda p: _complete(p, stream), what="the whole response")

    _on_uvloop(windowed)
