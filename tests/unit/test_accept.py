"""Http2Transport's accept loop: at most max_connections open (one more is closed as it is
accepted, and counted), and a refused descriptor pauses accepting instead of looping."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket

import pytest

from xdscore import SnapshotCache, XdsServer, same_for_all
from xdscore.server import ServerLimits
from xdscore.transport import Http2Transport
from xdscore.transport.h2 import accept as _accept

from ..fault._clients import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]


CLIENT_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""The client's connection preface and an empty SETTINGS frame."""


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that has sent its preface (the server answers it with its own)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(CLIENT_PREFACE)
    return reader, writer


async def server_speaks(reader: asyncio.StreamReader, within: float = 5.0) -> bool:
    """Whether the server sent its SETTINGS frame (b"" : it closed the connection)."""
    async with asyncio.timeout(within):
        head = await reader.read(9)
    return len(head) == 9 and head[3] == 0x4


async def test_a_full_server_accepts_nothing_until_a_stream_ends() -> None:
    server = XdsServer(SnapshotCache(group=same_for_all), server_limits=ServerLimits(max_streams=1))
    async with Http2Transport(server) as transport:
        port = await transport.start()
        first = await connect(port)
        assert await server_speaks(first[0])
        second = await connect(port)  # in the kernel's accept queue: nothing is said to it
        with pytest.raises(TimeoutError):
            await server_speaks(second[0], within=0.6)
        assert len(transport._connections) == 1
        first[1].close()
        await first[1].wait_closed()
        assert await server_speaks(second[0])  # accepted once there was room
        second[1].close()


async def test_past_max_connections_a_connection_is_closed_and_counted() -> None:
    server = XdsServer(SnapshotCache(group=same_for_all))
    async with Http2Transport(server, max_connections=2) as transport:
        port = await transport.start()
        first, second = await connect(port), await connect(port)
        assert await server_speaks(first[0])
        assert await server_speaks(second[0])
        third = await connect(port)
        assert not await server_speaks(third[0])  # closed as it was accepted
        assert server.metrics is not None
        cut = server.metrics.registry.get_sample_value(
            "xdscore_connections_cut_total", {"reason": "max_connections"}
        )
        assert cut == 1.0
        first[1].close()
        await first[1].wait_closed()
        await eventually(lambda: len(transport._connections) == 1)
        fourth = await connect(port)
        assert await server_speaks(fourth[0])  # room again
        for _, writer in (second, third, fourth):
            writer.close()


class ShortOfDescriptors:
    """A listening socket whose first ``failures`` accepts fail with EMFILE."""

    def __init__(self, sock: socket.socket, failures: int) -> None:
        self._sock = sock
        self.failures = failures
        self.calls = 0

    def fileno(self) -> int:
        return self._sock.fileno()

    def accept(self) -> tuple[socket.socket, object]:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return self._sock.accept()

    def close(self) -> None:
        self._sock.close()


async def test_emfile_pauses_accepting_once_then_it_resumes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = XdsServer(SnapshotCache(group=same_for_all))
    async with Http2Transport(server) as transport:
        port = await transport.start()
        assert transport._listener is not None
        short = ShortOfDescriptors(transport._listener._sock, failures=1)
        transport._listener._sock = short  # type: ignore[assignment]
        with caplog.at_level(logging.WARNING, logger="xdscore.transport"):
            reader, writer = await connect(port)
            assert await server_speaks(reader)  # accepted after the pause
        assert short.calls <= 3  # one failure, one pause: no loop of retries
        warnings = [r for r in caplog.records if "cannot accept connections" in r.message]
        assert len(warnings) == 1
        writer.close()


def test_the_default_bound_leaves_a_reserve_under_the_descriptor_limit() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert _accept.default_max_connections() == max(1, soft - _accept.DESCRIPTOR_RESERVE)
