"""The project's own server (optionally broken by one fault) behind a hook driver, and
runs of the suite side by side."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

import anyio

from xdscore import Http2Transport, SnapshotCache, same_for_all
from xdscore.testing.conformance import HookDriver, Settings, SnapshotCacheHook, World
from xdscore.transport import GrpclibTransport
from xdscore.wire import Resource

from ._faulty import Fault, FaultyServer

SETTINGS = Settings(quiet=0.3, response_timeout=3.0, case_timeout=20.0)
"""The suite's clocks in the tests: short quiet periods (the faults that act on a silent
client wait longer than this, see ``_faults.IDLE_RESEND``)."""

RUNS_AT_ONCE = 12
"""How many suite runs :func:`side_by_side` lets go at once by default. A case spends most
of its time waiting (quiet periods, response timeouts: a whole run against a server in this
process takes about 1 s of CPU in 45 s), so runs against servers of their own share a loop
well; each run keeps its cases in order against its own server. A server in a process of its
own costs more to start (about 2 s of CPU)."""

T = TypeVar("T")

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


async def side_by_side(
    jobs: Sequence[Callable[[], Awaitable[T]]], at_once: int = RUNS_AT_ONCE
) -> list[T]:
    """The result of each job, in order, run ``at_once`` at a time."""
    results: dict[int, T] = {}
    limiter = anyio.CapacityLimiter(at_once)

    async def run(index: int) -> None:
        async with limiter:
            results[index] = await jobs[index]()

    async with anyio.create_task_group() as group:
        for index in range(len(jobs)):
            group.start_soon(run, index)
    return [results[index] for index in range(len(jobs))]
