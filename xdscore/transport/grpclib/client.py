"""The grpclib transport, client side: a channel whose streams are byte streams.

Used by the CLI's CSDS commands (and by anything that runs a client machine over grpclib):
each stream is a :class:`~xdscore.server.ByteStream`, so the driver and the codecs work on
it unchanged. A status the server ends a stream with becomes a
:class:`~xdscore.RemoteProtocolError` carrying it; a connection that cannot be made or is
lost is :class:`~xdscore.StreamClosed`.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import grpclib.client
import grpclib.const
from grpclib.exceptions import GRPCError, StreamTerminatedError

from ..._errors import GrpcStatus, RemoteProtocolError, StreamClosed
from .transport import RawCodec

__all__ = ["GrpclibChannel", "open_channel"]

_LOST = (StreamTerminatedError, ConnectionError, OSError)


@contextlib.contextmanager
def _mapped() -> Any:
    try:
        yield
    except GRPCError as exc:
        status = GrpcStatus(exc.status.value)
        raise RemoteProtocolError(exc.message or status.name, status) from None
    except _LOST as exc:
        raise StreamClosed(str(exc)) from exc


class _ClientStream:
    """One grpclib client stream as message bytes."""

    __slots__ = ("_stream",)

    def __init__(self, stream: grpclib.client.Stream[Any, Any]) -> None:
        self._stream = stream

    async def receive(self) -> bytes | None:
        with _mapped():
            data = await self._stream.recv_message()
        return None if data is None else bytes(data)

    async def send(self, data: bytes) -> None:
        with _mapped():
            await self._stream.send_message(data)


class GrpclibChannel:
    """An HTTP/2 connection to one server; open streams on it with :meth:`stream`."""

    def __init__(self, channel: grpclib.client.Channel) -> None:
        self._channel = channel

    @contextlib.asynccontextmanager
    async def stream(self, path: str) -> AsyncIterator[_ClientStream]:
        """A bidirectional stream to method ``path`` (``/package.Service/Method``)."""
        with _mapped():
            async with self._channel.request(
                path, grpclib.const.Cardinality.STREAM_STREAM, bytes, bytes
            ) as stream:
                await stream.send_request()
                yield _ClientStream(stream)
                await stream.end()

    async def unary(self, path: str, data: bytes) -> bytes:
        """Call the unary method ``path`` with ``data``; its reply's bytes."""
        with _mapped():
            async with self._channel.request(
                path, grpclib.const.Cardinality.UNARY_UNARY, bytes, bytes
            ) as stream:
                await stream.send_message(data, end=True)
                reply = await stream.recv_message()
        if reply is None:
            raise RemoteProtocolError(f"{path} returned no message", GrpcStatus.INTERNAL)
        return bytes(reply)


@contextlib.asynccontextmanager
async def open_channel(
    host: str, port: int, *, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[GrpclibChannel]:
    """A channel to ``host:port``, closed when the block ends."""
    channel = grpclib.client.Channel(host, port, ssl=ssl_context, codec=RawCodec())
    try:
        yield GrpclibChannel(channel)
    finally:
        channel.close()
