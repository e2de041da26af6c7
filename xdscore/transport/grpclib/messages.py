"""One gRPC message, given as buffers, written on a grpclib stream as HTTP/2 DATA frames
without joining them.

grpclib's ``send_message`` takes one ``bytes``: the driver would join a response's parts
(its shared body among them), grpclib would prepend the 5-byte prefix and copy again, then
read the result back frame by frame. Here each frame's payload is a slice of the buffers as
they are (:func:`xdscore.transport._messages.buffers`), h2 keeps its flow control and
stream state, and the frames of one batch go to the socket in one write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._messages import BATCH_BYTES, buffers, take

__all__ = ["write_message"]


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
