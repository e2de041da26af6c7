"""One gRPC message, given as buffers, written as HTTP/2 DATA frames without joining them.

grpclib's ``send_message`` takes one ``bytes``: the driver would join a response's parts
(its shared body among them), grpclib would prepend the 5-byte prefix and copy again, then
read the result back frame by frame. At 100,000 resources that is several copies of tens of
megabytes per stream and push. Here each frame's payload is a ``memoryview`` slice of the
buffers as they are (runs of small parts joined first), h2 keeps its flow
control and stream state, and the frames of one batch go to the socket in one write.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from .._errors import GrpcStatus, RemoteProtocolError

__all__ = ["BATCH_BYTES", "SHARED_BYTES", "buffers", "message_size", "take", "write_message"]

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


async def write_message(h2_stream: Any, parts: Sequence[bytes]) -> None:
    """Write the gRPC message whose body is the concatenation of ``parts`` on grpclib's
    ``h2_stream`` (its internal stream: connection, h2 state and transport), waiting for
    flow-control window and for the socket to drain as grpclib's own writer does."""
    size = sum(map(len, parts))
    pending = buffers((b"\x00" + size.to_bytes(4, "big"), *parts))
    connection = h2_stream.connection
    h2 = h2_stream._h2_connection
    transport = h2_stream._transport
    stream_id = h2_stream.id
    while pending:
        await connection.write_ready.wait()
        window = h2.local_flow_control_window(stream_id)
        if window <= 0:
            h2_stream.window_updated.clear()
            await h2_stream.window_updated.wait()
            continue  # other streams may have taken the window meanwhile
        batch = min(window, BATCH_BYTES)
        frame_size = h2.max_outbound_frame_size
        sent = 0
        while pending and sent < batch:
            chunk = take(pending, min(frame_size, batch - sent))
            h2.send_data(stream_id, chunk)
            sent += len(chunk)
        transport.write(h2.data_to_send())
        h2_stream.data_sent += sent
        connection.data_sent += sent
        connection.data_send_process()
