"""One HTTP/2 connection of :class:`~xdscore.transport.Http2Transport`, and its gRPC calls.

An ``asyncio.Protocol`` that parses frames as they arrive and answers what the connection
itself owes (SETTINGS and PING acknowledgements, flow-control credit) without a task;
each request stream becomes a :class:`Call` (the runtime's byte stream: ``receive``,
``send_parts``, ``end``, ``writable``, ``closed``) handed to a handler in a task of its own.

What it bounds, per connection:

* inbound bytes by flow control: a stream's bytes are credited back as its handler reads
  them, so a client never has more than one stream window (:data:`STREAM_WINDOW`) buffered
  per stream, nor more than :data:`CONNECTION_WINDOW` in all; a request larger than
  ``limit`` is refused from its 5-byte prefix, before its body is credited;
* open streams (:data:`MAX_STREAMS`; more are refused with REFUSED_STREAM);
* header blocks (:data:`MAX_HEADER_BLOCK` bytes; larger ones cut the connection);
* rapid resets, PING and SETTINGS floods, by the token buckets of :class:`ConnectionLimits`
  (the connection is cut with GOAWAY ENHANCE_YOUR_CALM).

Outbound, every frame the connection owes in one turn of the event loop goes to the socket
in one write; a large message is written in batches of :data:`BATCH_BYTES`, waiting for the
socket to drain and for the client's flow-control windows.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, cast

from hpack.exceptions import HPACKError
from mypy_extensions import mypyc_attr

from .._errors import GrpcStatus, RemoteProtocolError, StreamClosed
from ._frames import BATCH_BYTES, buffers, message_size, take
from ._h2_headers import HeaderDecoder
from ._h2_wire import (
    ACK,
    DEFAULT_FRAME,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    MAX_FRAME,
    MAX_WINDOW,
    PADDED,
    PREFACE,
    PRIORITY_FLAG,
    ErrorCode,
    FrameType,
    Setting,
    data_header,
    frame,
    goaway,
    refusal_headers,
    response_headers,
    rst_stream,
    settings,
    trailers,
    window_update,
)
from ._http2 import Bucket, ConnectionLimits, CutReason, bucket, log_cut
from ._intake import Intake

__all__ = ["Call", "Connection", "Handler", "Route"]

HELD_BYTES = 65_536
"""Bytes a connection waiting for its turn to be read (see :class:`Intake`) takes in
before it stops reading."""

log = logging.getLogger("xdscore.transport")

STREAM_WINDOW = 1 << 20
"""Bytes a client may send on a stream before the server reads them."""
CONNECTION_WINDOW = 16 << 20
"""Bytes a client may send on a connection before the server reads them."""
MAX_STREAMS = 100
"""Streams a client may have open on one connection."""
MAX_HEADER_BLOCK = 64 * 1024
"""Bytes of one request's header block (HEADERS and CONTINUATION frames together)."""

Handler = Callable[["Call"], Coroutine[Any, Any, None]]
Route = Callable[[str], Handler | None]
"""The handler of a gRPC method path, or ``None`` for a method not served."""

_U32 = struct.Struct(">L")
_SETTING = struct.Struct(">HL")


