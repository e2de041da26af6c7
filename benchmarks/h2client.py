"""A lean gRPC client over HTTP/2 for the load generator: one connection, one stream.

grpcio costs the load generator about as much CPU per client as the server under test
spends per stream (its channel, its poller thread, two Cython calls a message), so past a
few hundred clients the generator, not the server, bounds what is measured. This client
speaks the part of HTTP/2 and gRPC one xDS stream needs: the preface and SETTINGS, one
request stream, flow control both ways, PING and SETTINGS acknowledgements, trailers. Any
HTTP/2 server sees an ordinary gRPC client (it announces 256 MiB windows, as Envoy does
by default); frames are built with xdscore's own helpers and header blocks with ``hpack``.

    call = await H2Call.open("127.0.0.1", 18000, ADS + "StreamAggregatedResources")
    await call.send(request_bytes)
    data = await call.receive()   # None once the server ended the call with OK
"""

from __future__ import annotations

import asyncio
import functools
import struct
from collections import deque
from typing import cast

from hpack import Decoder, Encoder

from xdscore.transport.h2.wire import (
    ACK,
    DEFAULT_FRAME,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    PADDED,
    PREFACE,
    PRIORITY_FLAG,
    FrameType,
    Setting,
    data_header,
    frame,
    settings,
    window_update,
)

__all__ = ["CallEnded", "H2Call"]

WINDOW = 256 << 20
"""The stream and connection windows this client announces."""
_STREAM = 1
_U32 = struct.Struct(">L")
_SETTING = struct.Struct(">HL")


