"""Requests RFC 9113 calls malformed, and frames of unknown types, on both transports.

A malformed request (section 8.1.1: a field name with an uppercase letter, a
connection-specific field, ``te`` other than ``trailers``, a pseudo-header missing,
repeated, unknown or after a regular field) is a stream error PROTOCOL_ERROR: its stream is
reset, no handler sees it, and the connection goes on serving. A frame of an unknown type
is ignored (sections 4.1 and 5.5). On GrpclibTransport, grpclib used to serve malformed
requests (or, without ``:method``, log a ``KeyError`` traceback and never answer) and h2's
event for an unknown frame raised in grpclib, cutting the connection with an ERROR
traceback. Nothing here may be logged at ERROR or with a traceback, by any logger.

The client is ``h2``'s, told not to check or normalise what it sends.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import time
from collections.abc import Callable

import anyio
import anyio.to_thread
import h2.config
import h2.connection
import h2.events
import pytest
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import Http2Transport

from ._clients import ADS, ON_BOTH_TRANSPORTS, TransportKind, control_plane, request

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), ON_BOTH_TRANSPORTS]

PROTOCOL_ERROR = 1


def good_headers(port: int) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", ADS),
        (":authority", f"127.0.0.1:{port}"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]


class Client:
    """One HTTP/2 connection on a blocking socket that sends whatever headers it is given."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        config = h2.config.H2Configuration(
            client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False
        )
        self.conn = h2.connection.H2Connection(config)
        self.conn.initiate_connection()
        self.events: list[h2.events.Event] = []
        self.flush()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        with contextlib.suppress(OSError):  # a server that has closed the connection
            self.sock.sendall(data)

    def until(self, condition: type[h2.events.Event], stream_id: int, timeout: float = 5) -> None:
        """Read until an event of ``condition`` on ``stream_id`` (or on the connection)."""
        deadline = time.monotonic() + timeout
        while not any(
            isinstance(event, condition) and getattr(event, "stream_id", stream_id) == stream_id
            for event in self.events
        ):
            assert not any(isinstance(e, h2.events.ConnectionTerminated) for e in self.events), (
                self.events
            )
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {condition.__name__} on stream {stream_id}: {self.events}"
            self.sock.settimeout(remaining)
            data = self.sock.recv(1 << 16)
            assert data, f"the server closed the connection: {self.events}"
            self.events += self.conn.receive_data(data)
            self.flush()

    def served(self) -> None:
        """An ADS call on a new stream of this connection gets its response."""
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, good_headers(self.port))
        message = request(node_id="after").SerializeToString()
        self.conn.send_data(stream_id, b"\x00" + len(message).to_bytes(4, "big") + message)
        self.flush()
        self.until(h2.events.DataReceived, stream_id)
        body = b"".join(
            e.data
            for e in self.events
            if isinstance(e, h2.events.DataReceived) and e.stream_id == stream_id
        )
        response = discovery_pb2.DiscoveryResponse.FromString(body[5:])
        assert response.resources

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    caplog.set_level(logging.DEBUG, logger="xdscore")
    caplog.set_level(logging.DEBUG, logger="grpclib")
    caplog.set_level(logging.DEBUG, logger="asyncio")
    return caplog.records


