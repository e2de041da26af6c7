"""The client end of one HTTP/2 connection, for the tests of ``Http2Transport``.

A :class:`Peer` is a real TCP connection on loopback. What it sends is either produced by
the ``h2`` library's client-side state machine (an HTTP/2 implementation independent of
the server's, which also checks every frame the server sends: a window overrun or a
malformed frame raises in ``h2``) or raw frames built here, for input ``h2`` refuses to
produce. Every frame the server sends is also recorded as it came off the wire
(:attr:`Peer.frames`), so that tests can assert sizes, flags and error codes.

Nothing here imports the transport's own framing code: the frames are built and parsed
from the HTTP/2 specification, the header blocks with ``hpack``.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anyio
import attrs
import h2.config
import h2.connection
import h2.events
from hpack import Decoder, Encoder, NeverIndexedHeaderTuple

__all__ = [
    "ACK",
    "CONTINUATION",
    "DATA",
    "END_HEADERS",
    "END_STREAM",
    "GOAWAY",
    "HEADERS",
    "PADDED",
    "PING",
    "PREFACE",
    "RST_STREAM",
    "SETTINGS",
    "WINDOW_UPDATE",
    "Frame",
    "Peer",
    "frame",
    "grpc_headers",
    "header_block",
    "messages",
    "prefixed",
    "settings_frame",
]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0,
    1,
    3,
    4,
    6,
    7,
    8,
    9,
)
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8

_U32 = struct.Struct(">L")


@attrs.frozen
class Frame:
    """One frame as the server sent it (``payload`` still padded, if it was)."""

    kind: int
    flags: int
    stream_id: int
    payload: bytes

    @property
    def error_code(self) -> int:
        """The error code of a RST_STREAM or GOAWAY frame."""
        if self.kind == RST_STREAM:
            return int(_U32.unpack(self.payload)[0])
        assert self.kind == GOAWAY, self
        return int(_U32.unpack_from(self.payload, 4)[0])

    @property
    def last_stream_id(self) -> int:
        assert self.kind == GOAWAY, self
        return int(_U32.unpack_from(self.payload, 0)[0]) & 0x7FFFFFFF

    @property
    def settings(self) -> dict[int, int]:
        assert self.kind == SETTINGS, self
        return dict(struct.iter_unpack(">HL", self.payload))

    @property
    def increment(self) -> int:
        assert self.kind == WINDOW_UPDATE, self
        return int(_U32.unpack(self.payload)[0])

    @property
    def body(self) -> bytes:
        """The payload without its padding."""
        if not self.flags & PADDED:
            return self.payload
        return self.payload[1 : len(self.payload) - self.payload[0]]


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return struct.pack(">BHBBL", size >> 16, size & 0xFFFF, kind, flags, stream_id) + payload


def settings_frame(values: Mapping[int, int] | None = None, *, ack: bool = False) -> bytes:
    payload = b"".join(struct.pack(">HL", k, v) for k, v in (values or {}).items())
    return frame(SETTINGS, ACK if ack else 0, 0, payload)


def header_block(fields: Iterable[tuple[str, str]]) -> bytes:
    """A header block that leaves the server's HPACK table as it was (never-indexed
    literals only), so raw blocks and ``h2``'s can be mixed on one connection."""
    return Encoder().encode([NeverIndexedHeaderTuple(name, value) for name, value in fields])


def grpc_headers(
    path: str, *, method: str = "POST", content_type: str = "application/grpc", **extra: str
) -> list[tuple[str, str]]:
    fields = [
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", "127.0.0.1"),
        ("content-type", content_type),
        ("te", "trailers"),
    ]
    return fields + [(name.replace("_", "-"), value) for name, value in extra.items()]


def prefixed(message: bytes, *, compressed: bool = False) -> bytes:
    """``message`` with its 5-byte gRPC prefix."""
    return bytes([compressed]) + len(message).to_bytes(4, "big") + message


def messages(body: bytes) -> list[bytes]:
    """The gRPC messages of a stream's DATA (which must end on a message boundary)."""
    out = []
    at = 0
    while at < len(body):
        assert len(body) - at >= 5, f"{len(body) - at} bytes left: not a gRPC prefix"
        assert body[at] == 0, "a compressed response"
        size = int.from_bytes(body[at + 1 : at + 5], "big")
        assert len(body) - at - 5 >= size, f"a message of {size} bytes is cut short"
        out.append(body[at + 5 : at + 5 + size])
        at += 5 + size
    return out