class CallEnded(Exception):
    """The server ended the call with a status other than OK, or broke it off."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"status {status}: {message}")
        self.status = status
        self.message = message


@functools.lru_cache(maxsize=16)
def _opening(authority: str, path: str) -> bytes:
    """What a connection sends first: the preface, its settings and window, and the call's
    headers (the same bytes for every connection to one server: a fresh HPACK encoder each
    time, and one stream a connection)."""
    block = Encoder().encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
    )
    ours = {Setting.ENABLE_PUSH: 0, Setting.INITIAL_WINDOW_SIZE: WINDOW}
    return (
        PREFACE
        + settings(ours)
        + window_update(0, WINDOW - DEFAULT_WINDOW)
        + frame(FrameType.HEADERS, END_HEADERS, _STREAM, block)
    )


class H2Call(asyncio.Protocol):
    """A connection carrying one gRPC call (stream 1); a byte stream for the client driver."""

    def __init__(self, authority: str, path: str) -> None:
        self._authority = authority
        self._path = path
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._decoder = Decoder()
        self._block = b""
        self._prefix = b""
        self._pieces: list[memoryview] = []
        self._missing = -1
        """Bytes of the message being read still to come; -1 while its prefix is read."""
        self._messages: deque[bytes] = deque()
        self._arrived: asyncio.Future[None] | None = None
        self._ended: CallEnded | None = None
        self._closed = False
        self._unacked = 0
        self._send_window = DEFAULT_WINDOW
        self._connection_window = DEFAULT_WINDOW
        self._peer_initial = DEFAULT_WINDOW
        self._window_open: asyncio.Future[None] | None = None
        self._out: list[bytes] = []
        """Frames written since the loop's last turn: they go out in one write, as a proxy
        writes what one pass of its event loop produced (a SETTINGS ACK or credit, an ACK
        and the requests the response led to)."""
        self.received_bytes = 0

    @classmethod
    async def open(cls, host: str, port: int, path: str) -> H2Call:
        loop = asyncio.get_running_loop()
        _, call = await loop.create_connection(lambda: cls(f"{host}:{port}", path), host, port)
        return call

    # -- asyncio.Protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not subclasses of asyncio's).
        self._transport = cast(asyncio.Transport, transport)
        self._transport.write(_opening(self._authority, self._path))

    def data_received(self, data: bytes) -> None:
        data = self._buffer + data if self._buffer else data
        view = memoryview(data)
        at, end = 0, len(data)
        out: list[bytes] = []
        while end - at >= 9:
            size = (data[at] << 16) | (data[at + 1] << 8) | data[at + 2]
            if end - at < 9 + size:
                break
            kind, flags = data[at + 3], data[at + 4]
            stream_id = _U32.unpack_from(data, at + 5)[0] & 0x7FFFFFFF
            payload = view[at + 9 : at + 9 + size]
            at += 9 + size
            self._frame(kind, flags, stream_id, payload, out)
        self._buffer = bytes(view[at:]) if at < end else b""
        view.release()
        if self._messages or self._ended is not None:
            self._wake()  # (first: what the driver answers joins the frames below)
        if out:
            self._write(b"".join(out))

    def _write(self, chunk: bytes) -> None:
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(chunk)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and self._transport is not None and not self._closed:
            self._transport.write(out[0] if len(out) == 1 else b"".join(out))

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._ended is None and not self._messages:
            self._ended = CallEnded(14, f"connection lost: {exc}")  # UNAVAILABLE
        self._wake()
        self._window_changed()

    # -- frames in ----------------------------------------------------------------

    def _frame(
        self, kind: int, flags: int, stream_id: int, payload: memoryview, out: list[bytes]
    ) -> None:
        if kind == FrameType.DATA:
            self._unacked += len(payload)
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            self._data(payload, out)
            if flags & END_STREAM:
                self._end(0, "")
        elif kind in (FrameType.HEADERS, FrameType.CONTINUATION):
            if kind == FrameType.HEADERS:
                if flags & PADDED:
                    payload = payload[1 : len(payload) - payload[0]]
                if flags & PRIORITY_FLAG:
                    payload = payload[5:]
                self._block = bytes(payload)
            else:
                self._block += payload
            if flags & END_HEADERS:
                self._headers(flags)
        elif kind == FrameType.SETTINGS and not flags & ACK:
            for offset in range(0, len(payload), 6):
                key, value = _SETTING.unpack_from(payload, offset)
                if key == Setting.INITIAL_WINDOW_SIZE:
                    self._send_window += value - self._peer_initial
                    self._peer_initial = value
            out.append(frame(FrameType.SETTINGS, ACK, 0))
            self._window_changed()
        elif kind == FrameType.PING and not flags & ACK:
            out.append(frame(FrameType.PING, ACK, 0, bytes(payload)))
        elif kind == FrameType.WINDOW_UPDATE:
            increment = _U32.unpack(payload)[0] & 0x7FFFFFFF
            if stream_id:
                self._send_window += increment
            else:
                self._connection_window += increment
            self._window_changed()
        elif kind == FrameType.RST_STREAM:
            self._end(13, f"stream reset, code {_U32.unpack(payload)[0]}")  # INTERNAL
        elif kind == FrameType.GOAWAY:
            code = _U32.unpack_from(payload, 4)[0]
            if code:  # (NO_ERROR: the call goes on, until the server ends it or leaves)
                self._end(14, f"GOAWAY, code {code}")

    def _data(self, payload: memoryview, out: list[bytes]) -> None:
        """Split DATA into messages, copying each once (its pieces are views of the reads)."""
        at, end = 0, len(payload)
        while at < end:
            if self._missing < 0:  # reading a prefix
                chunk = payload[at : at + 5 - len(self._prefix)]
                self._prefix += chunk
                at += len(chunk)
                if len(self._prefix) < 5:
                    break
                self._missing = int.from_bytes(self._prefix[1:5], "big")
                self._prefix = b""
            take = min(self._missing, end - at)
            if take:
                self._pieces.append(payload[at : at + take])
                at += take
                self._missing -= take
            if self._missing == 0:
                pieces, self._pieces = self._pieces, []
                message = bytes(pieces[0]) if len(pieces) == 1 else b"".join(pieces)
                self._missing = -1
                self.received_bytes += len(message)
                self._messages.append(message)
        if self._unacked >= WINDOW // 2:
            out.append(window_update(0, self._unacked) + window_update(_STREAM, self._unacked))
            self._unacked = 0

    def _headers(self, flags: int) -> None:
        fields = cast(dict[str, str], dict(self._decoder.decode(self._block)))
        self._block = b""
        if "grpc-status" in fields:
            self._end(int(fields["grpc-status"]), fields.get("grpc-message", ""))
        elif flags & END_STREAM:
            self._end(13, f"ended with HTTP status {fields.get(':status')}")

    def _end(self, status: int, message: str) -> None:
        if self._ended is None:
            self._ended = CallEnded(status, message)

    def _wake(self) -> None:
        arrived = self._arrived
        if arrived is not None and not arrived.done():
            arrived.set_result(None)

    def _window_changed(self) -> None:
        waiter = self._window_open
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the byte stream ----------------------------------------------------------

    async def receive(self) -> bytes | None:
        """The next message; ``None`` once the call ended with OK."""
        while not self._messages:
            ended = self._ended
            if ended is not None:
                if ended.status == 0:
                    return None
                raise ended
            self._arrived = asyncio.get_running_loop().create_future()
            try:
                await self._arrived
            finally:
                self._arrived = None
        return self._messages.popleft()

    async def send(self, data: bytes) -> None:
        """Write one message, within the server's flow-control windows."""
        message = b"\x00" + len(data).to_bytes(4, "big") + data
        while message:
            if self._ended is not None or self._closed:
                raise self._ended or CallEnded(14, "connection closed")
            room = min(self._send_window, self._connection_window, DEFAULT_FRAME)
            if room <= 0:
                self._flush()  # the server credits what it has read
                self._window_open = asyncio.get_running_loop().create_future()
                try:
                    await self._window_open
                finally:
                    self._window_open = None
                continue
            piece, message = message[:room], message[room:]
            self._send_window -= len(piece)
            self._connection_window -= len(piece)
            self._write(data_header(len(piece), _STREAM) + piece)

    def close(self) -> None:
        if self._transport is not None:
            self._flush()
            self._transport.close()
