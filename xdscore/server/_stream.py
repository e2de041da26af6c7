"""What the runtime needs of one gRPC stream: the contract a transport implements.

A transport hands the runtime each stream as a :class:`ByteStream`. Two methods are the
whole of it (:meth:`~ByteStream.receive`, :meth:`~ByteStream.send`); the others have
defaults that a transport overrides where it can do better, and the runtime calls every one
of them on every stream (it never probes a stream for what it offers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

__all__ = ["ByteStream"]


class ByteStream(Protocol):
    """One gRPC stream as message bytes each way. Subclass it to inherit the defaults.

    A peer that went away (it reset the stream or dropped the connection) is
    :class:`~xdscore.StreamClosed`, raised by any method that needs the peer.
    """

    __slots__ = ()

    async def receive(self) -> bytes | None:
        """The next message, or ``None`` once the peer closed its side."""
        ...

    async def send(self, data: bytes) -> None:
        """Write one message."""
        ...

    async def send_parts(self, parts: Sequence[bytes]) -> None:
        """Write one message given as the buffers it is the concatenation of. A response's
        body is shared by every stream: a transport that can write the buffers as they
        are saves a copy of it per stream. By default they are joined."""
        await self.send(parts[0] if len(parts) == 1 else b"".join(parts))

    def try_send_parts(self, parts: Sequence[bytes]) -> bool:
        """Write one message now, without waiting for anything, if the transport can
        (the peer's flow-control windows have room): the runtime then answers a request
        from the task that read it. ``False``, writing nothing, otherwise (the default)."""
        return False

    def writable(self, size: int) -> bool:
        """Whether a write of ``size`` bytes would go out without waiting for the peer to
        read (a push holds its slot only until a write would wait). By default, yes."""
        return True

    async def closed(self) -> None:
        """Return once the peer has gone away, raising nothing: for a peer that closed its
        side and sends nothing more. By default it never returns (a transport that cancels
        the handler when its peer goes away needs nothing more)."""
        await asyncio.get_running_loop().create_future()

    def settled(self) -> None:
        """The stream finished its initial sync (called once): a transport may stop
        treating its reads as a new stream's. By default, nothing."""
        return

    async def end(self, message: str) -> None:
        """End the stream with status OK and ``message`` (rebalancing). By default nothing
        is written: the handler returning ends the stream with OK."""
        return
