"""Writing one gRPC message from several buffers as HTTP/2 DATA frames (transport/_frames).

A real h2 server connection writes, a real h2 client connection reads what reached the
"socket": the message must arrive whole and in order, in frames no larger than the peer
allows, within the flow-control window, waiting for WINDOW_UPDATE when it runs out.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from xdscore.transport._messages import BATCH_BYTES, SHARED_BYTES, buffers
from xdscore.transport.grpclib.messages import write_message

pytestmark = pytest.mark.anyio


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


class _Connection:
    def __init__(self) -> None:
        self.write_ready = asyncio.Event()
        self.write_ready.set()
        self.data_sent = 0

    def data_send_process(self) -> None:
        pass


class _Stream:
    """The parts of grpclib's internal stream that ``write_message`` uses."""

    def __init__(self, server: h2.connection.H2Connection, transport: _Transport) -> None:
        self.id = 1
        self.connection = _Connection()
        self._h2_connection = server
        self._transport = transport
        self.window_updated = asyncio.Event()
        self.data_sent = 0


def _pair(
    *, window: int = 65535, frame: int = 16384
) -> tuple[h2.connection.H2Connection, h2.connection.H2Connection, _Stream]:
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.local_settings = h2.settings.Settings(
        client=True,
        initial_values={
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window,
            h2.settings.SettingCodes.MAX_FRAME_SIZE: frame,
        },
    )
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    client.send_headers(1, [(":method", "POST"), (":path", "/x"), (":scheme", "http"),
                            (":authority", "a")])  # fmt: skip
    server.receive_data(client.data_to_send())
    server.send_headers(1, [(":status", "200")])
    transport = _Transport()
    stream = _Stream(server, transport)
    transport.write(server.data_to_send())
    return server, client, stream


def _open_connection_window(
    server: h2.connection.H2Connection, client: h2.connection.H2Connection, increment: int
) -> None:
    client.increment_flow_control_window(increment)
    server.receive_data(client.data_to_send())


def _read(client: h2.connection.H2Connection, transport: _Transport) -> tuple[bytes, list[int]]:
    """What the client received on stream 1, and the size of each DATA frame."""
    body, sizes = b"", []
    while transport.writes:
        for event in client.receive_data(transport.writes.pop(0)):
            if isinstance(event, h2.events.DataReceived):
                body += event.data
                sizes.append(len(event.data))
    return body, sizes


async def test_parts_arrive_whole_in_frames_the_peer_allows() -> None:
    server, client, stream = _pair(window=1 << 20, frame=16384)
    _open_connection_window(server, client, 1 << 20)
    parts = [b"head", b"", bytes(range(256)) * 200, b"x" * 3, b"tail" * 5000]
    await write_message(stream, parts)
    body, sizes = _read(client, stream._transport)
    joined = b"".join(parts)
    assert body == b"\x00" + len(joined).to_bytes(4, "big") + joined
    assert max(sizes) == 16384
    assert all(size == 16384 for size in sizes[:-1])  # boundaries between parts do not
    assert stream.data_sent == stream.connection.data_sent == len(body)  # cut frames short


async def test_one_socket_write_per_batch() -> None:
    server, client, stream = _pair(window=(1 << 31) - 1, frame=16384)
    _open_connection_window(server, client, (1 << 31) - 1 - 65535)
    before = len(stream._transport.writes)
    size = 4 * BATCH_BYTES + 10
    await write_message(stream, [b"a" * size])
    assert len(stream._transport.writes) - before == 5
    body, _ = _read(client, stream._transport)
    assert len(body) == size + 5


async def test_waits_for_window_updates_when_the_window_runs_out() -> None:
    server, client, stream = _pair(window=1000, frame=16384)
    message = [b"m" * 2500]
    writer = asyncio.create_task(write_message(stream, message))
    received = b""
    rounds = 0
    for _ in range(10):
        await asyncio.sleep(0)
        if writer.done():
            break
        chunk, _ = _read(client, stream._transport)
        received += chunk
        rounds += bool(chunk)
        if chunk:  # the client reads and reopens its window, as a live peer does
            client.acknowledge_received_data(len(chunk), 1)
            events: list[Any] = server.receive_data(client.data_to_send())
            assert any(isinstance(e, h2.events.WindowUpdated) for e in events)
            stream.window_updated.set()
    await asyncio.wait_for(writer, 1)
    chunk, _ = _read(client, stream._transport)
    received += chunk
    assert rounds >= 2  # a 1000-byte window: it ran out and the writer waited
    assert received == b"\x00" + (2500).to_bytes(4, "big") + message[0]
    assert stream.data_sent == 2505


async def test_a_full_socket_holds_the_writer_back() -> None:
    server, client, stream = _pair(window=1 << 20)
    _open_connection_window(server, client, 1 << 20)
    stream.connection.write_ready.clear()
    writer = asyncio.create_task(write_message(stream, [b"z" * 100]))
    await asyncio.sleep(0.01)
    assert not writer.done()
    assert len(stream._transport.writes) == 1  # only the headers
    stream.connection.write_ready.set()
    await asyncio.wait_for(writer, 1)
    body, _ = _read(client, stream._transport)
    assert body.endswith(b"z" * 100)


async def test_large_parts_are_sliced_and_small_runs_joined() -> None:
    body = b"b" * SHARED_BYTES
    pieces = buffers([b"\x00\x00\x00\x00\x01", b"h", b"", body, b"t1", b"t2", b""])
    assert [bytes(b) for b in pieces] == [b"\x00\x00\x00\x00\x01h", body, b"t1t2"]
    assert pieces[1].obj is body  # the shared body itself, not a copy
