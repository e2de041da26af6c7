"""gRPC messages on HTTP/2, for both transports: the 5-byte prefix, and a message given as
buffers cut into DATA frame payloads without joining them.

A response comes from the driver as its parts (a SotW response's shared body among them).
Joining them, prepending the prefix and reading the result back frame by frame would copy
tens of megabytes per stream and push at 100,000 resources. Here each frame's payload is a
``memoryview`` slice of the buffers as they are (runs of small parts joined first).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from .._errors import GrpcStatus, RemoteProtocolError

__all__ = ["BATCH_BYTES", "SHARED_BYTES", "buffers", "message_size", "take"]

BATCH_BYTES = 256 * 1024
"""Frames written to the socket at once (fewer system calls than one write per frame)."""
SHARED_BYTES = 64 * 1024
"""Parts at least this large are sliced where they are; runs of smaller ones (a Delta
response's entries, a SotW response's head and tail) are joined first: one copy costs less
than a slice each."""


def message_size(prefix: bytes | bytearray, limit: int) -> int:
    """The size a request's 5-byte gRPC prefix declares, refused past ``limit`` (before any
    of its body is read) and when it says the message is compressed."""
    if prefix[0]:
        # No message encoding is supported.
        raise RemoteProtocolError("compressed messages are not supported", GrpcStatus.UNIMPLEMENTED)
    size = int.from_bytes(prefix[1:5], "big")
    if size > limit:
        raise RemoteProtocolError(
            f"a request of {size} bytes exceeds the limit of {limit}",
            GrpcStatus.RESOURCE_EXHAUSTED,
        )
    return size


def buffers(parts: Sequence[bytes]) -> deque[memoryview]:
    buffers: deque[memoryview] = deque()
    run: list[bytes] = []
    for part in parts:
        if not part:
            continue
        if len(part) < SHARED_BYTES:
            run.append(part)
            continue
        if run:
            buffers.append(memoryview(b"".join(run)))
            run = []
        buffers.append(memoryview(part))
    if run:
        buffers.append(memoryview(b"".join(run)))
    return buffers


def take(pending: deque[memoryview], room: int) -> bytes | memoryview:
    """The next ``room`` bytes (or fewer, at the end) of ``pending``, sliced, not copied,
    unless they span buffers."""
    first = pending[0]
    if len(first) >= room:
        if len(first) == room:
            pending.popleft()
        else:
            pending[0] = first[room:]
        return first[:room]
    pieces: list[memoryview] = []
    while pending and room:
        piece = pending.popleft()
        if len(piece) > room:
            pending.appendleft(piece[room:])
            piece = piece[:room]
        pieces.append(piece)
        room -= len(piece)
    return b"".join(pieces)
