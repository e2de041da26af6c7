"""The suite's HTTP/2 client: grpclib's channel, message bytes in and out.

One `Channel` is one HTTP/2 connection to the server under test (plaintext or TLS);
`Channel.stream` opens a bidirectional call on it and yields a `RawStream`.
A status the server ends a call with becomes `StreamEnded` carrying it, and so does
a connection that is refused or lost (as UNAVAILABLE), so a case can say exactly how the
server ended its stream.
"""

from __future__ import annotations

import contextlib
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpclib.client
import grpclib.config
import grpclib.const
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, StreamTerminatedError

from ..._errors import GrpcStatus

__all__ = ["ADS_DELTA", "ADS_SOTW", "Channel", "RawStream", "StreamEnded", "client_ssl_context"]

ADS_SOTW = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
ADS_DELTA = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"


class StreamEnded(Exception):
    """The server ended a call (``status`` is how), or the connection failed (UNAVAILABLE)."""

    def __init__(self, status: GrpcStatus, message: str) -> None:
        super().__init__(f"{status.name}: {message}" if message else status.name)
        self.status = status
        self.message = message


class _Bytes(CodecBase):
    """Message bytes through untouched."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> Any:
        return data


@contextlib.contextmanager
def _ended() -> Iterator[None]:
    try:
        yield
    except GRPCError as exc:
        raise StreamEnded(GrpcStatus(exc.status.value), exc.message or "") from None
    except (StreamTerminatedError, ConnectionError, OSError) as exc:
        raise StreamEnded(GrpcStatus.UNAVAILABLE, str(exc) or type(exc).__name__) from None


class RawStream:
    """One call as message bytes; `receive` returns ``None`` once the server ended it
    with status OK."""

    def __init__(self, stream: grpclib.client.Stream[Any, Any]) -> None:
        self._stream = stream
        self._ended = False

    async def send(self, data: bytes) -> None:
        with _ended():
            await self._stream.send_message(data)

    async def receive(self) -> bytes | None:
        with _ended():
            try:
                data = await self._stream.recv_message()
            except StreamTerminatedError:
                # A status in trailers-only headers followed by a reset (as grpc-go ends an
                # unknown method) reaches grpclib as a reset: the status is in the headers.
                _raise_status(self._stream)
                raise
            if data is None:
                # The server ended the call: its status is in the trailers, read once our
                # side is ended too.
                if not self._ended:
                    self._ended = True
                    await self._stream.end()
                await self._stream.recv_trailing_metadata()
        return None if data is None else bytes(data)


def _raise_status(stream: grpclib.client.Stream[Any, Any]) -> None:
    """Raise the ``grpc-status`` the server sent before resetting the stream, if any."""
    inner = stream._stream
    for block in (getattr(inner, "trailers", None), getattr(inner, "headers", None)):
        fields = dict(block or ())
        if "grpc-status" in fields:
            code = int(fields["grpc-status"])
            message = urllib.parse.unquote(fields.get("grpc-message", ""))
            status = (
                GrpcStatus(code) if code in GrpcStatus._value2member_map_ else GrpcStatus.UNKNOWN
            )
            raise StreamEnded(status, message)


class Channel:
    """An HTTP/2 connection to ``host:port``; TLS with ``ssl_context``, whose certificate
    is checked against ``server_name`` (default: ``host``)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_name: str | None = None,
    ) -> None:
        config = grpclib.config.Configuration(ssl_target_name_override=server_name or host)
        self._channel = grpclib.client.Channel(
            host, port, ssl=ssl_context, codec=_Bytes(), config=config
        )

    @contextlib.asynccontextmanager
    async def stream(self, path: str) -> AsyncIterator[RawStream]:
        """A bidirectional call to ``path``; reset when the block ends."""
        with _ended():
            async with self._channel.request(
                path, grpclib.const.Cardinality.STREAM_STREAM, bytes, bytes
            ) as stream:
                await stream.send_request()
                try:
                    yield RawStream(stream)
                finally:
                    with contextlib.suppress(Exception):
                        await stream.cancel()

    def close(self) -> None:
        self._channel.close()


def client_ssl_context(
    *,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    verify: bool = True,
) -> ssl.SSLContext:
    """A TLS client context for HTTP/2 (ALPN ``h2``): the server's certificate checked
    against ``ca_file`` (the system's roots without it) unless ``verify`` is false; a
    client certificate for mutual TLS with ``cert_file`` and ``key_file``."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    context.set_alpn_protocols(["h2"])
    return context