def no_traceback(records: list[logging.LogRecord]) -> None:
    bad = [r for r in records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [f"{r.name}: {r.getMessage()}" for r in bad]


def _replaced(port: int, name: str, value: str | None) -> list[tuple[str, str]]:
    fields = good_headers(port)
    if value is None:
        return [(n, v) for n, v in fields if n != name]
    return [(n, value if n == name else v) for n, v in fields]


MALFORMED: dict[str, Callable[[int], list[tuple[str, str]]]] = {
    "no-method": lambda port: _replaced(port, ":method", None),
    "no-path": lambda port: _replaced(port, ":path", None),
    "uppercase-name": lambda port: [*good_headers(port), ("X-Trace", "1")],
    "connection-specific": lambda port: [*good_headers(port), ("connection", "close")],
    "te-gzip": lambda port: _replaced(port, "te", "gzip"),
    "pseudo-after-regular": lambda port: [*good_headers(port), (":authority", "elsewhere")],
    "path-twice": lambda port: [(":path", "/other"), *good_headers(port)],
    "unknown-pseudo": lambda port: [(":protocol", "websocket"), *good_headers(port)],
}


def _malformed(port: int, case: str) -> None:
    client = Client(port)
    try:
        stream_id = client.conn.get_next_available_stream_id()
        client.conn.send_headers(stream_id, MALFORMED[case](port))
        client.flush()
        client.until(h2.events.StreamReset, stream_id)
        (reset,) = [e for e in client.events if isinstance(e, h2.events.StreamReset)]
        assert reset.error_code == PROTOCOL_ERROR, reset
        client.served()  # the same connection goes on
    finally:
        client.close()


@pytest.mark.parametrize("case", MALFORMED)
async def test_a_malformed_request_is_reset_and_the_connection_goes_on(
    case: str, transport_kind: TransportKind, tracebacks: list[logging.LogRecord]
) -> None:
    async with control_plane(transport_kind=transport_kind) as plane:
        await anyio.to_thread.run_sync(_malformed, plane.port, case)
        (opened,) = plane.recorder.opened.values()  # no handler saw the malformed one
        assert opened.node is not None
        assert opened.node.id == "after"
    no_traceback(tracebacks)


def _unknown_frames(port: int) -> None:
    client = Client(port)
    try:
        stream_id = client.conn.get_next_available_stream_id()
        client.conn.send_headers(stream_id, good_headers(port))
        client.flush()
        for on in (0, stream_id):  # on the connection, and on the open stream
            size, kind, flags = 9, 0xFA, 0xFF
            header = struct.pack(">BHBBL", 0, size, kind, flags, on)
            client.sock.sendall(header + b"extension")
        message = request(node_id="unknown-frames").SerializeToString()
        client.conn.send_data(stream_id, b"\x00" + len(message).to_bytes(4, "big") + message)
        client.flush()
        client.until(h2.events.DataReceived, stream_id)
        client.served()
    finally:
        client.close()


async def test_frames_of_unknown_types_are_ignored(
    transport_kind: TransportKind, tracebacks: list[logging.LogRecord]
) -> None:
    async with control_plane(transport_kind=transport_kind) as plane:
        await anyio.to_thread.run_sync(_unknown_frames, plane.port)
    no_traceback(tracebacks)


def _not_ascii(port: int, served: bool) -> None:
    client = Client(port)
    try:
        stream_id = client.conn.get_next_available_stream_id()
        fields = [(name.encode(), value.encode()) for name, value in good_headers(port)]
        client.conn.send_headers(stream_id, [*fields, (b"x-name", b"caf\xe9")])
        message = request(node_id="latin-1").SerializeToString()
        client.conn.send_data(stream_id, b"\x00" + len(message).to_bytes(4, "big") + message)
        client.flush()
        if served:
            client.until(h2.events.DataReceived, stream_id)
            return
        with pytest.raises(AssertionError, match=r"ConnectionTerminated|closed the connection"):
            client.until(h2.events.DataReceived, stream_id)
        (goaway,) = [e for e in client.events if isinstance(e, h2.events.ConnectionTerminated)]
        assert goaway.error_code == PROTOCOL_ERROR
    finally:
        client.close()


async def test_a_header_value_that_is_not_ascii(
    transport_kind: TransportKind, tracebacks: list[logging.LogRecord]
) -> None:
    """RFC 9110 lets a field value hold bytes past ASCII (obs-text): Http2Transport serves
    the call; GrpclibTransport, whose grpclib reads fields as ASCII, ends the connection
    with GOAWAY PROTOCOL_ERROR (it used to log a UnicodeDecodeError traceback)."""
    served = transport_kind is Http2Transport
    async with control_plane(transport_kind=transport_kind) as plane:
        await anyio.to_thread.run_sync(_not_ascii, plane.port, served)
    no_traceback(tracebacks)
