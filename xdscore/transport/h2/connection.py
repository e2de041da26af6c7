"""One HTTP/2 connection of :class:`~xdscore.transport.Http2Transport`.

An ``asyncio.Protocol`` that parses frames as they arrive and answers what the connection
itself owes (SETTINGS and PING acknowledgements, flow-control credit) without a task;
each request stream becomes a :class:`~.call.Call` handed to a handler in a task of its
own. Every frame on a stream moves that stream's state through the table of
:mod:`.state`; what the table refuses, and what a frame carries that the RFC forbids, is a
stream error (RST_STREAM with its code) or a connection error (GOAWAY with its code, then
the end of the connection), each logged at DEBUG with the rule it broke.

The connection itself goes through :class:`ConnectionState`: the client's preface, its
first SETTINGS, open, closing (GOAWAY sent, or the server's side shut: what arrives is
dropped), closed (the transport is gone: nothing is written any more).

What it bounds, per connection:

* inbound bytes by flow control: a stream's bytes are credited back as its handler reads
  them, so a client never has more than one stream window (:data:`~.call.STREAM_WINDOW`)
  buffered per stream, nor more than :data:`CONNECTION_WINDOW` in all; a request larger
  than ``limit`` is refused from its 5-byte prefix, before its body is credited;
* open streams (:data:`MAX_STREAMS`; more are refused with REFUSED_STREAM);
* closed streams remembered (:data:`REMEMBERED_STREAMS`, the oldest forgotten first);
* header blocks (:data:`MAX_HEADER_BLOCK` bytes; larger ones cut the connection);
* rapid resets, PING and SETTINGS floods, by the token buckets of
  :class:`~xdscore.transport.ConnectionLimits` (the connection is cut with GOAWAY
  ENHANCE_YOUR_CALM).

Outbound, every frame the connection owes in one turn of the event loop goes to the socket
in one write; a large message is written in batches, waiting for the socket to drain and
for the client's flow-control windows.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import struct
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final, cast

from hpack.exceptions import HPACKError
from mypy_extensions import mypyc_attr

from ..._errors import GrpcStatus
from .._limits import Bucket, ConnectionLimits, CutReason, bucket, log_cut
from .._methods import let_go
from .call import STREAM_WINDOW, Call, Stream
from .headers import HeaderDecoder, MalformedRequest, RequestHead, check_trailers
from .intake import Intake
from .state import FORGOTTEN as _FORGOTTEN
from .state import (
    HALF_CLOSED_LOCAL,
    IDLE,
    OPEN,
    H2ConnectionError,
    H2StreamError,
    StreamInput,
    StreamState,
    ignored,
    sending,
    step,
)
from .wire import (
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
    frame,
    goaway,
    rst_stream,
    settings,
    trailers,
    window_update,
)

__all__ = [
    "CONNECTION_WINDOW",
    "HELD_BYTES",
    "MAX_HEADER_BLOCK",
    "MAX_STREAMS",
    "REMEMBERED_STREAMS",
    "Connection",
    "ConnectionState",
    "Handler",
    "ReadState",
    "Route",
]

HELD_BYTES = 65_536
"""Bytes a connection waiting for its turn to be read (see :class:`Intake`) takes in
before it stops reading."""

log = logging.getLogger("xdscore.transport")

CONNECTION_WINDOW = 16 << 20
"""Bytes a client may send on a connection before the server reads them."""
MAX_STREAMS = 100
"""Streams a client may have open on one connection."""
MAX_HEADER_BLOCK = 64 * 1024
"""Bytes of one request's header block (HEADERS and CONTINUATION frames together)."""
REMEMBERED_STREAMS = 128
"""Closed streams a connection remembers (how each closed decides what a late frame on it
is); older ones are forgotten, the oldest first."""

Handler = Callable[[Call], Coroutine[Any, Any, None]]
Route = Callable[[str], Handler | None]
"""The handler of a gRPC method path, or ``None`` for a method not served."""

REFUSAL_TEXT = b"This is a gRPC server: send POST with content-type application/grpc.\n"
"""The body of the plain HTTP answer to a request that is not gRPC."""

_U32 = struct.Struct(">L")
_SETTING = struct.Struct(">HL")

