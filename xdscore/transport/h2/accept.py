"""Accepting connections without running out of file descriptors.

Every connection holds a descriptor, and a process has a limit (``ulimit -n``). asyncio's
own accept loop meets the limit badly: on EMFILE it logs a traceback and schedules a retry,
and then goes on accepting, up to the listen backlog's count of times in one turn, so one
burst past the limit logs tens of thousands of tracebacks and schedules as many retries.
:class:`Acceptor` keeps the open connections under ``max_connections`` (by default the
descriptor limit less a reserve for everything else the process opens): past it, a new
connection is accepted and closed at once, which a gRPC client (Envoy, grpc) retries with
back-off. Should accepting still fail for want of descriptors or memory, it stops
accepting for a moment, with one warning.

While the server is full (``admitting`` says no: as many streams as ``max_streams``), the
acceptor accepts nothing at all: connecting clients wait in the kernel's accept queue, or
retry once their connect times out, and cost the server nothing; they are accepted, in
order, as streams end. (Accepted, each would be refused with RESOURCE_EXHAUSTED, which
costs about what a stream's initial sync does: the connection, the HTTP/2 handshake and a
call; with Envoy's back-off, 10,000 clients too many come back some 800 times a second.)
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import ssl
import time
from collections.abc import Callable

__all__ = ["ACCEPT_BATCH", "DESCRIPTOR_RESERVE", "Acceptor", "default_max_connections"]

log = logging.getLogger("xdscore.transport")

ACCEPT_BATCH = 4096
"""Connections accepted in one turn of the event loop, at most."""
DESCRIPTOR_RESERVE = 256
"""Descriptors left for the rest of the process (files, the admin server, etcd, logs)."""
ACCEPT_PAUSE = 0.25
"""Seconds accepting stops after the system refused a descriptor."""
_SHORT_OF = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def default_max_connections() -> int:
    """The process's descriptor limit less :data:`DESCRIPTOR_RESERVE` (at least 1)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1_000_000
    return max(1, soft - DESCRIPTOR_RESERVE)


class Acceptor:
    """Accepts connections on a listening socket for ``protocol_factory`` (TLS with
    ``ssl_context``), keeping at most ``max_connections`` open (``open_count`` says how many
    are); ``on_refused`` is called for each connection closed at once for that bound."""

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
        *,
        ssl_context: ssl.SSLContext | None,
        max_connections: int,
        open_count: Callable[[], int],
        on_refused: Callable[[], None],
        admitting: Callable[[], bool] = lambda: True,
    ) -> None:
        self._sock = sock
        self._factory = protocol_factory
        self._ssl = ssl_context
        self.max_connections = max_connections
        self._open_count = open_count
        self._on_refused = on_refused
        self._admitting = admitting
        self._holding = False
        self._loop = asyncio.get_running_loop()
        self._starting: set[asyncio.Task[None]] = set()
        self._closed = False
        self._warned_at = 0.0
        self.refused = 0
        """Connections closed at once because ``max_connections`` were open."""
        self._loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            if not self._admitting():
                self._hold()
                return
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as error:
                if error.errno not in _SHORT_OF:
                    raise
                self._pause(error)
                return
            if self._open_count() + len(self._starting) >= self.max_connections:
                conn.close()
                self.refused += 1
                self._on_refused()
                self._warn(
                    "refusing connections: %d are open, the most this process takes "
                    "(max_connections)",
                    self.max_connections,
                )
                continue
            conn.setblocking(False)
            task = self._loop.create_task(self._start(conn))
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    async def _start(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn, ssl=self._ssl)
        except (OSError, ssl.SSLError) as error:
            # A TLS handshake that failed, or a client already gone: its problem alone.
            log.debug("a connection ended before it was set up: %s", error)
            conn.close()

    def _pause(self, error: OSError) -> None:
        self._warn("cannot accept connections (%s); pausing %.2f s", error.strerror, ACCEPT_PAUSE)
        self._loop.remove_reader(self._sock.fileno())
        self._loop.call_later(ACCEPT_PAUSE, self._resume)

    def _resume(self) -> None:
        if not self._closed:
            self._loop.add_reader(self._sock.fileno(), self._accept)

    def _hold(self) -> None:
        """Accept nothing until the server admits streams again (looked at every
        :data:`ACCEPT_PAUSE` seconds)."""
        if not self._holding:
            self._holding = True
            self._warn("not accepting connections: the server is full (max_streams)")
            self._loop.remove_reader(self._sock.fileno())
        self._loop.call_later(ACCEPT_PAUSE, self._recheck)

    def _recheck(self) -> None:
        if self._closed:
            return
        if not self._admitting():
            self._loop.call_later(ACCEPT_PAUSE, self._recheck)
            return
        self._holding = False
        self._loop.add_reader(self._sock.fileno(), self._accept)

    def _warn(self, message: str, *args: object) -> None:
        """Log ``message`` at most once every 10 s."""
        now = time.monotonic()
        if now - self._warned_at >= 10.0:
            self._warned_at = now
            log.warning(message, *args)

    async def close(self) -> None:
        """Stop accepting and close the socket; connections being set up are abandoned."""
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for task in list(self._starting):
            task.cancel()
        if self._starting:
            await asyncio.wait(self._starting)
