"""xdscore's own HTTP/2 transport: the same methods as :class:`GrpclibTransport`, on a
lean server of its own (:mod:`.connection`).

grpclib runs every connection through h2's general state machine, its event objects and
its own stream, buffer and task layers: at a few hundred responses per stream that is
most of an initial sync's server time, and some 35 KB of memory per connection. This
server speaks the part of HTTP/2 and gRPC the xDS methods use (long-lived and unary calls
of protobuf messages, identity encoding) with the same bounds: request size checked from
the prefix, the abuse buckets of :class:`ConnectionLimits`, at most
:data:`~.connection.MAX_STREAMS` streams per connection, TLS with the same
:func:`server_ssl_context`. What it does not do: message compression (a compressed
message ends its call with UNIMPLEMENTED), server push, HTTP/1.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import Any, Literal

from mypy_extensions import mypyc_attr

from ..._errors import GrpcStatus, ProtocolError, RemoteProtocolError, StreamClosed
from ...protocol._state import ProtocolName
from ...server._server import XdsServer
from ...server._tasks import forget_frames
from .._limits import ConnectionLimits, CutReason
from .._methods import Method, listening_socket, served_methods
from .._tls import peer_identity
from .accept import Acceptor, default_max_connections
from .call import Call
from .connection import Connection, Handler
from .intake import INTAKE_PER_TURN, Intake

__all__ = ["Http2Transport"]

log = logging.getLogger("xdscore.transport")

STOP_GRACE = 1.0
"""Seconds :meth:`Http2Transport.stop` waits for ended streams to send their trailers."""


@mypyc_attr(allow_interpreted_subclasses=True)
class Http2Transport:
    """Serves ``server`` over HTTP/2 with xdscore's own gRPC server; an async context
    manager, used as :class:`GrpclibTransport` is.

    ``connection_limits`` bounds, per connection, the HTTP/2 frames that cost the server work
    (rapid stream resets, PING and SETTINGS floods); a connection past them is cut with
    GOAWAY ENHANCE_YOUR_CALM and counted in ``xdscore_connections_cut_total{reason}``.
    ``max_connections`` bounds the connections open at once (by default the process's
    descriptor limit less a reserve): past it a new connection is closed as it is accepted
    and counted in ``xdscore_connections_cut_total{reason="max_connections"}``.
    ``intake_per_turn`` bounds the reads of connections still in their initial sync
    handled in one turn of the event loop (see :class:`~._intake.Intake`; 0: no bound), so
    that a reconnect storm cannot make a turn, and with it an established proxy's push, long.
    """

    def __init__(
        self,
        server: XdsServer,
        *,
        connection_limits: ConnectionLimits | None = None,
        max_connections: int | None = None,
        intake_per_turn: int = INTAKE_PER_TURN,
    ) -> None:
        self.server = server
        metrics = server.metrics
        self._intake = Intake(
            intake_per_turn, on_deferred=None if metrics is None else metrics.reads_deferred.inc
        )
        self.connection_limits = connection_limits or ConnectionLimits()
        self.max_connections = (
            max_connections if max_connections is not None else default_max_connections()
        )
        self._routes: dict[str, Handler] = {
            method.path: self._handler(method) for method in served_methods()
        }
        self.port: int | None = None
        self._listener: Acceptor | None = None
        self._connections: set[Connection] = set()

    def _handler(self, method: Method) -> Handler:
        if method.kind == "stream":
            protocol: ProtocolName = "delta" if method.delta else "sotw"
            return self._calls(self._stream_handler(method.type_url, protocol))
        if method.kind == "fetch":
            assert method.type_url is not None
            return self._calls(self._fetch_handler(method.type_url))
        if method.kind == "status_stream":
            return self._calls(self._status_stream)
        return self._calls(self._status_fetch)

    def _stream_handler(
        self, type_url: str | None, protocol: ProtocolName
    ) -> Callable[[Call], Any]:
        server = self.server

        async def handle(call: Call) -> None:
            await server.run_stream(
                call,
                protocol=protocol,
                type_url=type_url,
                peer=call.peer,
                identity=peer_identity(call.peer_certificate),
            )

        return handle

    def _fetch_handler(self, type_url: str) -> Callable[[Call], Any]:
        server = self.server

        async def handle(call: Call) -> None:
            data = await call.receive()
            if data is None:
                raise RemoteProtocolError("the call carried no request")
            answer = await server.fetch(
                data,
                type_url=type_url,
                peer=call.peer,
                identity=peer_identity(call.peer_certificate),
            )
            await call.send(answer)

        return handle

    async def _status_stream(self, call: Call) -> None:
        identity = peer_identity(call.peer_certificate)
        await self.server.client_status.run_stream(call, identity)

    async def _status_fetch(self, call: Call) -> None:
        data = await call.receive()
        identity = peer_identity(call.peer_certificate)
        await call.send(self.server.client_status.answer(data or b"", identity))

    @staticmethod
    def _calls(handle: Callable[[Call], Any]) -> Handler:
        """``handle`` run as one call: what it raises becomes the status the client sees."""

        async def run(call: Call) -> None:
            status, message = GrpcStatus.OK, None
            # An xDS stream has no deadline: no timeout to enter.
            deadline = None if call.deadline is None else asyncio.timeout(call.deadline)
            try:
                async with deadline or contextlib.nullcontext():
                    await handle(call)
            except ProtocolError as exc:
                log.debug("stream from %s ended: %s (%s)", call.peer, exc.message, exc.status.name)
                status, message = exc.status, exc.message
                forget_frames(exc)
            except StreamClosed as exc:
                forget_frames(exc)
            except asyncio.CancelledError as exc:
                # The client reset the stream or left: there is no one to answer.
                forget_frames(exc)
            except Exception as exc:
                if isinstance(exc, TimeoutError) and deadline is not None and deadline.expired():
                    status, message = GrpcStatus.DEADLINE_EXCEEDED, "the call's deadline passed"
                else:
                    # A bug or a failing cache ends this call with INTERNAL, naming what
                    # failed, and the server keeps going.
                    log.exception("stream from %s failed", call.peer)
                    status = GrpcStatus.INTERNAL
                    message = f"internal error: {type(exc).__name__}"
                forget_frames(exc)
            call.finish(status, message)

        return run

    def _connection_cut(self, reason: CutReason | Literal["max_connections"]) -> None:
        metrics = self.server.metrics
        if metrics is not None:
            metrics.connections_cut.labels(reason).inc()

    def _connection(self) -> Connection:
        connection = Connection(
            self._routes.get,
            limit=self.server.limits.max_request_bytes,
            limits=self.connection_limits,
            on_cut=self._connection_cut,
            on_close=self._connections.discard,
            intake=self._intake,
        )
        self._connections.add(connection)
        return connection

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        ssl_context: ssl.SSLContext | None = None,
        reuse_port: bool = False,
    ) -> int:
        """Listen on ``host:port`` (0 picks a free port); return the bound port.

        ``reuse_port`` sets SO_REUSEPORT, so that several processes listen on one port.
        """
        sock = listening_socket(host, port, reuse_port=reuse_port)
        self._listener = Acceptor(
            sock,
            self._connection,
            ssl_context=ssl_context,
            max_connections=self.max_connections,
            open_count=self._connections.__len__,
            on_refused=lambda: self._connection_cut("max_connections"),
            admitting=lambda: not self.server.full(len(self._connections)),
        )
        self.port = int(sock.getsockname()[1])
        self.server.serving = True
        return self.port

    async def stop(self) -> None:
        """End every stream, stop listening and close every connection.

        Stopping a transport that never started, or stopping twice, does nothing more.
        """
        self.server.close()
        self.server.serving = False
        if self.port is None or self._listener is None:
            return
        self.port = None
        await self._listener.close()
        connections = list(self._connections)
        tasks = {
            call.task
            for connection in connections
            for call in connection.calls.values()
            if call.task is not None
        }
        deadline = asyncio.get_running_loop().time() + STOP_GRACE
        if tasks:
            # The server has ended every stream: let the handlers send their trailers
            # (status OK) before the connections go, so that clients see a clean end...
            await asyncio.wait(tasks, timeout=STOP_GRACE)
        lingering = [c for c in connections if c.half_closed() and not c.closing]
        remaining = deadline - asyncio.get_running_loop().time()
        if lingering and remaining > 0:
            # ...and let the clients close their side of the streams the server ended (see
            # Connection.streams_closed), within what is left of the grace.
            closed = [asyncio.ensure_future(c.streams_closed()) for c in lingering]
            _, pending = await asyncio.wait(closed, timeout=remaining)
            for waiter in pending:
                waiter.cancel()
        for connection in list(self._connections):
            connection.close()

    async def __aenter__(self) -> Http2Transport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
