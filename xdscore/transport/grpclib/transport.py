"""The grpclib transport: ADS and every per-type discovery service on one port.

The adapter moves bytes only: a pass-through codec keeps grpclib from decoding anything,
each gRPC stream is handed to :meth:`XdsServer.run_stream` as a byte stream (each unary
``Fetch<Type>`` call's request to :meth:`XdsServer.fetch`), and a
:class:`~xdscore.ProtocolError` the runtime raises becomes the gRPC status it carries.
The gRPC method names of every type come from the type registry. The Client Status
Discovery Service (CSDS) is served on the same port.

Two bounds live here, where the bytes arrive. A message's size is checked against the
server's ``limits.max_request_bytes`` from its 5-byte gRPC prefix, before any of its body is
read (grpclib would buffer a declared 4 GiB in full first). And each HTTP/2 connection is
cut when it resets streams, pings or sends SETTINGS faster than :class:`ConnectionLimits`
allow, malformed requests are reset and unknown frames ignored (see :mod:`.connection`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal

import grpclib.const
import grpclib.server
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, StreamTerminatedError
from h2.exceptions import StreamClosedError

from ..._errors import GrpcStatus, ProtocolError, RemoteProtocolError, StreamClosed
from ...protocol._state import ProtocolName
from ...server._server import XdsServer
from ...server._stream import ByteStream
from ...server._tasks import forget_frames
from .._limits import ConnectionLimits, CutReason
from .._messages import message_size
from .._methods import ACCEPT_BACKLOG, Method, listening_socket, served_methods
from .._tls import peer_identity
from .connection import GuardedH2Protocol
from .messages import write_message

__all__ = ["GrpclibTransport", "RawCodec"]

log = logging.getLogger("xdscore.transport")

_GONE = (StreamClosedError, StreamTerminatedError, ConnectionError)
"""What grpclib and h2 raise when the client reset its stream or dropped its connection."""


class RawCodec(CodecBase):
    """Hands message bytes through untouched, in both directions."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> Any:
        return data


_Handler = Callable[[grpclib.server.Stream[Any, Any]], Awaitable[None]]


class _Services:
    """The grpclib servable: a mapping from method paths to handlers."""

    def __init__(self, mapping: dict[str, grpclib.const.Handler]) -> None:
        self._mapping = mapping

    def __mapping__(self) -> dict[str, grpclib.const.Handler]:
        return self._mapping


