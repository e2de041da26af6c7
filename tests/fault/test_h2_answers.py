"""What Http2Transport answers by itself, against a real server on loopback: requests that
are not xDS calls, a call's own deadline, the bound on open streams, DATA after the client
ended its side, and connections that break HTTP/2 (docs/errors.md, "What Http2Transport
answers itself"; docs/limits.md, "Http2Transport's own bounds").

The clients speak HTTP/2 by hand with ``h2`` on a plain socket, and write raw frames where
``h2`` would refuse to send them. A healthy client on a connection of its own must be
served throughout, no ERROR may be logged, and no refusal counts as a cut connection.
"""

from __future__ import annotations

import socket
import struct
import time

import anyio
import anyio.to_thread
import attrs
import h2.events
import pytest
from h2.errors import ErrorCodes
from hpack import Encoder

from xdscore import CLUSTER, Http2Transport

from ._clients import ADS, Plane, control_plane, eventually, healthy_client, request
from .test_bad_clients import _grpc_settled, _no_errors_logged  # noqa: F401  (autouse)
from .test_transport_abuse import RawH2, cuts, grpc_headers

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

HEADERS, DATA, CONTINUATION = 1, 0, 9
END_STREAM, END_HEADERS = 0x1, 0x4


def raw_frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    """One HTTP/2 frame, written by hand (RFC 9113 section 4.1)."""
    return len(payload).to_bytes(3, "big") + struct.pack(">BBL", kind, flags, stream_id) + payload


@attrs.define
class Answer:
    """What the server sent back on one stream, and whether it cut the connection."""

    headers: dict[bytes, bytes] = attrs.field(factory=dict)
    """The response headers and trailers, together."""
    ended: bool = False
    reset: int | None = None
    goaway: h2.events.ConnectionTerminated | None = None
    seconds: float = 0.0
    """From the request to the end of the stream (or of the wait)."""


def read_answer(client: RawH2, stream_id: int, started: float, timeout: float) -> Answer:
    """Read until ``stream_id`` ends, is reset or the connection goes; answer what came."""
    answer = Answer()
    deadline = started + timeout
    while time.monotonic() < deadline and not (answer.ended or answer.reset is not None):
        for event in client.pump(0.05):
            on_stream = getattr(event, "stream_id", None) == stream_id
            if not on_stream:
                continue
            if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                answer.headers.update(dict(event.headers))
            elif isinstance(event, h2.events.StreamEnded):
                answer.ended = True
            elif isinstance(event, h2.events.StreamReset):
                answer.reset = int(event.error_code or 0)
        if client.goaway is not None or client.eof:
            break
    answer.goaway = client.goaway
    answer.seconds = time.monotonic() - started
    return answer


def one_call(port: int, headers: list[tuple[str, str]], timeout: float = 3.0) -> Answer:
    """Open one stream with ``headers``, its side ended at once unless it carries a
    ``grpc-timeout`` (then it stays open and sends nothing); return the server's answer."""
    client = RawH2(port)
    try:
        stream_id = client.conn.get_next_available_stream_id()
        waits = any(name == "grpc-timeout" for name, _ in headers)
        client.conn.send_headers(stream_id, headers, end_stream=not waits)
        started = time.monotonic()
        client.flush()
        return read_answer(client, stream_id, started, timeout)
    finally:
        client.close()


def replaced(port: int, changes: dict[str, str]) -> list[tuple[str, str]]:
    """The headers of a gRPC call to ADS with some fields replaced."""
    return list({**dict(grpc_headers(port, ADS)), **changes}.items())


def transport(plane: Plane) -> Http2Transport:
    assert isinstance(plane.transport, Http2Transport)
    return plane.transport