class _ConnectionError(Exception):
    """The client broke the protocol: the connection ends with GOAWAY ``code``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@mypyc_attr(allow_interpreted_subclasses=True)
class Call:
    """One gRPC call (an HTTP/2 stream) as message bytes each way.

    The client going away (its RST_STREAM, or the connection lost) is
    :class:`~xdscore.StreamClosed`; the handler's task is also cancelled then.
    """

    __slots__ = (
        "_buffer",
        "_connection",
        "_gone",
        "_headers_sent",
        "_limit",
        "_partial",
        "_readable",
        "_uncredited",
        "_window_open",
        "deadline",
        "ended",
        "id",
        "is_settled",
        "metadata",
        "opened",
        "path",
        "recv_window",
        "remote_closed",
        "reset",
        "send_window",
        "task",
    )

    def __init__(
        self,
        connection: Connection,
        stream_id: int,
        path: str,
        metadata: Mapping[str, str],
        limit: int,
    ) -> None:
        self._connection = connection
        self.id = stream_id
        self.path = path
        self.metadata = metadata
        self._limit = limit
        self.opened = time.monotonic()
        self.send_window = connection.peer_window
        self.recv_window = STREAM_WINDOW
        self._buffer = bytearray()
        self._uncredited = 0
        self._readable: asyncio.Future[None] | None = None
        self._window_open: asyncio.Future[None] | None = None
        self._gone: asyncio.Event | None = None
        self._headers_sent = False
        self._partial = False
        """Whether a message is written in part: the stream can then only be reset."""
        self.remote_closed = False
        self.reset = False
        self.ended = False
        """Whether the server sent its trailers."""
        self.deadline: float | None = None
        self.task: asyncio.Task[None] | None = None
        self.is_settled = False
        """Whether the handler said the call finished its initial sync (:meth:`settled`)."""

    @property
    def peer(self) -> str:
        return self._connection.peer

    @property
    def peer_certificate(self) -> Mapping[str, Any] | None:
        return self._connection.peer_certificate

    def settled(self) -> None:
        """The call has finished its initial sync: once every call on the connection has,
        its reads are no longer bounded per loop turn (see :class:`Intake`)."""
        if not self.is_settled:
            self.is_settled = True
            if self._connection.calls.get(self.id) is self:
                self._connection._settle()

    # -- reading ---------------------------------------------------------------

    def _received(self, data: bytes | memoryview, padding: int) -> None:
        self._buffer += data
        self._uncredited += len(data) + padding
        self._wake_reader()

    def _wake_reader(self) -> None:
        readable = self._readable
        if readable is not None and not readable.done():
            readable.set_result(None)

    async def receive(self) -> bytes | None:
        """The next message, or ``None`` once the client ended its side."""
        buffer = self._buffer
        while True:
            if self.reset:
                raise StreamClosed("the client reset the stream")
            if len(buffer) >= 5:
                size = message_size(buffer, self._limit)
                if len(buffer) >= size + 5:
                    message = bytes(buffer[5 : size + 5])
                    del buffer[: size + 5]
                    if self._uncredited >= STREAM_WINDOW // 2:
                        self._credit()
                    return message
            if self.remote_closed:
                if buffer:
                    raise RemoteProtocolError(
                        "the stream ended inside a message", GrpcStatus.INVALID_ARGUMENT
                    )
                return None
            # Waiting: whatever is buffered is part of the message being read, within the
            # limit, so it is credited back now (else a message longer than the window
            # could never arrive). With nothing buffered, the client still has at least
            # half the window for its next message, and the credit waits to be worth a
            # frame (one WINDOW_UPDATE per request was half of what a stream's sync sent).
            if self._uncredited and (buffer or self._uncredited >= STREAM_WINDOW // 2):
                self._credit()
            self._readable = asyncio.get_running_loop().create_future()
            try:
                await self._readable
            finally:
                self._readable = None

    def _credit(self) -> None:
        amount, self._uncredited = self._uncredited, 0
        self._connection.credit(self, amount)

    # -- writing ---------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        await self.send_parts((data,))

    async def send_parts(self, parts: Sequence[bytes]) -> None:
        """Write one message whose body is the concatenation of ``parts``."""
        connection = self._connection
        if self.reset or self.ended or connection.closing:
            raise StreamClosed("the stream is closed")
        size = sum(map(len, parts))
        if self._fits(size):
            # The common case: the whole message in one DATA frame, window to spare.
            self._queue_message(size, parts)
            if connection.paused:
                await connection.drained()
            return
        if not self._headers_sent:
            self._headers_sent = True
            connection.queue(response_headers(self.id))
        await self._send_large([b"\x00" + size.to_bytes(4, "big"), *parts])

    def try_send_parts(self, parts: Sequence[bytes]) -> bool:
        """Write one message at once if it fits the flow-control windows (and one batch)
        and the connection is not paused; ``False`` (nothing written) otherwise."""
        connection = self._connection
        if self.reset or self.ended or connection.closing or connection.paused:
            return False
        size = sum(map(len, parts))
        if self._fits(size):
            self._queue_message(size, parts)
            return True
        if size + 5 > min(self.send_window, connection.send_window, BATCH_BYTES):
            return False
        if not self._headers_sent:
            self._headers_sent = True
            connection.queue(response_headers(self.id))
        pending = buffers([b"\x00" + size.to_bytes(4, "big"), *parts])
        max_frame = connection.peer_frame
        while pending:
            piece = take(pending, max_frame)
            connection.queue(data_header(len(piece), self.id), piece)
        self.send_window -= size + 5
        connection.send_window -= size + 5
        connection.flush_now()
        return True

    def _fits(self, size: int) -> bool:
        connection = self._connection
        return size + 5 <= min(self.send_window, connection.send_window, connection.peer_frame)

    def _queue_message(self, size: int, parts: Sequence[bytes]) -> None:
        connection = self._connection
        if not self._headers_sent:
            self._headers_sent = True
            connection.queue(response_headers(self.id))
        self.send_window -= size + 5
        connection.send_window -= size + 5
        connection.queue(data_header(size + 5, self.id), b"\x00" + size.to_bytes(4, "big"), *parts)
        connection.flush_now()

    async def _send_large(self, parts: list[bytes]) -> None:
        connection = self._connection
        pending = buffers(parts)
        self._partial = True
        while pending:
            room = min(self.send_window, connection.send_window)
            if room <= 0:
                await self._wait_window()
                continue
            batch = min(room, BATCH_BYTES)
            max_frame = connection.peer_frame
            while batch > 0 and pending:
                piece = take(pending, min(batch, max_frame))
                size = len(piece)
                connection.queue(data_header(size, self.id), piece)
                self.send_window -= size
                connection.send_window -= size
                batch -= size
            connection.flush()
            if connection.paused:
                await connection.drained()
            if self.reset or connection.closing:
                raise StreamClosed("the stream is closed")
        self._partial = False

    async def _wait_window(self) -> None:
        if self.reset or self._connection.closing:
            raise StreamClosed("the stream is closed")
        self._window_open = asyncio.get_running_loop().create_future()
        try:
            await self._window_open
        finally:
            self._window_open = None
        if self.reset or self._connection.closing:
            raise StreamClosed("the stream is closed")

    def _window_changed(self) -> None:
        waiter = self._window_open
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def writable(self, size: int) -> bool:
        """Whether a message of ``size`` bytes goes out without waiting for the client."""
        connection = self._connection
        room = min(self.send_window, connection.send_window)
        return not connection.paused and room >= size + 5

    async def end(self, message: str) -> None:
        """End the stream with status OK and ``message``."""
        if self.reset or self._connection.closing:
            raise StreamClosed("the stream is closed")
        self.finish(GrpcStatus.OK, message)

    def finish(self, status: GrpcStatus, message: str | None) -> None:
        """Send the trailers (once), then release the stream."""
        if self.ended:
            return
        self.ended = True
        connection = self._connection
        if self._partial and not self.reset and not connection.closing:
            # The client holds part of a message: no status can follow it.
            connection.queue(rst_stream(self.id, ErrorCode.CANCEL))
        elif not self.reset and not connection.closing:
            connection.queue(
                *trailers(
                    self.id,
                    status.value,
                    message,
                    headers_sent=self._headers_sent,
                    max_frame=connection.peer_frame,
                )
            )
            if not self.remote_closed and self._buffer:
                # The client is inside a message (one refused from its prefix): tell it to
                # stop sending. Otherwise no RST_STREAM follows the trailers: some clients
                # (grpclib's) fail a call whose trailers arrive in the same read as a reset;
                # what such a client sends later is credited to the connection and dropped.
                connection.queue(rst_stream(self.id, ErrorCode.NO_ERROR))
            elif not self.remote_closed and connection.draining is not None:
                connection.draining.add(self.id)
        connection.release(self)

    async def closed(self) -> None:
        """Return once the client has gone away."""
        if self.reset:
            return
        if self._gone is None:
            self._gone = asyncio.Event()
        await self._gone.wait()

    def _lost(self) -> None:
        """The client reset the stream or the connection is gone."""
        self.reset = True
        self._wake_reader()
        self._window_changed()
        if self._gone is not None:
            self._gone.set()


@mypyc_attr(allow_interpreted_subclasses=True)
class Connection(asyncio.Protocol):
    """The server side of one HTTP/2 connection carrying gRPC calls."""

    def __init__(
        self,
        route: Route,
        *,
        limit: int,
        limits: ConnectionLimits,
        on_cut: Callable[[CutReason], None],
        on_close: Callable[[Connection], None],
        intake: Intake | None = None,
    ) -> None:
        self._route = route
        self._intake = intake
        self._held = False
        """Whether a read waits for its turn (see :class:`Intake`)."""
        self._held_paused = False
        """Whether reading stopped while waiting: more than :data:`HELD_BYTES` arrived."""
        self._unsettled = 0
        """Calls open that have not said they are settled (see :meth:`Call.settled`)."""
        self._ever_settled = False
        self._limit = limit
        self._limits = limits
        self._on_cut = on_cut
        self._on_close = on_close
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._preface = False
        self._settled = False
        """Whether the client's first SETTINGS frame arrived."""
        self._decoder = HeaderDecoder(MAX_HEADER_BLOCK)
        self._block: bytearray | None = None
        """A header block being continued: (its stream, flags of its HEADERS frame)."""
        self._block_stream = 0
        self._block_flags = 0
        self.calls: dict[int, Call] = {}
        self._last_stream = 0
        self._out: list[bytes | memoryview] = []
        self._flush_scheduled = False
        self._receiving = False
        """Inside :meth:`data_received`, which schedules the flush when it is done."""
        self.paused = False
        self._drained: asyncio.Future[None] | None = None
        self.closing = False
        self.draining: set[int] | None = None
        """While the server stops (:meth:`drain`): the streams it has ended whose clients
        have not yet closed their side."""
        self._drained_streams: asyncio.Future[None] | None = None
        self.cut: CutReason | None = None
        self.peer = ""
        self.peer_certificate: Mapping[str, Any] | None = None
        self.peer_window = DEFAULT_WINDOW
        self.peer_frame = DEFAULT_FRAME
        self.send_window = DEFAULT_WINDOW
        self._recv_window = DEFAULT_WINDOW
        self._uncredited = 0
        self._opened = 0.0
        self.resets = bucket(limits.resets_per_second, limits.resets_burst)
        self.pings = bucket(limits.pings_per_second, limits.pings_burst)
        self.settings = bucket(limits.settings_per_second, limits.settings_burst)

    # -- asyncio.Protocol -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not subclasses of asyncio's).
        self._transport = cast(asyncio.Transport, transport)
        self._opened = time.monotonic()
        address = transport.get_extra_info("peername")
        if address:
            self.peer = f"{address[0]}:{address[1]}"
        if transport.get_extra_info("ssl_object") is not None:
            self.peer_certificate = transport.get_extra_info("peercert")
        ours = {
            Setting.MAX_CONCURRENT_STREAMS: MAX_STREAMS,
            Setting.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            Setting.MAX_HEADER_LIST_SIZE: MAX_HEADER_BLOCK,
        }
        self._recv_window = CONNECTION_WINDOW
        # Not flushed yet: it goes out with the answer to the client's preface, which a
        # client sends without waiting for the server's (one write and one wake-up fewer).
        self._out += (settings(ours), window_update(0, CONNECTION_WINDOW - DEFAULT_WINDOW))

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        intake = self._intake
        if self._held or (intake is not None and self.unsettled and not intake.admit(self)):
            # Its turn comes within a few turns; a client that sends a lot meanwhile is
            # stopped (the kernel buffers, TCP pushes back).
            self._held = True
            buffer = self._buffer
            buffer += data
            if len(buffer) > HELD_BYTES and not self._held_paused and self._transport:
                self._held_paused = True
                self._transport.pause_reading()
            return
        self._handle(data)

    @property
    def unsettled(self) -> bool:
        """Whether a call on this connection is still in its initial sync, or none has
        settled yet: its reads are bounded per loop turn (see :class:`Intake`)."""
        return bool(self._unsettled) or not self._ever_settled

    def resume_intake(self) -> None:
        """The held read's turn has come: handle what was buffered, read again."""
        self._held = False
        if self.closing:
            return
        if self._held_paused and self._transport is not None:
            self._held_paused = False
            self._transport.resume_reading()
        self._handle(b"")

    def _settle(self) -> None:
        self._unsettled -= 1
        self._ever_settled = True

    def _handle(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        self._receiving = True
        try:
            if self._preface or self._read_preface():
                self._frames()
        except _ConnectionError as error:
            log.debug("HTTP/2 protocol error from %s: %s", self.peer, error)
            self._close(error.code, str(error).encode())
        finally:
            self._receiving = False
            if self._out and not self._flush_scheduled:
                # After the tasks this read woke: what they answer at once goes in the
                # same write as the frames this read queued (a SETTINGS ACK, credit).
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self.flush)

    def _read_preface(self) -> bool:
        buffer = self._buffer
        if len(buffer) < len(PREFACE):
            if not PREFACE.startswith(buffer):
                raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "not HTTP/2")
            return False
        if buffer[: len(PREFACE)] != PREFACE:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "not HTTP/2")
        del buffer[: len(PREFACE)]
        self._preface = True
        return True

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._streams_drained()
        self.resume_writing()
        for call in list(self.calls.values()):
            self._abandon(call)
        self.calls.clear()
        self._on_close(self)

    # -- frames in --------------------------------------------------------------

    def _frames(self) -> None:
        # Parsed from an immutable copy, so that payloads can be views of it.
        data = bytes(self._buffer)
        self._buffer.clear()
        view = memoryview(data)
        at = 0
        end = len(data)
        try:
            while end - at >= 9 and not self.closing:
                size = (data[at] << 16) | (data[at + 1] << 8) | data[at + 2]
                if size > DEFAULT_FRAME:
                    raise _ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "frame too large")
                if end - at < 9 + size:
                    break
                kind = data[at + 3]
                flags = data[at + 4]
                stream_id = _U32.unpack_from(data, at + 5)[0] & 0x7FFFFFFF
                payload = view[at + 9 : at + 9 + size]
                at += 9 + size
                self._frame(kind, flags, stream_id, payload)
        finally:
            if at < end:
                self._buffer += view[at:]

    def _frame(self, kind: int, flags: int, stream_id: int, payload: memoryview) -> None:
        if self._block is not None and kind != FrameType.CONTINUATION:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "header block interrupted")
        if not self._settled and kind != FrameType.SETTINGS:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "the first frame is not SETTINGS")
        if kind == FrameType.DATA:
            self._data(flags, stream_id, payload)
        elif kind == FrameType.HEADERS:
            self._headers(flags, stream_id, payload)
        elif kind == FrameType.CONTINUATION:
            self._continuation(flags, stream_id, payload)
        elif kind == FrameType.WINDOW_UPDATE:
            self._window_update(stream_id, payload)
        elif kind == FrameType.RST_STREAM:
            self._rst_stream(stream_id, payload)
        elif kind == FrameType.SETTINGS:
            self._settings(flags, stream_id, payload)
        elif kind == FrameType.PING:
            self._ping(flags, stream_id, payload)
        elif kind == FrameType.GOAWAY:
            if stream_id:
                raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream")
        elif kind == FrameType.PRIORITY:
            if not stream_id or len(payload) != 5:
                raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "malformed PRIORITY")
        elif kind == FrameType.PUSH_PROMISE:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "a client sent PUSH_PROMISE")
        # Frames of unknown types are ignored, as the protocol asks.

    def _data(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if not stream_id:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)
        self._recv_window -= size
        if self._recv_window < 0:
            raise _ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "past the connection window")
        if flags & PADDED:
            payload = _unpad(payload)
        call = self.calls.get(stream_id)
        if call is None or call.remote_closed:
            if stream_id > self._last_stream:
                raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on an idle stream")
            # A stream already ended: its bytes are credited to the connection at once.
            self._uncredited += size
            self._maybe_credit_connection()
            if call is not None:
                self._reset(call, ErrorCode.STREAM_CLOSED)
            elif flags & END_STREAM:
                self._client_closed(stream_id)
            return
        call.recv_window -= size
        if call.recv_window < 0:
            self._uncredited += size
            self._reset(call, ErrorCode.FLOW_CONTROL_ERROR)
            return
        call._received(payload, size - len(payload))
        if flags & END_STREAM:
            call.remote_closed = True
            call._wake_reader()

    def _headers(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if not stream_id or not stream_id & 1:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "HEADERS on a server stream id")
        if flags & PADDED:
            payload = _unpad(payload)
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise _ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "malformed HEADERS")
            payload = payload[5:]
        if flags & END_HEADERS:
            self._request(stream_id, flags, bytes(payload))
            return
        self._block = bytearray(payload)
        self._block_stream = stream_id
        self._block_flags = flags

    def _continuation(self, flags: int, stream_id: int, payload: memoryview) -> None:
        block = self._block
        if block is None or stream_id != self._block_stream:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "unexpected CONTINUATION")
        block += payload
        if len(block) > MAX_HEADER_BLOCK:
            raise _ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "header block too large")
        if flags & END_HEADERS:
            self._block = None
            self._request(stream_id, self._block_flags, bytes(block))

    def _request(self, stream_id: int, flags: int, block: bytes) -> None:
        try:
            fields = self._decoder.decode(block)
        except HPACKError as error:
            raise _ConnectionError(ErrorCode.COMPRESSION_ERROR, str(error)) from None
        call = self.calls.get(stream_id)
        if call is not None or stream_id <= self._last_stream:
            # Trailers from the client: they can only end its side.
            if call is not None:
                if not flags & END_STREAM:
                    raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "trailers without END_STREAM")
                call.remote_closed = True
                call._wake_reader()
            elif flags & END_STREAM:
                self._client_closed(stream_id)
            return
        self._last_stream = stream_id
        if len(self.calls) >= MAX_STREAMS:
            self.queue(rst_stream(stream_id, ErrorCode.REFUSED_STREAM))
            return
        headers: dict[str, str] = {}
        for name, value in fields:
            headers[name.decode("latin-1")] = value.decode("latin-1")
        method = headers.get(":method")
        path = headers.get(":path", "")
        content_type = headers.get("content-type", "")
        if method != "POST":
            self.queue(refusal_headers(stream_id, 405))
            return
        if not content_type.startswith("application/grpc"):
            self.queue(refusal_headers(stream_id, 415))
            return
        metadata = {name: value for name, value in headers.items() if not name.startswith(":")}
        call = Call(self, stream_id, path, metadata, self._limit)
        call.send_window = self.peer_window
        if flags & END_STREAM:
            call.remote_closed = True
        handler = self._route(path)
        if handler is None:
            self.queue(
                *trailers(
                    stream_id,
                    GrpcStatus.UNIMPLEMENTED.value,
                    f"method {path} not implemented",
                    headers_sent=False,
                    max_frame=self.peer_frame,
                )
            )
            return
        timeout = headers.get("grpc-timeout")
        if timeout:
            call.deadline = _timeout(timeout)
        self.calls[stream_id] = call
        self._unsettled += 1
        call.task = asyncio.get_running_loop().create_task(handler(call))

    def _window_update(self, stream_id: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise _ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "malformed WINDOW_UPDATE")
        increment = _U32.unpack(payload)[0] & 0x7FFFFFFF
        if not stream_id:
            if not increment:
                raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "a zero window increment")
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                raise _ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "window past 2^31-1")
            for each in self.calls.values():
                each._window_changed()
            return
        call = self.calls.get(stream_id)
        if call is None:
            return
        if not increment:
            self._reset(call, ErrorCode.PROTOCOL_ERROR)
            return
        if call.send_window + increment > MAX_WINDOW:
            self._reset(call, ErrorCode.FLOW_CONTROL_ERROR)
            return
        call.send_window += increment
        call._window_changed()

    def _rst_stream(self, stream_id: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise _ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "malformed RST_STREAM")
        if not stream_id or stream_id > self._last_stream:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on an idle stream")
        call = self.calls.get(stream_id)
        if call is None:
            self._client_closed(stream_id)
            return
        self._abandon(call)
        self._count_reset(call)

    def _reset(self, call: Call, code: ErrorCode) -> None:
        """The client broke the protocol on ``call``: reset it. A young stream counts as a
        rapid reset (the "made you reset" variant), as one the client resets does."""
        self.queue(rst_stream(call.id, code))
        self._abandon(call)
        self._count_reset(call)

    def _count_reset(self, call: Call) -> None:
        resets = self.resets
        young = time.monotonic() - call.opened < self._limits.reset_age
        if resets is not None and young and resets.take():
            self._abuse("rapid_reset", resets)

    def _settings(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if stream_id:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if len(payload):
                raise _ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a body")
            return
        if len(payload) % 6:
            raise _ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "malformed SETTINGS")
        for offset in range(0, len(payload), 6):
            key, value = _SETTING.unpack_from(payload, offset)
            if key == Setting.INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise _ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "window past 2^31-1")
                change = value - self.peer_window
                self.peer_window = value
                for call in self.calls.values():
                    call.send_window += change
                    if call.send_window > MAX_WINDOW:
                        raise _ConnectionError(
                            ErrorCode.FLOW_CONTROL_ERROR, "a stream window past 2^31-1"
                        )
                    call._window_changed()
            elif key == Setting.MAX_FRAME_SIZE:
                if not DEFAULT_FRAME <= value <= MAX_FRAME:
                    raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad SETTINGS_MAX_FRAME_SIZE")
                self.peer_frame = value
            elif key == Setting.ENABLE_PUSH and value > 1:
                raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad SETTINGS_ENABLE_PUSH")
            # The table size does not matter (the server's blocks never index); the other
            # settings bound what a server sends that this one never does.
        first = not self._settled
        self._settled = True
        self.queue(frame(FrameType.SETTINGS, ACK, 0))
        flood = self.settings
        if not first and flood is not None and flood.take():
            self._abuse("settings_flood", flood)

    def _ping(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if stream_id:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise _ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "malformed PING")
        flood = self.pings
        if flood is not None and flood.take():
            self._abuse("ping_flood", flood)
            return
        if not flags & ACK:
            self.queue(frame(FrameType.PING, ACK, 0, bytes(payload)))

    # -- frames out -------------------------------------------------------------

    def queue(self, *chunks: bytes | memoryview) -> None:
        """Frames to send; they go out together at the end of this turn of the loop."""
        if self.closing:
            return
        self._out.extend(chunks)
        if not self._flush_scheduled and not self._receiving:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush_now(self) -> None:
        """A message is queued: write it now, with whatever else is queued, unless frames
        are being read (their answers go out together when the read is done) or a call is
        in its initial sync: the answers to a client's first requests, which arrive
        together, then leave together at the end of the turn (one write a connection
        fewer, and one wake-up of the client).

        Not at the end of the turn once settled: a cache change wakes every stream that
        holds what changed in one turn, and the first woken (the longest connected) would
        otherwise wait for all the others (0.1 s for 10,000 streams) before its push left.
        """
        if self._receiving:
            return
        if self.unsettled:
            if not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self.flush)
            return
        self.flush()

    def flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out or self._transport is None:
            return
        self._out = []
        if len(out) == 1:
            self._transport.write(out[0])
        else:
            self._transport.write(b"".join(out))

    async def drained(self) -> None:
        """Return once the socket's write buffer is below its high-water mark."""
        while self.paused and not self.closing:
            self._drained = asyncio.get_running_loop().create_future()
            try:
                await self._drained
            finally:
                self._drained = None

    def credit(self, call: Call, amount: int) -> None:
        """``amount`` bytes of ``call`` were read: give the client room for them again."""
        if call.ended or call.reset:
            self._uncredited += amount
        else:
            call.recv_window += amount
            self.queue(window_update(call.id, amount))
            self._uncredited += amount
        self._maybe_credit_connection()

    def _maybe_credit_connection(self) -> None:
        if self._uncredited >= CONNECTION_WINDOW // 4:
            amount, self._uncredited = self._uncredited, 0
            self._recv_window += amount
            self.queue(window_update(0, amount))

    def release(self, call: Call) -> None:
        """The call is over: its buffered bytes are credited to the connection."""
        if self.calls.pop(call.id, None) is None:
            return
        if not call.is_settled:
            self._unsettled -= 1
        self._uncredited += call._uncredited
        call._uncredited = 0
        self._maybe_credit_connection()

    def _abandon(self, call: Call) -> None:
        """The client reset ``call`` (or left): wake what waits on it, cancel its handler."""
        call._lost()
        self.release(call)
        task = call.task
        if task is not None and not task.done():
            task.cancel()

    def drain(self) -> None:
        """From now on, remember the streams the server ends while their clients still send
        (see :meth:`streams_closed`)."""
        if self.draining is None:
            self.draining = set()

    async def streams_closed(self) -> None:
        """Return once the client has closed its side of every stream the server ended
        since :meth:`drain`, or has gone.

        A client may publish a stream's status only once both sides of it are closed: gRPC's
        own answers the trailers with RST_STREAM NO_ERROR, and if the connection ends before
        that is written, fails the call with UNAVAILABLE "Socket closed" although the
        trailers arrived. Closing the connection after this returns avoids that race.
        """
        if not self.draining or self.closing:
            return
        if self._drained_streams is None:
            self._drained_streams = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drained_streams)

    def _client_closed(self, stream_id: int) -> None:
        """The client closed its side of ``stream_id``, which the server had ended."""
        draining = self.draining
        if not draining:
            return
        draining.discard(stream_id)
        if not draining:
            self._streams_drained()

    def _streams_drained(self) -> None:
        waiter = self._drained_streams
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self, debug: bytes = b"server stopping") -> None:
        """Close the socket once what is queued is written; with calls still open, send
        GOAWAY NO_ERROR first and end them.

        A connection whose calls have all ended gets no GOAWAY: some clients (grpclib's)
        fail a call whose trailers arrived in the same read as a GOAWAY.
        """
        if self.calls:
            self._close(ErrorCode.NO_ERROR, debug)
            return
        if self._transport is not None and not self.closing:
            self.flush()
            self.closing = True
            self._shut(self._transport, linger=True)

    def _close(self, code: ErrorCode, debug: bytes) -> None:
        if self.closing or self._transport is None:
            return
        self.queue(goaway(self._last_stream, code, debug))
        self.flush()
        self.closing = True
        transport = self._transport
        for call in list(self.calls.values()):
            self._abandon(call)
        self._shut(transport)

    def _shut(self, transport: asyncio.Transport, *, linger: bool = False) -> None:
        """End the connection once what is queued is written, aborting it after the grace.

        A socket closed with bytes still unread in it answers with a reset, and a client
        that gets the reset may drop what it had not read yet: the trailers just written.
        So a connection ended in good order (``linger``) only shuts its sending side, where
        the transport can; what the client sends meanwhile is read and dropped
        (``closing``) until it closes its side too. A cut connection is closed at once.
        """
        if linger and transport.can_write_eof():
            transport.write_eof()
        else:
            transport.close()
        asyncio.get_running_loop().call_later(self._limits.close_grace, transport.abort)

    def _abuse(self, reason: CutReason, flood: Bucket) -> None:
        if self.closing:
            return
        self.cut = reason
        log_cut(self.peer or "an unknown peer", reason, flood, self._limits, self._opened)
        self._out.clear()  # the answers to the flood, unsent
        self._close(ErrorCode.ENHANCE_YOUR_CALM, reason.encode())
        try:
            self._on_cut(reason)
        except Exception:
            log.exception("counting a cut connection failed")


def _unpad(payload: memoryview) -> memoryview:
    if not payload:
        raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "padded frame without padding")
    padding = payload[0]
    if padding >= len(payload):
        raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "padding past the frame")
    return payload[1 : len(payload) - padding]


_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def _timeout(value: str) -> float | None:
    """Seconds of a ``grpc-timeout`` header, or ``None`` if it is malformed."""
    unit = _UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * unit