class _Server(grpclib.server.Server):
    """grpclib's server, remembering its connections so that stopping can close them, and
    serving each with the bounds of ``connection_limits``.

    grpclib cancels request handlers on ``close()`` but leaves the HTTP/2 connections open,
    so a client would keep opening streams on a server that is gone.
    """

    def __init__(
        self,
        *args: Any,
        connection_limits: ConnectionLimits,
        on_cut: Callable[[CutReason], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._connection_limits = connection_limits
        self._on_cut = on_cut
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()

    def _protocol_factory(self) -> Any:
        # grpclib's factory creates and registers the connection's handler; the connection
        # itself is ours.
        plain = super()._protocol_factory()
        protocol = GuardedH2Protocol(
            plain.handler,
            plain.config,
            plain.h2_config,
            limits=self._connection_limits,
            on_cut=self._on_cut,
        )
        self._connections.add(protocol)
        return protocol

    def drop_connections(self) -> None:
        for protocol in list(self._connections):
            processor = getattr(protocol, "processor", None)
            if processor is not None:
                processor.close("server stopping")


STOP_GRACE = 1.0
"""Seconds :meth:`GrpclibTransport.stop` waits for ended streams to send their trailers."""


class GrpclibTransport:
    """Serves ``server`` over HTTP/2 with grpclib; use as an async context manager.

    ``connection_limits`` bounds, per connection, the HTTP/2 frames that cost the server work
    (rapid stream resets, PING and SETTINGS floods; see :class:`ConnectionLimits`); a
    connection past them is cut with GOAWAY ENHANCE_YOUR_CALM and counted in
    ``xdscore_connections_cut_total{reason}``.
    """

    def __init__(
        self, server: XdsServer, *, connection_limits: ConnectionLimits | None = None
    ) -> None:
        self.server = server
        self.connection_limits = connection_limits or ConnectionLimits()
        mapping: dict[str, grpclib.const.Handler] = {}
        for method in served_methods():
            self._add(mapping, method.path, self._handler(method), unary=method.unary)
        self._grpc = _Server(
            [_Services(mapping)],
            codec=RawCodec(),
            connection_limits=self.connection_limits,
            on_cut=self._connection_cut,
        )
        self.port: int | None = None
        self._stream_tasks: set[asyncio.Task[Any]] = set()
        """The xDS stream handlers running: stopping lets them send their trailers."""

    def _connection_cut(self, reason: CutReason) -> None:
        metrics = self.server.metrics
        if metrics is not None:
            metrics.connections_cut.labels(reason).inc()

    @staticmethod
    def _add(
        mapping: dict[str, grpclib.const.Handler],
        path: str,
        handler: _Handler,
        *,
        unary: bool = False,
    ) -> None:
        cardinality = (
            grpclib.const.Cardinality.UNARY_UNARY
            if unary
            else grpclib.const.Cardinality.STREAM_STREAM
        )
        mapping[path] = grpclib.const.Handler(handler, cardinality, None, None)

    def _handler(self, method: Method) -> _Handler:
        if method.kind == "stream":
            return self._stream(method.type_url, delta=method.delta)
        if method.kind == "fetch":
            assert method.type_url is not None
            return self._fetch(method.type_url)
        if method.kind == "status_stream":
            return self._status_stream
        return self._status_fetch

    def _stream(self, type_url: str | None, *, delta: bool) -> _Handler:
        protocol: ProtocolName = "delta" if delta else "sotw"
        server = self.server

        async def handle(stream: grpclib.server.Stream[Any, Any]) -> None:
            peer = _peer(stream)
            task = asyncio.current_task()
            if task is not None:
                task.add_done_callback(_WrapperReleased(stream))
                self._stream_tasks.add(task)
                task.add_done_callback(self._stream_tasks.discard)
            with _FramesForgotten():
                async with _statuses(peer):
                    await server.run_stream(
                        _GrpclibStream(stream, server.limits.max_request_bytes),
                        protocol=protocol,
                        type_url=type_url,
                        peer=peer,
                        identity=peer_identity(stream.peer.cert()),
                    )

        return handle

    def _fetch(self, type_url: str) -> _Handler:
        server = self.server

        async def handle(stream: grpclib.server.Stream[Any, Any]) -> None:
            peer = _peer(stream)
            async with _statuses(peer):
                data = await self._wrap(stream).receive()
                if data is None:
                    raise RemoteProtocolError("the call carried no request")
                answer = await server.fetch(
                    data,
                    type_url=type_url,
                    peer=peer,
                    identity=peer_identity(stream.peer.cert()),
                )
                await stream.send_message(answer)

        return handle

    async def _status_stream(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        with _FramesForgotten():
            async with _statuses(_peer(stream)):
                identity = peer_identity(stream.peer.cert())
                try:
                    await self.server.client_status.run_stream(self._wrap(stream), identity)
                except StreamClosed:
                    return

    async def _status_fetch(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        async with _statuses(_peer(stream)):
            data = await self._wrap(stream).receive()
            identity = peer_identity(stream.peer.cert())
            answer = self.server.client_status.answer(data or b"", identity)
            await stream.send_message(answer)

    def _wrap(self, stream: grpclib.server.Stream[Any, Any]) -> _GrpclibStream:
        return _GrpclibStream(stream, self.server.limits.max_request_bytes)

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        ssl_context: ssl.SSLContext | None = None,
        reuse_port: bool = False,
    ) -> int:
        """Listen on ``host:port`` (0 picks a free port); return the bound port.

        ``reuse_port`` sets SO_REUSEPORT, so that several processes (``xdscore serve
        --workers``) listen on one port and the kernel spreads new connections over them.
        """
        sock = listening_socket(host, port, reuse_port=reuse_port)
        # (asyncio listens again with the backlog it is given)
        await self._grpc.start(sock=sock, ssl=ssl_context, backlog=ACCEPT_BACKLOG)
        self.port = int(sock.getsockname()[1])
        self.server.serving = True
        return self.port

    async def stop(self) -> None:
        """End every stream, stop listening and wait for the handlers to finish.

        Stopping a transport that never started, or stopping twice, does nothing more.
        """
        self.server.close()
        self.server.serving = False
        if self.port is None:
            return
        self.port = None
        if self._stream_tasks:
            # The server has ended every stream: let the handlers send their trailers
            # (status OK) before the connections go, so that clients see a clean end.
            await asyncio.wait(set(self._stream_tasks), timeout=STOP_GRACE)
        self._grpc.close()
        self._grpc.drop_connections()
        await self._grpc.wait_closed()

    async def __aenter__(self) -> GrpclibTransport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


class _GrpclibStream(ByteStream):
    """One grpclib stream as message bytes; the client going away is :class:`StreamClosed`.

    A message longer than ``limit`` bytes is refused from its prefix, before its body is
    read (RESOURCE_EXHAUSTED, as the driver's own check words it).
    """

    __slots__ = ("_limit", "_stream")

    def __init__(self, stream: grpclib.server.Stream[Any, Any], limit: int) -> None:
        self._stream = stream
        self._limit = limit

    async def receive(self) -> bytes | None:
        # grpclib's recv_message reads the 5-byte prefix, then the whole declared length,
        # acknowledging each DATA frame as it comes: it would hold a declared 4 GiB in
        # memory before anyone could look at its size. This reads the prefix itself.
        # Refusing ends the handler, and grpclib then sends the status and resets the
        # stream (RST_STREAM NO_ERROR), so the client stops sending; what it sent beyond
        # the prefix was never acknowledged, so at most a flow-control window is buffered.
        stream = self._stream
        h2_stream = stream._stream
        try:
            prefix = await h2_stream.recv_data(5)
            if not prefix:
                return None
            size = message_size(prefix, self._limit)
            data = await h2_stream.recv_data(size) if size else b""
        except AssertionError:
            # grpclib's buffer: the client ended its side inside a message.
            data = None
        except _GONE as exc:
            raise StreamClosed from exc
        if data is None or len(data) != size:
            # (grpclib's buffer answers nothing at all, rather than too little, when the
            # client ends its side right after a prefix)
            raise RemoteProtocolError(
                "the stream ended inside a message", GrpcStatus.INVALID_ARGUMENT
            )
        # What grpclib's recv_message does with a message: its event listeners, its counts.
        (data,) = await stream._dispatch.recv_message(data)
        stream._messages_received += 1
        connection = h2_stream.connection
        connection.messages_received += 1
        connection.last_message_received = time.monotonic()
        return bytes(data)

    async def send(self, data: bytes) -> None:
        try:
            await self._stream.send_message(data)
        except _GONE as exc:
            raise StreamClosed from exc

    async def send_parts(self, parts: Sequence[bytes]) -> None:
        """Write one message given as buffers, without joining them (see ``_frames``);
        otherwise what grpclib's ``send_message`` does: headers first, its event
        listeners, its counts."""
        stream = self._stream
        try:
            if not stream._send_initial_metadata_done:
                await stream.send_initial_metadata()
            (parts,) = await stream._dispatch.send_message(parts)
            await write_message(stream._stream, parts)
        except _GONE as exc:
            raise StreamClosed from exc
        stream._send_message_done = True
        stream._messages_sent += 1
        connection = stream._stream.connection
        connection.messages_sent += 1
        connection.last_message_sent = time.monotonic()

    async def end(self, message: str) -> None:
        """End the stream with status OK and ``message`` (a stream the server ends on
        purpose, between responses, for the client to reconnect)."""
        try:
            await self._stream.send_trailing_metadata(
                status=grpclib.const.Status.OK, status_message=message
            )
        except _GONE as exc:
            raise StreamClosed from exc

    def writable(self, size: int) -> bool:
        """Whether a message of ``size`` bytes goes out without waiting for the client to
        read (its HTTP/2 flow-control windows have room)."""
        h2_stream = self._stream._stream
        connection = h2_stream._h2_connection
        if not h2_stream.connection.write_ready.is_set() or h2_stream.id is None:
            return False
        try:
            window = connection.local_flow_control_window(h2_stream.id)
        except Exception:
            return False
        return bool(window >= size + 5)


class _WrapperReleased:
    """Once grpclib's handler task is done, the error its ``Wrapper`` raised (the client
    reset the stream) no longer holds that task's frames, which hold the wrapper: without
    this, grpclib's stream, its buffers and headers (about 12 KB) waited for a full
    collection after every reset stream."""

    __slots__ = ("_stream",)

    def __init__(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        self._stream: grpclib.server.Stream[Any, Any] | None = stream

    def __call__(self, task: object) -> None:
        stream, self._stream = self._stream, None
        wrapper = getattr(getattr(stream, "_stream", None), "wrapper", None)
        error = getattr(wrapper, "_error", None)
        if isinstance(error, BaseException):
            forget_frames(error)


class _FramesForgotten:
    """Drops the tracebacks of what ends a handler, once it has been logged and turned into
    a status.

    When a client resets its stream or drops its connection, grpclib cancels the handler and
    then raises its own error from the handler's ``Wrapper``, which keeps that error: a
    cycle. The error's context is the cancellation, whose traceback held every frame of the
    stream, so each reset stream's state stayed in memory until a full collection (about
    50 KB a stream in the soak benchmark). :class:`_WrapperReleased` lets grpclib's own
    objects go too.
    """

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: object, error: BaseException | None, traceback: object
    ) -> Literal[False]:
        if isinstance(error, Exception | asyncio.CancelledError):
            forget_frames(error)
        return False


@contextlib.asynccontextmanager
async def _statuses(peer: str) -> AsyncIterator[None]:
    """Turn what a handler raises into the gRPC status the client sees."""
    try:
        yield
    except ProtocolError as exc:
        # The runtime logs each xDS stream's end; this line is for the record.
        log.debug("stream from %s ended: %s (%s)", peer, exc.message, exc.status.name)
        raise GRPCError(grpclib.const.Status(exc.status.value), exc.message) from None
    except GRPCError:
        raise
    except Exception as exc:
        # A bug or a failing cache must not surface as grpclib's generic error: the stream
        # ends with INTERNAL, naming what failed, and the server keeps going.
        log.exception("stream from %s failed", peer)
        message = f"internal error: {type(exc).__name__}"
        raise GRPCError(grpclib.const.Status.INTERNAL, message) from None


def _peer(stream: grpclib.server.Stream[Any, Any]) -> str:
    address = stream.peer.addr()
    if not address:
        return ""
    return f"{address[0]}:{address[1]}"