@pytest.mark.parametrize(
    ("changes", "status", "grpc_status", "message"),
    [
        (
            {":path": "/acme.v1.Things/List"},
            b"200",
            b"12",
            b"method /acme.v1.Things/List not implemented",
        ),
        ({":method": "GET"}, b"405", None, None),
        ({"content-type": "text/plain"}, b"415", None, None),
    ],
    ids=["unknown_method", "not_post", "not_grpc"],
)
async def test_a_request_that_is_not_an_xds_call_is_answered_at_once(
    changes: dict[str, str], status: bytes, grpc_status: bytes | None, message: bytes | None
) -> None:
    async with control_plane() as plane, healthy_client(plane) as healthy:
        opened = len(plane.recorder.opened)
        answer = await anyio.to_thread.run_sync(one_call, plane.port, replaced(plane.port, changes))
        assert answer.ended, answer
        assert answer.headers.get(b":status") == status, answer
        assert answer.headers.get(b"grpc-status") == grpc_status, answer
        assert answer.headers.get(b"grpc-message") == message, answer
        assert answer.goaway is None, answer
        assert answer.seconds < 1.0, answer
        assert len(plane.recorder.opened) == opened  # the runtime never saw it
        assert sum(cuts(plane).values()) == 0
        await healthy.still_served()


async def test_a_calls_grpc_timeout_ends_it_with_deadline_exceeded() -> None:
    async with control_plane() as plane, healthy_client(plane) as healthy:
        headers = [*grpc_headers(plane.port, ADS), ("grpc-timeout", "300m")]
        answer = await anyio.to_thread.run_sync(one_call, plane.port, headers)
        assert answer.ended, answer
        assert answer.headers.get(b"grpc-status") == b"4", answer
        assert answer.headers.get(b"grpc-message") == b"the call's deadline passed", answer
        assert 0.29 <= answer.seconds < 1.5, answer.seconds
        await eventually(lambda: plane.active() == 1)
        await healthy.still_served()


def open_streams(client: RawH2, count: int) -> list[int]:
    ids = [client.open_stream() for _ in range(count)]
    client.flush()
    return ids


def resets(client: RawH2, seconds: float) -> dict[int, int]:
    """The streams the server reset within ``seconds``, with their error codes."""
    found: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for event in client.pump(0.05):
            if isinstance(event, h2.events.StreamReset):
                found[event.stream_id] = int(event.error_code or 0)
    return found


async def test_the_stream_past_the_hundredth_is_refused() -> None:
    async with control_plane() as plane, healthy_client(plane) as healthy:
        client = await anyio.to_thread.run_sync(RawH2, plane.port)
        try:
            # Written before the server's SETTINGS are read: the client's h2 does not
            # know the bound yet, so it sends the 101st.
            ids = await anyio.to_thread.run_sync(open_streams, client, 101)
            refused = await anyio.to_thread.run_sync(resets, client, 1.0)
            assert refused == {ids[-1]: ErrorCodes.REFUSED_STREAM}, refused
            assert client.goaway is None
            # What the server announced: the bounds docs/limits.md gives.
            announced = client.conn.remote_settings
            assert announced.max_concurrent_streams == 100
            assert announced.initial_window_size == 1 << 20
            assert announced.max_header_list_size == 64 * 1024
            assert client.conn.outbound_flow_control_window == 16 << 20
            await eventually(lambda: plane.active() == 101)
            calls = sorted(len(each.calls) for each in transport(plane)._connections)
            assert calls == [1, 100], calls
            # One stream ends: there is room for one more, and only one.
            client.conn.reset_stream(ids[0])
            (again,) = await anyio.to_thread.run_sync(open_streams, client, 1)
            assert await anyio.to_thread.run_sync(resets, client, 0.5) == {}
            await eventually(lambda: plane.active() == 101)
            assert again > ids[-1]
            await healthy.still_served()
        finally:
            client.close()
        await eventually(lambda: plane.active() == 1)
        assert sum(cuts(plane).values()) == 0


def data_after_end(client: RawH2, port: int) -> int:
    """An ADS request, then the client's side ended (a stream with no request at all is
    ended by the server at once)."""
    stream_id = client.conn.get_next_available_stream_id()
    client.conn.send_headers(stream_id, grpc_headers(port, ADS))
    message = request(CLUSTER, node_id="half-closed").SerializeToString()
    framed = b"\x00" + len(message).to_bytes(4, "big") + message
    client.conn.send_data(stream_id, framed, end_stream=True)
    client.flush()
    return stream_id


