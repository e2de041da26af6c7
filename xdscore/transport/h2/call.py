"""One HTTP/2 stream of :class:`~xdscore.transport.Http2Transport`, and the gRPC call on it.

A :class:`Stream` is what the connection keeps of every stream it knows: its
:class:`~.state.StreamState`, its send window (a WINDOW_UPDATE may still raise it past
2^31-1) and the bytes its ``content-length`` still owes. A :class:`Call` is a stream with a
handler running: the runtime's byte stream (``receive``, ``send_parts``, ``end``,
``writable``, ``closed``), what the client sent and the handler has not read, and how far
the response has gone. The connection moves the state for the frames it receives
(``data_received``, ``remote_ended``, ``window_opened``); the call moves it for the
frames it sends, through the same table (:mod:`.state`). Once a call is over the
connection keeps a :class:`Stream` of it, a bounded number of them, for the frames still on
their way; a stream answered without a handler (refused, reset, UNIMPLEMENTED) is only
ever a :class:`Stream`.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import mypyc_attr

from ..._errors import GrpcStatus, RemoteProtocolError, StreamClosed
from .._messages import BATCH_BYTES, buffers, message_size, take
from .state import (
    HALF_CLOSED_LOCAL,
    HALF_CLOSED_REMOTE,
    RESET_RECEIVED,
    RESET_SENT,
    StreamInput,
    StreamState,
    sending,
    step,
)
from .wire import ErrorCode, data_header, plain_response_headers, response_headers, trailers

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["STREAM_WINDOW", "Call", "Response", "Stream"]

STREAM_WINDOW = 1 << 20
"""Bytes a client may send on a stream before the server reads them."""

_SEND_HEADERS: Final = StreamInput.SEND_HEADERS
_SEND_END: Final = StreamInput.SEND_END_STREAM


class Response(enum.Enum):
    """How far the server's response has gone (its end is the stream's state)."""

    NOT_STARTED = "nothing sent"
    STARTED = "headers sent"
    MID_MESSAGE = "part of a message sent: only a reset can follow"

    __hash__ = object.__hash__


_NOT_STARTED: Final = Response.NOT_STARTED
_STARTED: Final = Response.STARTED
_MID_MESSAGE: Final = Response.MID_MESSAGE


@mypyc_attr(allow_interpreted_subclasses=True)
class Stream:
    """What the connection keeps of a stream: its state, its send window, and the DATA
    bytes its request's ``content-length`` still owes (-1: it declared none)."""

    __slots__ = ("content_left", "id", "send_window", "state")

    def __init__(
        self, stream_id: int, state: StreamState, *, send_window: int, content_left: int = -1
    ) -> None:
        self.id = stream_id
        self.state = state
        self.send_window = send_window
        self.content_left = content_left

    def window_opened(self) -> None:
        """The client gave the stream or the connection room (nothing waits on a stream
        without a handler)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class Call(Stream):
    """One gRPC call (an HTTP/2 stream) as message bytes each way.

    The client going away (its RST_STREAM, or the connection lost) cancels the handler's
    task; a read or a write after that is :class:`~xdscore.StreamClosed`.
    """

    __slots__ = (
        "_buffer",
        "_connection",
        "_limit",
        "_readable",
        "_uncredited",
        "_window_open",
        "deadline",
        "is_settled",
        "metadata",
        "opened",
        "path",
        "recv_window",
        "response",
        "task",
    )

    def __init__(
        self,
        connection: Connection,
        stream_id: int,
        state: StreamState,
        *,
        path: str,
        metadata: Mapping[str, str],
        limit: int,
        content_length: int = -1,
    ) -> None:
        super().__init__(
            stream_id, state, send_window=connection.peer_window, content_left=content_length
        )
        self._connection = connection
        self.response = _NOT_STARTED
        self.path = path
        self.metadata = metadata
        """The request's fields other than its pseudo-headers."""
        self._limit = limit
        """The largest message the call reads."""
        self.opened = time.monotonic()
        self.recv_window = STREAM_WINDOW
        self._buffer = bytearray()
        self._uncredited = 0
        self._readable: asyncio.Future[None] | None = None
        self._window_open: asyncio.Future[None] | None = None
        self.deadline: float | None = None
        self.task: asyncio.Task[None] | None = None
        self.is_settled = False
        """Whether the handler said the call finished its initial sync (:meth:`settled`)."""

    def kept(self) -> Stream:
        """What the connection keeps of the call once it is over."""
        return Stream(
            self.id, self.state, send_window=self.send_window, content_left=self.content_left
        )

    @property
    def peer(self) -> str:
        return self._connection.peer

    @property
    def peer_certificate(self) -> Mapping[str, Any] | None:
        return self._connection.peer_certificate

    def settled(self) -> None:
        """The call has finished its initial sync: once every call on the connection has,
        its reads are no longer bounded per loop turn (see :class:`~.intake.Intake`)."""
        if not self.is_settled:
            self.is_settled = True
            self._connection.call_settled(self)

    def _over(self) -> bool:
        """Whether the stream can carry nothing more from the server: reset either way,
        ended by the server, or on a connection that is closing."""
        return not sending(self.state) or self._connection.closing

    # -- what the connection tells the call -----------------------------------------------

    def data_received(self, data: bytes | memoryview, padding: int) -> None:
        """DATA for the handler (``padding`` bytes of the frame are credited with it)."""
        self._buffer += data
        self._uncredited += len(data) + padding
        self._wake_reader()

    def remote_ended(self) -> None:
        """The client ended its side (the state has moved already)."""
        self._wake_reader()

    def window_opened(self) -> None:
        """The client's WINDOW_UPDATE or SETTINGS gave the stream or the connection room."""
        waiter = self._window_open
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def unread(self) -> int:
        """The bytes the client sent that were neither read nor credited back yet."""
        return self._uncredited

    def _wake_reader(self) -> None:
        readable = self._readable
        if readable is not None and not readable.done():
            readable.set_result(None)

    # -- reading ---------------------------------------------------------------

    async def receive(self) -> bytes | None:
        """The next message, or ``None`` once the client ended its side."""
        buffer = self._buffer
        while True:
            state = self.state
            if not sending(state) or self._connection.closing:
                raise StreamClosed("the stream is closed")
            if len(buffer) >= 5:
                size = message_size(buffer, self._limit)
                if len(buffer) >= size + 5:
                    message = bytes(buffer[5 : size + 5])
                    del buffer[: size + 5]
                    if self._uncredited >= STREAM_WINDOW // 2:
                        self._credit()
                    return message
            if state is HALF_CLOSED_REMOTE:
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
        if self._over():
            raise StreamClosed("the stream is closed")
        connection = self._connection
        size = sum(map(len, parts))
        if self._fits(size):
            # The common case: the whole message in one DATA frame, window to spare.
            self._queue_message(size, parts)
            if connection.paused:
                await connection.drained()
            return
        self._start()
        await self._write(buffers([b"\x00" + size.to_bytes(4, "big"), *parts]), end=False)

    def try_send_parts(self, parts: Sequence[bytes]) -> bool:
        """Write one message at once if it fits the flow-control windows (and one batch)
        and the connection is not paused; ``False`` (nothing written) otherwise."""
        connection = self._connection
        if self._over() or connection.paused:
            return False
        size = sum(map(len, parts))
        if self._fits(size):
            self._queue_message(size, parts)
            return True
        if size + 5 > min(self.send_window, connection.send_window, BATCH_BYTES):
            return False
        self._start()
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

    def _start(self) -> None:
        """The response's headers go first, once."""
        if self.response is _NOT_STARTED:
            self.state = step(self.state, _SEND_HEADERS)
            self.response = _STARTED
            self._connection.queue(response_headers(self.id))

    def _queue_message(self, size: int, parts: Sequence[bytes]) -> None:
        connection = self._connection
        self._start()
        self.send_window -= size + 5
        connection.send_window -= size + 5
        connection.queue(data_header(size + 5, self.id), b"\x00" + size.to_bytes(4, "big"), *parts)
        connection.flush_now()

    async def _write(self, pending: deque[memoryview], *, end: bool) -> None:
        """Write ``pending`` as DATA frames as the windows allow, in batches; the last frame
        ends the stream if ``end``. A message cut short can only be followed by a reset."""
        connection = self._connection
        self.response = _MID_MESSAGE
        while pending:
            if self._over():
                raise StreamClosed("the stream is closed")
            room = min(self.send_window, connection.send_window)
            if room <= 0:
                await self._wait_window()
                continue
            batch = min(room, BATCH_BYTES)
            max_frame = connection.peer_frame
            while batch > 0 and pending:
                piece = take(pending, min(batch, max_frame))
                size = len(piece)
                last = end and not pending
                connection.queue(data_header(size, self.id, end_stream=last), piece)
                if last:
                    self.state = step(self.state, _SEND_END)
                self.send_window -= size
                connection.send_window -= size
                batch -= size
            connection.flush()
            if connection.paused:
                await connection.drained()
        self.response = _STARTED

    async def _wait_window(self) -> None:
        if self._over():
            raise StreamClosed("the stream is closed")
        self._window_open = asyncio.get_running_loop().create_future()
        try:
            await self._window_open
        finally:
            self._window_open = None
        if self._over():
            raise StreamClosed("the stream is closed")

    def writable(self, size: int) -> bool:
        """Whether a message of ``size`` bytes goes out without waiting for the client."""
        connection = self._connection
        room = min(self.send_window, connection.send_window)
        return not connection.paused and room >= size + 5

    async def end(self, message: str) -> None:
        """End the stream with status OK and ``message``."""
        if self._over():
            raise StreamClosed("the stream is closed")
        self.finish(GrpcStatus.OK, message)

    def finish(self, status: GrpcStatus, message: str | None) -> None:
        """Send the trailers (once), then release the stream."""
        connection = self._connection
        if not self._over():
            if self.response is _MID_MESSAGE:
                # The client holds part of a message: no status can follow it.
                connection.reset(self, ErrorCode.CANCEL)
                return
            connection.queue(
                *trailers(
                    self.id,
                    status.value,
                    message,
                    headers_sent=self.response is _STARTED,
                    max_frame=connection.peer_frame,
                )
            )
            self.state = step(self.state, _SEND_END)
            if self.state is HALF_CLOSED_LOCAL and self._buffer:
                # The client is inside a message (one refused from its prefix): tell it to
                # stop sending. Otherwise no RST_STREAM follows the trailers: some clients
                # (grpclib's) fail a call whose trailers arrive in the same read as a reset;
                # what such a client sends later is credited to the connection and dropped.
                connection.reset(self, ErrorCode.NO_ERROR)
                return
        connection.release(self)

    async def refuse(self, status: int, text: bytes) -> None:
        """Answer a request that is not gRPC with HTTP ``status`` and ``text``: its body
        waits for the client's flow-control windows, as any response's would."""
        connection = self._connection
        try:
            self.state = step(self.state, _SEND_HEADERS)
            self.response = _STARTED
            connection.queue(plain_response_headers(self.id, status, len(text)))
            await self._write(buffers([text]), end=True)
        except StreamClosed:
            pass
        finally:
            connection.release(self)

    async def closed(self) -> None:
        """Return once the client has gone away: at once if it has; otherwise this waits
        until the handler is cancelled, which is what the client going away does."""
        state = self.state
        if state is RESET_RECEIVED or state is RESET_SENT or self._connection.closing:
            return
        await asyncio.get_running_loop().create_future()
