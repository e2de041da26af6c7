"""Http2Transport on uvloop's event loop, which embedders often run (and ``xdscore serve``
where it is installed): its transports are not subclasses of asyncio's (the transport used
to assert they were, and failed every connection), and refuse a write once closed. A SotW
exchange, a response larger than the client's window, a stop, and clients that leave with
answers queued."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from ..factories import wait_until
from ._h2_peer import Peer
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


def test_clients_that_leave_with_answers_queued_log_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client that sends its request and drops the connection at once (a TCP reset, as
    when Envoy restarts): its answers are queued when the connection goes. uvloop refuses a
    write on a closed transport where asyncio drops it, and the flush used to write anyway:
    "Exception in callback Connection.flush" and a traceback, for nearly every such client."""

    async def leaving() -> None:
        async with serving() as served:
            for _ in range(20):
                peer = await Peer.connect(served.port)
                stream = await peer.open(ADS)
                await peer.send_message(stream, cds_request())
                sock = peer._writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                peer.abort()
                await asyncio.sleep(0.02)
            await wait_until(lambda: not served.transport._connections, what="all gone")

    with caplog.at_level(logging.ERROR):
        _on_uvloop(leaving)
    assert not caplog.records, caplog.text[:2000]


class _ClosedTransport:
    """A transport the client has left: uvloop's raises on a write then."""

    def is_closing(self) -> bool:
        return True

    def write(self, data: bytes) -> None:
        raise RuntimeError("unable to perform operation on a closed transport")


def test_a_flush_after_the_client_left_writes_nothing() -> None:
    async def flushing() -> None:
        async with serving() as served, client(served.port) as peer:
            await peer.open(ADS)
            connection = served.connection()
            await wait_until(lambda: connection.calls, what="the call")
            real = connection._transport
            connection._transport = _ClosedTransport()  # type: ignore[assignment]
            try:
                connection.queue(b"frames owed")
                connection.flush()  # raised RuntimeError
            finally:
                connection._transport = real

    _on_uvloop(flushing)