async def test_data_after_the_client_ended_its_side_resets_the_stream() -> None:
    async with control_plane() as plane, healthy_client(plane) as healthy:
        before = set(plane.recorder.opened)
        client = await anyio.to_thread.run_sync(RawH2, plane.port)
        try:
            stream_id = await anyio.to_thread.run_sync(data_after_end, client, plane.port)
            await eventually(lambda: plane.active() == 2)
            (runtime_id,) = set(plane.recorder.opened) - before
            # Half-closed, the stream is still served (the server pushes until the client
            # goes): h2 would refuse to send DATA on it, so the frame is written by hand.
            client.sock.sendall(raw_frame(DATA, 0, stream_id, b"\x00" * 5))
            got = await anyio.to_thread.run_sync(resets, client, 1.0)
            assert got == {stream_id: ErrorCodes.STREAM_CLOSED}, got
            await eventually(lambda: plane.active() == 1)
            assert plane.recorder.closed[runtime_id] is None  # as if the client reset it
            assert client.goaway is None
            await healthy.still_served()
        finally:
            client.close()


BIG = bytes(16_000)


def header_list_of(size: int) -> bytes:
    """A small header block that decodes to more than ``size`` bytes: one large field,
    indexed once and then repeated by reference."""
    field = ("x-big", "a" * 3_000)
    fields = [*grpc_headers(1, ADS), *[field] * (size // 3_000 + 1)]
    return Encoder().encode(fields)


CONNECTION_ERRORS = {
    "frame_too_large": (
        raw_frame(DATA, 0, 1, bytes(20_000)),
        ErrorCodes.FRAME_SIZE_ERROR,
        b"frame too large",
    ),
    "header_block_too_large": (
        raw_frame(HEADERS, 0, 1, BIG)
        + b"".join(raw_frame(CONTINUATION, 0, 1, BIG) for _ in range(4)),
        ErrorCodes.ENHANCE_YOUR_CALM,
        b"header block too large",
    ),
    "undecodable_header_block": (
        raw_frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\xff\xff\xff\xff"),
        ErrorCodes.COMPRESSION_ERROR,
        b"",
    ),
    "header_list_too_large": (
        raw_frame(HEADERS, END_HEADERS | END_STREAM, 1, header_list_of(64 * 1024)),
        ErrorCodes.COMPRESSION_ERROR,
        b"A header list larger",
    ),
    "data_on_stream_0": (
        raw_frame(DATA, 0, 0, b"x"),
        ErrorCodes.PROTOCOL_ERROR,
        b"DATA on stream 0",
    ),
}


def break_http2(port: int, frames: bytes) -> Answer:
    client = RawH2(port)
    try:
        client.sock.sendall(frames)
        return read_answer(client, 1, time.monotonic(), timeout=3.0)
    finally:
        client.close()


@pytest.mark.parametrize("case", CONNECTION_ERRORS)
async def test_a_connection_that_breaks_http2_gets_goaway(case: str) -> None:
    frames, code, debug = CONNECTION_ERRORS[case]
    async with control_plane() as plane, healthy_client(plane) as healthy:
        opened = len(plane.recorder.opened)
        answer = await anyio.to_thread.run_sync(break_http2, plane.port, frames)
        assert answer.goaway is not None, answer
        assert answer.goaway.error_code == code, answer.goaway
        assert (answer.goaway.additional_data or b"").startswith(debug), answer.goaway
        assert len(plane.recorder.opened) == opened
        assert sum(cuts(plane).values()) == 0  # a broken connection is not a flood
        await eventually(lambda: sorted(len(c.calls) for c in transport(plane)._connections) == [1])
        await healthy.still_served()


def speak_http11(port: int) -> bytes:
    """An HTTP/1.1 request; everything the server sends until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        received = b""
        while chunk := sock.recv(65_536):
            received += chunk
        return received


def goaways(data: bytes) -> list[tuple[int, bytes]]:
    """The (error code, debug data) of each GOAWAY frame in ``data``."""
    found = []
    at = 0
    while at + 9 <= len(data):
        size = int.from_bytes(data[at : at + 3], "big")
        payload = data[at + 9 : at + 9 + size]
        if data[at + 3] == 7:
            found.append((int.from_bytes(payload[4:8], "big"), payload[8:]))
        at += 9 + size
    return found


async def test_an_http11_client_gets_goaway_protocol_error() -> None:
    async with control_plane() as plane, healthy_client(plane) as healthy:
        received = await anyio.to_thread.run_sync(speak_http11, plane.port)
        assert goaways(received) == [(ErrorCodes.PROTOCOL_ERROR, b"not HTTP/2")], received
        assert b"HTTP/1.1" not in received
        await healthy.still_served()
