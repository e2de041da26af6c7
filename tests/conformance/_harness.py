"""The project's own server (optionally broken by one fault) behind a hook driver."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Mapping

from xdscore import Http2Transport, SnapshotCache, same_for_all
from xdscore.testing.conformance import HookDriver, Settings, SnapshotCacheHook, World
from xdscore.transport import GrpclibTransport
from xdscore.wire import Resource

from ._faulty import Fault, FaultyServer

SETTINGS = Settings(quiet=0.3, response_timeout=3.0, case_timeout=20.0)
"""The suite's clocks in the tests: short quiet periods (the faults that act on a silent
client wait longer than this, see ``_faults.IDLE_RESEND``)."""

TRANSPORTS = {"http2": Http2Transport, "grpclib": GrpclibTransport}


class RecordingHook(SnapshotCacheHook):
    """A :class:`SnapshotCacheHook` that remembers the resources it served, for the faults."""

    def __init__(self, cache: SnapshotCache) -> None:
        super().__init__(cache)
        self.current: dict[str, dict[str, Resource]] = {}

    async def apply(self, world: World) -> None:
        self.current = {}
        for resource in world.resources():
            self.current.setdefault(resource.type_url, {})[resource.name] = resource
        await super().apply(world)

    def served(self, type_url: str) -> Mapping[str, Resource]:
        return self.current.get(type_url, {})


@contextlib.asynccontextmanager
async def serving(
    transport: str = "http2",
    fault: type[Fault] | None = None,
    *,
    server_tls: ssl.SSLContext | None = None,
    client_tls: ssl.SSLContext | None = None,
) -> AsyncIterator[HookDriver]:
    """A server on loopback (with ``fault``; TLS with ``server_tls``), and the driver that
    changes what it serves (connecting with ``client_tls``)."""
    cache = SnapshotCache(group=same_for_all)
    hook = RecordingHook(cache)
    server = FaultyServer(cache, fault, hook.served)
    async with TRANSPORTS[transport](server) as running:
        port = await running.start("127.0.0.1", 0, ssl_context=server_tls)
        async with HookDriver("127.0.0.1", port, hook, ssl_context=client_tls) as driver:
            yield driver