_OPEN: Final = OPEN
_RECV_HEADERS: Final = StreamInput.RECV_HEADERS
_RECV_HEADERS_END: Final = StreamInput.RECV_HEADERS_END
_RECV_DATA: Final = StreamInput.RECV_DATA
_RECV_DATA_END: Final = StreamInput.RECV_DATA_END
_RECV_WINDOW_UPDATE: Final = StreamInput.RECV_WINDOW_UPDATE
_RECV_RST_STREAM: Final = StreamInput.RECV_RST_STREAM
_RECV_PRIORITY: Final = StreamInput.RECV_PRIORITY
_SEND_END: Final = StreamInput.SEND_END_STREAM
_SEND_RST: Final = StreamInput.SEND_RST_STREAM


class ConnectionState(enum.Enum):
    """Where the connection stands (see the module docstring)."""

    PREFACE = "waiting for the client's preface"
    SETTINGS = "waiting for the client's first SETTINGS"
    OPEN = "open"
    CLOSING = "closing: what arrives is dropped, nothing more is queued"
    CLOSED = "closed: the transport is gone, nothing is written"

    __hash__ = object.__hash__


class ReadState(enum.Enum):
    """What the connection does with what it reads."""

    READY = "parsed as it arrives"
    PARSING = "inside a read: what it answers goes out together at its end"
    HELD = "buffered until its turn comes (see Intake)"
    HELD_PAUSED = "buffered until its turn comes, and reading stopped: HELD_BYTES arrived"

    __hash__ = object.__hash__