class Peer:
    """One client connection to ``127.0.0.1:port``.

    With ``use_h2`` (the default) an ``h2`` client connection speaks on it: its preface
    and SETTINGS are sent at once (``settings`` updates them in a second SETTINGS frame),
    and what it owes the server (SETTINGS and PING acknowledgements) is sent as frames
    arrive, but never a WINDOW_UPDATE: the test decides when to give credit. Without it,
    nothing is sent but what the test sends with :meth:`send`.
    """

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, use_h2: bool
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.conn: h2.connection.H2Connection | None = None
        if use_h2:
            config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
            self.conn = h2.connection.H2Connection(config)
        self.frames: list[Frame] = []
        self.events: list[h2.events.Event] = []
        self.eof = False
        self._buffer = bytearray()
        self._decoder = Decoder()
        self._block: list[Frame] = []
        self.header_lists: dict[int, list[dict[str, str]]] = {}
        """Per stream, each header block the server sent, decoded."""

    @classmethod
    async def connect(
        cls, port: int, *, use_h2: bool = True, settings: Mapping[int, int] | None = None
    ) -> Peer:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        peer = cls(reader, writer, use_h2)
        if peer.conn is not None:
            peer.conn.initiate_connection()
            if settings:
                peer.conn.update_settings(dict(settings))
            await peer.flush()
        return peer

    @property
    def local_port(self) -> int:
        return int(self._writer.get_extra_info("sockname")[1])

    @property
    def h2(self) -> h2.connection.H2Connection:
        assert self.conn is not None
        return self.conn

    async def send(self, *chunks: bytes) -> None:
        self._writer.write(b"".join(chunks))
        await self._writer.drain()

    async def flush(self) -> None:
        """Send what the ``h2`` connection has produced."""
        data = self.h2.data_to_send()
        if data:
            await self.send(data)

    async def open(self, path: str, *, end_stream: bool = False, **extra: str) -> int:
        """Open a gRPC call on ``path`` with ``h2``; its stream id."""
        stream_id: int = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream_id, grpc_headers(path, **extra), end_stream=end_stream)
        await self.flush()
        return stream_id

    async def send_message(self, stream_id: int, message: bytes, *, end: bool = False) -> None:
        """One gRPC message on ``stream_id`` with ``h2`` (it must fit the windows)."""
        data = prefixed(message)
        step = self.h2.max_outbound_frame_size
        for at in range(0, len(data), step):
            last = at + step >= len(data)
            self.h2.send_data(stream_id, data[at : at + step], end_stream=end and last)
        await self.flush()

    # -- reading ---------------------------------------------------------------

    async def _read_once(self) -> None:
        data = await self._reader.read(1 << 16)
        if not data:
            self.eof = True
            return
        self._buffer += data
        self._parse()
        if self.conn is not None:
            self.events.extend(self.conn.receive_data(data))
            await self.flush()

    def _parse(self) -> None:
        buffer = self._buffer
        while len(buffer) >= 9:
            size = int.from_bytes(buffer[:3], "big")
            if len(buffer) < 9 + size:
                return
            kind, flags = buffer[3], buffer[4]
            stream_id = _U32.unpack_from(buffer, 5)[0] & 0x7FFFFFFF
            received = Frame(kind, flags, stream_id, bytes(buffer[9 : 9 + size]))
            del buffer[: 9 + size]
            self.frames.append(received)
            if kind in (HEADERS, CONTINUATION):
                self._block.append(received)
                if flags & END_HEADERS:
                    self._decode_block()

    def _decode_block(self) -> None:
        first, *rest = self._block
        self._block = []
        block = first.body
        if first.flags & 0x20:
            block = block[5:]
        block += b"".join(each.payload for each in rest)
        fields = self._decoder.decode(block)
        self.header_lists.setdefault(first.stream_id, []).append(
            {str(name): str(value) for name, value in fields}
        )

    async def until(
        self, condition: Callable[[Peer], Any], *, timeout: float = 5.0, what: str = ""
    ) -> None:
        """Read until ``condition(self)`` holds; fails after ``timeout`` seconds."""
        try:
            with anyio.fail_after(timeout):
                while not condition(self):
                    if self.eof:
                        raise AssertionError(f"the server closed the connection before {what}")
                    await self._read_once()
        except TimeoutError:
            raise AssertionError(f"nothing after {timeout} s: {what or condition}") from None

    async def settle(self, seconds: float = 0.2) -> None:
        """Read whatever arrives for ``seconds`` (or until the connection closes)."""
        with anyio.move_on_after(seconds):
            while not self.eof:
                await self._read_once()

    async def closed(self, timeout: float = 5.0) -> None:
        """Read until the server closes the connection."""
        await self.until(lambda peer: peer.eof, timeout=timeout, what="the connection closed")

    # -- what was received -------------------------------------------------------

    def of(self, kind: int, stream_id: int | None = None) -> list[Frame]:
        return [
            f
            for f in self.frames
            if f.kind == kind and (stream_id is None or f.stream_id == stream_id)
        ]

    @property
    def goaway(self) -> Frame | None:
        found = self.of(GOAWAY)
        return found[0] if found else None

    def data(self, stream_id: int) -> bytes:
        """Every DATA byte (padding removed) the server sent on ``stream_id``."""
        return b"".join(f.body for f in self.of(DATA, stream_id))

    def responses(self, stream_id: int) -> list[bytes]:
        return messages(self.data(stream_id))

    def ended(self, stream_id: int) -> bool:
        """Whether the server ended ``stream_id`` (END_STREAM or RST_STREAM)."""
        return any(
            f.stream_id == stream_id
            and (f.kind == RST_STREAM or (f.kind in (HEADERS, DATA) and f.flags & END_STREAM))
            for f in self.frames
        )

    def status(self, stream_id: int) -> tuple[str, str] | None:
        """The grpc-status and grpc-message the server ended ``stream_id`` with."""
        for fields in self.header_lists.get(stream_id, []):
            if "grpc-status" in fields:
                return fields["grpc-status"], fields.get("grpc-message", "")
        return None

    def abort(self) -> None:
        """Drop the TCP connection (a reset, no HTTP/2 goodbye), as when a host dies."""
        self._writer.transport.abort()

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):  # the server reset it: nothing left to close
            await self._writer.wait_closed()
