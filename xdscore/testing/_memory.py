"""Two byte streams joined in memory: a gRPC stream without gRPC, for driving the drivers.

Each direction is an anyio memory object stream with a bounded buffer (``buffer`` messages;
0 means a send waits until the other side receives, like a peer that stops reading). A side
that calls :meth:`MemoryByteStream.close` half-closes: the other side's ``receive`` then
returns ``None``. A side that calls :meth:`MemoryByteStream.reset` goes away: the other
side's ``receive`` and ``send`` raise :class:`~xdscore.StreamClosed`, as a transport's do
when a client resets its stream or drops its connection.
"""

from __future__ import annotations

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._errors import StreamClosed
from ..server._stream import ByteStream

__all__ = ["MemoryByteStream", "byte_stream_pair"]


@attrs.define
class _Link:
    reset: bool = False
    gone: anyio.Event = attrs.Factory(anyio.Event)


class MemoryByteStream(ByteStream):
    """One end of an in-memory stream; see :func:`byte_stream_pair`."""

    def __init__(
        self,
        incoming: MemoryObjectReceiveStream[bytes],
        outgoing: MemoryObjectSendStream[bytes],
        link: _Link,
    ) -> None:
        self._incoming = incoming
        self._outgoing = outgoing
        self._link = link
        self.sent: list[bytes] = []
        """Every message this end sent, in order."""
        self.writing = anyio.Event()
        """Set once this end has begun a send (it may still be waiting for the reader)."""

    async def receive(self) -> bytes | None:
        """The next message; ``None`` after the other end closed; StreamClosed after a reset."""
        try:
            return await self._incoming.receive()
        except anyio.EndOfStream:
            if self._link.reset:
                raise StreamClosed from None
            return None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise StreamClosed from None

    async def send(self, data: bytes) -> None:
        """Write one message (waits while the other end's buffer is full)."""
        if self._link.reset:
            raise StreamClosed
        self.writing.set()
        try:
            await self._outgoing.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise StreamClosed from None
        self.sent.append(data)

    def writable(self, size: int) -> bool:
        """Whether a send now would not wait for the other end to receive."""
        stats = self._outgoing.statistics()
        return stats.current_buffer_used < stats.max_buffer_size or stats.tasks_waiting_receive > 0

    def close(self) -> None:
        """Half-close: this end sends nothing more; it can still receive."""
        self._outgoing.close()

    async def closed(self) -> None:
        """Return once either end has reset (gone away)."""
        await self._link.gone.wait()

    def reset(self) -> None:
        """Go away: both directions end, and the other end sees StreamClosed."""
        self._link.reset = True
        self._link.gone.set()
        self._outgoing.close()
        self._incoming.close()


def byte_stream_pair(buffer: int = 0) -> tuple[MemoryByteStream, MemoryByteStream]:
    """Two joined ends (client, server); each direction buffers ``buffer`` messages."""
    to_server_send, to_server_receive = anyio.create_memory_object_stream[bytes](buffer)
    to_client_send, to_client_receive = anyio.create_memory_object_stream[bytes](buffer)
    link = _Link()
    client = MemoryByteStream(to_client_receive, to_server_send, link)
    server = MemoryByteStream(to_server_receive, to_client_send, link)
    return client, server