_PREFACE: Final = ConnectionState.PREFACE
_SETTINGS: Final = ConnectionState.SETTINGS
_CONNECTION_OPEN: Final = ConnectionState.OPEN
_CLOSING: Final = ConnectionState.CLOSING
_CLOSED: Final = ConnectionState.CLOSED
_READY: Final = ReadState.READY
_PARSING: Final = ReadState.PARSING
_HELD: Final = ReadState.HELD
_HELD_PAUSED: Final = ReadState.HELD_PAUSED


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
        self.state = _PREFACE
        self._reading = _READY
        self._unsettled = 0
        """Calls open that have not said they are settled (see :meth:`Call.settled`)."""
        self._ever_settled = False
        self._limit = limit
        self._limits = limits
        self._on_cut = on_cut
        self._on_close = on_close
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._decoder = HeaderDecoder(MAX_HEADER_BLOCK)
        self._block: bytearray | None = None
        """A header block being continued, begun by a HEADERS frame on ``_block_stream``
        with ``_block_flags``, naming ``_block_dependency`` (-1: no priority)."""
        self._block_stream = 0
        self._block_flags = 0
        self._block_dependency = -1
        self.calls: dict[int, Call] = {}
        """The streams whose handler runs."""
        self._remembered: dict[int, Stream] = {}
        """Streams over (or answered without a handler), oldest first."""
        self.last_stream = 0
        """The highest stream id the client has opened (the GOAWAY's last stream id)."""
        self._out: list[bytes | memoryview] = []
        self._flush_scheduled = False
        self.paused = False
        """Whether the transport asked to stop writing (its buffer is full)."""
        self._drained: asyncio.Future[None] | None = None
        self._streams_done: asyncio.Future[None] | None = None
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

    @property
    def closing(self) -> bool:
        """Whether the connection is closing or closed: it reads and queues nothing more."""
        state = self.state
        return state is _CLOSING or state is _CLOSED

    def stream_state(self, stream_id: int) -> StreamState:
        """The state of the stream ``stream_id`` (a forgotten one is ``FORGOTTEN``)."""
        stream = self._stream(stream_id)
        return stream.state if stream is not None else self._unknown(stream_id)

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
        reading = self._reading
        if (
            reading is _HELD
            or reading is _HELD_PAUSED
            or (intake is not None and self.unsettled and not intake.admit(self))
        ):
            # Its turn comes within a few turns; a client that sends a lot meanwhile is
            # stopped (the kernel buffers, TCP pushes back).
            buffer = self._buffer
            buffer += data
            if len(buffer) > HELD_BYTES and reading is not _HELD_PAUSED and self._transport:
                self._reading = _HELD_PAUSED
                self._transport.pause_reading()
            elif reading is not _HELD_PAUSED:
                self._reading = _HELD
            return
        self._handle(data)

    @property
    def unsettled(self) -> bool:
        """Whether a call on this connection is still in its initial sync, or none has
        settled yet: its reads are bounded per loop turn (see :class:`Intake`)."""
        return bool(self._unsettled) or not self._ever_settled

    def resume_intake(self) -> None:
        """The held read's turn has come: handle what was buffered, read again."""
        paused = self._reading is _HELD_PAUSED
        self._reading = _READY
        if self.closing:
            return
        if paused and self._transport is not None:
            self._transport.resume_reading()
        self._handle(b"")

    def call_settled(self, call: Call) -> None:
        """``call`` finished its initial sync (see :meth:`Call.settled`)."""
        if self.calls.get(call.id) is call:
            self._unsettled -= 1
            self._ever_settled = True

    def _handle(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        self._reading = _PARSING
        try:
            if self.state is not _PREFACE or self._read_preface():
                self._frames()
        except H2ConnectionError as error:
            log.debug("HTTP/2 protocol error from %s: %s", self.peer, error.rule)
            self._close(error.code, error.rule.encode())
        finally:
            self._reading = _READY
            if self._out and not self._flush_scheduled:
                # After the tasks this read woke: what they answer at once goes in the
                # same write as the frames this read queued (a SETTINGS ACK, credit).
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self.flush)

    def _read_preface(self) -> bool:
        buffer = self._buffer
        if len(buffer) < len(PREFACE):
            if not PREFACE.startswith(buffer):
                raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "not HTTP/2")
            return False
        if buffer[: len(PREFACE)] != PREFACE:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "not HTTP/2")
        del buffer[: len(PREFACE)]
        self.state = _SETTINGS
        return True

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        let_go(self._transport)
        self.state = _CLOSED
        self._out.clear()
        self._streams_closed()
        self.resume_writing()
        for call in list(self.calls.values()):
            self._abandon(call)
        self.calls.clear()
        self._remembered.clear()
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
                    raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "frame too large (4.2)")
                if end - at < 9 + size:
                    break
                kind = data[at + 3]
                flags = data[at + 4]
                stream_id = _U32.unpack_from(data, at + 5)[0] & 0x7FFFFFFF
                payload = view[at + 9 : at + 9 + size]
                at += 9 + size
                try:
                    self._frame(kind, flags, stream_id, payload)
                except H2StreamError as error:
                    self._stream_error(stream_id, error)
        finally:
            if at < end:
                self._buffer += view[at:]

    def _frame(self, kind: int, flags: int, stream_id: int, payload: memoryview) -> None:
        if self._block is not None and kind != FrameType.CONTINUATION:
            raise H2ConnectionError(
                ErrorCode.PROTOCOL_ERROR, "a header block interrupted by another frame (6.10)"
            )
        if self.state is not _CONNECTION_OPEN and kind != FrameType.SETTINGS:
            raise H2ConnectionError(
                ErrorCode.PROTOCOL_ERROR, "the first frame is not SETTINGS (3.4)"
            )
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
        elif kind == FrameType.PRIORITY:
            self._priority(stream_id, payload)
        elif kind == FrameType.GOAWAY:
            if stream_id:
                raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream (6.8)")
        elif kind == FrameType.PUSH_PROMISE:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "a client sent PUSH_PROMISE (8.4)")
        # Frames of unknown types are ignored, as the protocol asks (4.1, 5.5).

    def _stream(self, stream_id: int) -> Stream | None:
        """The stream ``stream_id``, running or remembered."""
        call = self.calls.get(stream_id)
        if call is not None:
            return call
        return self._remembered.get(stream_id)

    def _unknown(self, stream_id: int) -> StreamState:
        """The state of a stream the connection holds nothing of."""
        return IDLE if stream_id > self.last_stream else _FORGOTTEN

    def _data(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if not stream_id:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0 (6.1)")
        size = len(payload)
        self._recv_window -= size
        if self._recv_window < 0:
            raise H2ConnectionError(
                ErrorCode.FLOW_CONTROL_ERROR, "DATA past the connection's window (6.9.1)"
            )
        if flags & PADDED:
            payload = _unpad(payload)
        call = self.calls.get(stream_id)
        if call is not None and call.state is _OPEN and call.content_left < 0:
            # The common case: the bytes of a request, for its handler.
            call.recv_window -= size
            if call.recv_window < 0:
                self._credit_connection(size)
                raise H2StreamError(
                    ErrorCode.FLOW_CONTROL_ERROR, "DATA past the stream's window (6.9.1)"
                )
            call.data_received(payload, size - len(payload))
            if flags & END_STREAM:
                call.state = step(_OPEN, _RECV_DATA_END)
                call.remote_ended()
            return
        try:
            self._other_data(call, flags, stream_id, payload, size)
        except H2StreamError:
            self._credit_connection(size)
            raise

    def _other_data(
        self, call: Call | None, flags: int, stream_id: int, payload: memoryview, size: int
    ) -> None:
        """DATA on a stream that is not simply open for its handler."""
        end = flags & END_STREAM
        stream = call if call is not None else self._remembered.get(stream_id)
        state = stream.state if stream is not None else self._unknown(stream_id)
        after = step(state, _RECV_DATA_END if end else _RECV_DATA)
        if stream is None or ignored(state):
            self._credit_connection(size)
            return
        if stream.content_left >= 0:
            stream.content_left -= len(payload)
            if stream.content_left < 0 or (end and stream.content_left):
                raise H2StreamError(
                    ErrorCode.PROTOCOL_ERROR, "DATA does not add up to content-length (8.1.1)"
                )
        stream.state = after
        if call is None:
            # The server has finished the stream: the bytes go back to the connection.
            self._credit_connection(size)
            self._left_half_closed(state, after)
            return
        call.recv_window -= size
        if call.recv_window < 0:
            raise H2StreamError(
                ErrorCode.FLOW_CONTROL_ERROR, "DATA past the stream's window (6.9.1)"
            )
        call.data_received(payload, size - len(payload))
        if end:
            call.remote_ended()

    def _headers(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if not stream_id or not stream_id & 1:
            raise H2ConnectionError(
                ErrorCode.PROTOCOL_ERROR,
                "HEADERS on stream 0 or on an even stream, which a client cannot open (5.1.1)",
            )
        if flags & PADDED:
            payload = _unpad(payload)
        dependency = -1
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise H2ConnectionError(
                    ErrorCode.FRAME_SIZE_ERROR, "a HEADERS frame too short for its priority (6.2)"
                )
            dependency = _U32.unpack_from(payload)[0] & 0x7FFFFFFF
            payload = payload[5:]
        if flags & END_HEADERS:
            self._header_block(stream_id, flags, dependency, bytes(payload))
            return
        self._block = bytearray(payload)
        self._block_stream = stream_id
        self._block_flags = flags
        self._block_dependency = dependency

    def _continuation(self, flags: int, stream_id: int, payload: memoryview) -> None:
        block = self._block
        if block is None or stream_id != self._block_stream:
            raise H2ConnectionError(
                ErrorCode.PROTOCOL_ERROR, "a CONTINUATION that continues no header block (6.10)"
            )
        block += payload
        if len(block) > MAX_HEADER_BLOCK:
            raise H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "header block too large")
        if flags & END_HEADERS:
            self._block = None
            self._header_block(stream_id, self._block_flags, self._block_dependency, bytes(block))

    def _header_block(self, stream_id: int, flags: int, dependency: int, block: bytes) -> None:
        """A whole header block: a new request, or trailers (or a block the state refuses)."""
        end = flags & END_STREAM
        stream = self._stream(stream_id)
        if stream is None and stream_id > self.last_stream:
            self._open(stream_id, bool(end), dependency, block)
            return
        try:
            fields = self._decoder.decode(block)
        except HPACKError as error:
            raise H2ConnectionError(ErrorCode.COMPRESSION_ERROR, str(error)) from None
        state = stream.state if stream is not None else _FORGOTTEN
        after = step(state, _RECV_HEADERS_END if end else _RECV_HEADERS)
        if stream is None or ignored(state):
            return
        if dependency == stream_id:
            raise H2StreamError(
                ErrorCode.PROTOCOL_ERROR, "a stream cannot depend on itself (5.3.1)"
            )
        try:
            check_trailers(fields)
        except MalformedRequest as error:
            raise H2StreamError(ErrorCode.PROTOCOL_ERROR, str(error)) from None
        if stream.content_left > 0:
            raise H2StreamError(
                ErrorCode.PROTOCOL_ERROR, "the request ended short of its content-length (8.1.1)"
            )
        stream.state = after
        call = self.calls.get(stream_id)
        if call is not None:
            call.remote_ended()
        else:
            self._left_half_closed(state, after)

    def _open(self, stream_id: int, end: bool, dependency: int, block: bytes) -> None:
        """The client opens ``stream_id`` with the request ``block``."""
        problem: str | None = None
        head: RequestHead | None = None
        try:
            head = self._decoder.request(block)
        except HPACKError as error:
            raise H2ConnectionError(ErrorCode.COMPRESSION_ERROR, str(error)) from None
        except MalformedRequest as error:
            problem = str(error)
        self.last_stream = stream_id
        if dependency == stream_id:
            problem = "a stream cannot depend on itself (5.3.1)"
        elif head is not None and end and head.content_length > 0:
            problem = "the request ended short of its content-length (8.1.1)"
        state = step(IDLE, _RECV_HEADERS_END if end else _RECV_HEADERS)
        if head is None or problem is not None:
            log.debug("HTTP/2 stream error from %s on stream %d: %s", self.peer, stream_id, problem)
            self.reset(
                Stream(stream_id, state, send_window=self.peer_window), ErrorCode.PROTOCOL_ERROR
            )
            # Reset for the client's fault: counted as rapid resets are.
            self._count_young_reset(time.monotonic())
            return
        if len(self.calls) >= MAX_STREAMS:
            self.reset(
                Stream(stream_id, state, send_window=self.peer_window), ErrorCode.REFUSED_STREAM
            )
            return
        call = Call(
            self,
            stream_id,
            state,
            path=head.path,
            metadata=head.fields,
            limit=self._limit,
            content_length=head.content_length,
        )
        if head.method != "POST":
            self._refuse(call, 405)
            return
        if not head.fields.get("content-type", "").startswith("application/grpc"):
            self._refuse(call, 415)
            return
        handler = self._route(head.path)
        if handler is None:
            self.queue(
                *trailers(
                    stream_id,
                    GrpcStatus.UNIMPLEMENTED.value,
                    f"method {head.path} not implemented",
                    headers_sent=False,
                    max_frame=self.peer_frame,
                )
            )
            call.state = step(state, _SEND_END)
            self._remember(call.kept())
            return
        timeout = head.fields.get("grpc-timeout")
        if timeout:
            call.deadline = _timeout(timeout)
        self.calls[stream_id] = call
        self._unsettled += 1
        call.task = asyncio.get_running_loop().create_task(handler(call))

    def _refuse(self, call: Call, status: int) -> None:
        """Answer a request that is not gRPC with HTTP ``status`` (its own task: the body
        waits for the client's window; the stream counts as open until it is sent)."""
        call.is_settled = True
        self.calls[call.id] = call
        call.task = asyncio.get_running_loop().create_task(call.refuse(status, REFUSAL_TEXT))

    def _window_update(self, stream_id: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a WINDOW_UPDATE not 4 bytes (6.9)")
        increment = _U32.unpack(payload)[0] & 0x7FFFFFFF
        if not stream_id:
            if not increment:
                raise H2ConnectionError(
                    ErrorCode.PROTOCOL_ERROR, "a connection WINDOW_UPDATE of 0 (6.9)"
                )
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                raise H2ConnectionError(
                    ErrorCode.FLOW_CONTROL_ERROR, "the connection's window past 2^31-1 (6.9.1)"
                )
            for each in self.calls.values():
                each.window_opened()
            return
        stream: Stream | None = self.calls.get(stream_id)
        if stream is None or not sending(stream.state):
            if stream is None:
                stream = self._remembered.get(stream_id)
            state = stream.state if stream is not None else self._unknown(stream_id)
            step(state, _RECV_WINDOW_UPDATE)
            if stream is None or ignored(state):
                return
        if not increment:
            raise H2StreamError(ErrorCode.PROTOCOL_ERROR, "a stream WINDOW_UPDATE of 0 (6.9)")
        if stream.send_window + increment > MAX_WINDOW:
            raise H2StreamError(
                ErrorCode.FLOW_CONTROL_ERROR, "the stream's window past 2^31-1 (6.9.1)"
            )
        stream.send_window += increment
        stream.window_opened()

    def _rst_stream(self, stream_id: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a RST_STREAM not 4 bytes (6.4)")
        if not stream_id:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0 (6.4)")
        call = self.calls.get(stream_id)
        if call is not None:
            call.state = step(call.state, _RECV_RST_STREAM)
            self._abandon(call)
            self._count_reset(call)
            return
        stream = self._remembered.get(stream_id)
        state = stream.state if stream is not None else self._unknown(stream_id)
        after = step(state, _RECV_RST_STREAM)
        if stream is not None and not ignored(state):
            stream.state = after
            self._left_half_closed(state, after)

    def _priority(self, stream_id: int, payload: memoryview) -> None:
        if not stream_id:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0 (6.3)")
        state = self.stream_state(stream_id)
        step(state, _RECV_PRIORITY)
        if ignored(state):
            return
        if len(payload) != 5:
            raise H2StreamError(ErrorCode.FRAME_SIZE_ERROR, "a PRIORITY frame not 5 bytes (6.3)")
        if _U32.unpack_from(payload)[0] & 0x7FFFFFFF == stream_id:
            raise H2StreamError(
                ErrorCode.PROTOCOL_ERROR, "a stream cannot depend on itself (5.3.1)"
            )

    def _settings(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if stream_id:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream (6.5)")
        if flags & ACK:
            if len(payload):
                raise H2ConnectionError(
                    ErrorCode.FRAME_SIZE_ERROR, "a SETTINGS ACK with a body (6.5)"
                )
            return
        if len(payload) % 6:
            raise H2ConnectionError(
                ErrorCode.FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes (6.5)"
            )
        for offset in range(0, len(payload), 6):
            key, value = _SETTING.unpack_from(payload, offset)
            if key == Setting.INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise H2ConnectionError(
                        ErrorCode.FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE past 2^31-1"
                    )
                change = value - self.peer_window
                self.peer_window = value
                streams: list[Stream] = [*self.calls.values(), *self._remembered.values()]
                for stream in streams:
                    stream.send_window += change
                    if stream.send_window > MAX_WINDOW:
                        raise H2ConnectionError(
                            ErrorCode.FLOW_CONTROL_ERROR, "a stream window past 2^31-1 (6.9.2)"
                        )
                    stream.window_opened()
            elif key == Setting.MAX_FRAME_SIZE:
                if not DEFAULT_FRAME <= value <= MAX_FRAME:
                    raise H2ConnectionError(
                        ErrorCode.PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range (6.5.2)"
                    )
                self.peer_frame = value
            elif key == Setting.ENABLE_PUSH and value > 1:
                raise H2ConnectionError(
                    ErrorCode.PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH other than 0 or 1 (6.5.2)"
                )
            # The table size does not matter (the server's blocks never index); the other
            # settings bound what a server sends that this one never does.
        first = self.state is _SETTINGS
        self.state = _CONNECTION_OPEN
        self.queue(frame(FrameType.SETTINGS, ACK, 0))
        flood = self.settings
        if not first and flood is not None and flood.take():
            self._abuse("settings_flood", flood)

    def _ping(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if stream_id:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "PING on a stream (6.7)")
        if len(payload) != 8:
            raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a PING not 8 bytes (6.7)")
        flood = self.pings
        if flood is not None and flood.take():
            self._abuse("ping_flood", flood)
            return
        if not flags & ACK:
            self.queue(frame(FrameType.PING, ACK, 0, bytes(payload)))

    # -- stream errors and resets -------------------------------------------------

    def _stream_error(self, stream_id: int, error: H2StreamError) -> None:
        """The client broke the protocol on ``stream_id``: reset it with the error's code.
        A stream the client never opened cannot be reset (6.4): that is a connection error."""
        stream = self._stream(stream_id)
        if stream is None and stream_id > self.last_stream:
            raise H2ConnectionError(error.code, f"{error.rule}, on an idle stream")
        log.debug("HTTP/2 stream error from %s on stream %d: %s", self.peer, stream_id, error.rule)
        if stream is None:
            self.queue(rst_stream(stream_id, error.code))
            return
        call = self.calls.get(stream_id)
        task = call.task if call is not None else None
        self.reset(stream, error.code)
        if call is not None:
            if task is not None and not task.done():
                task.cancel()
            # A young stream reset for the client's fault counts as a rapid reset (the
            # "made you reset" variant), as one the client resets does.
            self._count_reset(call)

    def reset(self, stream: Stream, code: ErrorCode) -> None:
        """Reset ``stream`` with ``code`` and release it (a handler still running is the
        caller's to cancel)."""
        self.queue(rst_stream(stream.id, code))
        before = stream.state
        stream.state = step(before, _SEND_RST)
        self.release(stream)
        self._left_half_closed(before, stream.state)

    def _count_reset(self, call: Call) -> None:
        self._count_young_reset(call.opened)

    def _count_young_reset(self, opened: float) -> None:
        resets = self.resets
        young = time.monotonic() - opened < self._limits.reset_age
        if resets is not None and young and resets.take():
            self._abuse("rapid_reset", resets)

    def _abandon(self, call: Call) -> None:
        """The client reset ``call`` (or left): release it and cancel its handler, which
        ends whatever of it waits (waking its reader as well would only race the
        cancellation, and a reader that raises first leaves its error in a cycle)."""
        task = call.task
        self.release(call)
        if task is not None and not task.done():
            task.cancel()

    # -- frames out -------------------------------------------------------------

    def queue(self, *chunks: bytes | memoryview) -> None:
        """Frames to send; they go out together at the end of this turn of the loop."""
        if self.closing:
            return
        self._out.extend(chunks)
        if not self._flush_scheduled and self._reading is not _PARSING:
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
        if self._reading is _PARSING:
            return
        if self.unsettled:
            if not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self.flush)
            return
        self.flush()

    def flush(self) -> None:
        """Write what is queued, in one write; nothing once the transport is closing (the
        client left: uvloop's transports refuse a write then, asyncio's drop it)."""
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        self._out = []
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if len(out) == 1:
            transport.write(out[0])
        else:
            transport.write(b"".join(out))

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
        if call.state is _OPEN and self.calls.get(call.id) is call:
            call.recv_window += amount
            self.queue(window_update(call.id, amount))
        self._credit_connection(amount)

    def _credit_connection(self, amount: int) -> None:
        self._uncredited += amount
        if self._uncredited >= CONNECTION_WINDOW // 4:
            amount, self._uncredited = self._uncredited, 0
            self._recv_window += amount
            self.queue(window_update(0, amount))

    def release(self, stream: Stream) -> None:
        """The stream's handler is done (or it never had one): what the client sent and no
        one read is credited to the connection, and the connection remembers how the stream
        stands."""
        if isinstance(stream, Call):
            if self.calls.get(stream.id) is not stream:
                return  # released already
            del self.calls[stream.id]
            if not stream.is_settled:
                self._unsettled -= 1
            self._credit_connection(stream.unread())
            stream = stream.kept()
        self._remember(stream)

    def _remember(self, stream: Stream) -> None:
        remembered = self._remembered
        remembered[stream.id] = stream
        if len(remembered) > REMEMBERED_STREAMS:
            oldest = next(iter(remembered))
            forgotten = remembered.pop(oldest)
            self._left_half_closed(forgotten.state, _FORGOTTEN)

    def half_closed(self) -> bool:
        """Whether the server ended a stream the client has not closed its side of."""
        return any(stream.state is HALF_CLOSED_LOCAL for stream in self._remembered.values())

    async def streams_closed(self) -> None:
        """Return once the client has closed its side of every stream the server ended, or
        has gone.

        A client may publish a stream's status only once both sides of it are closed: gRPC's
        own answers the trailers with RST_STREAM NO_ERROR, and if the connection ends before
        that is written, fails the call with UNAVAILABLE "Socket closed" although the
        trailers arrived. Closing the connection after this returns avoids that race.
        """
        if self.closing or not self.half_closed():
            return
        if self._streams_done is None:
            self._streams_done = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._streams_done)

    def _left_half_closed(self, before: StreamState, after: StreamState) -> None:
        """A stream the server had ended moved on: the client closed its side (or the
        stream was reset or forgotten)."""
        if (
            before is HALF_CLOSED_LOCAL
            and after is not HALF_CLOSED_LOCAL
            and self._streams_done is not None
            and not self.half_closed()
        ):
            self._streams_closed()

    def _streams_closed(self) -> None:
        waiter = self._streams_done
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
            self.state = _CLOSING
            self._shut(self._transport, linger=True)

    def _close(self, code: ErrorCode, debug: bytes) -> None:
        if self.closing or self._transport is None:
            return
        self.queue(goaway(self.last_stream, code, debug))
        self.flush()
        self.state = _CLOSING
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
        raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "a padded frame without its padding")
    padding = payload[0]
    if padding >= len(payload):
        raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "padding past the frame (6.1)")
    return payload[1 : len(payload) - padding]


_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def _timeout(value: str) -> float | None:
    """Seconds of a ``grpc-timeout`` header, or ``None`` if it is malformed."""
    unit = _UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * unit
