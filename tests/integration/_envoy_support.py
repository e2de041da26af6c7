"""Helpers for the real-Envoy integration tests: recording callbacks, snapshot builders for a
one-listener/one-route setup, traffic through Envoy (probes, and continuous traffic that can
be waited on) and config_dump readers. ``_delta_support`` adds what the Delta tests need."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import attrs

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    Http2Transport,
    ResponseAcked,
    ResponseNacked,
    ServerCallbacks,
    Snapshot,
    SnapshotCache,
    StreamInfo,
    XdsServer,
    same_for_all,
)
from xdscore import builders as b
from xdscore.protocol import (
    DeltaDiscoveryRequest,
    DiscoveryRequest,
    Event,
    SotwResponse,
    Subscription,
)
from xdscore.testing import Envoy, http_get

from ..factories import short

__all__ = [
    "ALL_TYPES",
    "CallbackLog",
    "Entry",
    "Recorder",
    "Traffic",
    "cds_version",
    "cluster_timeouts",
    "cluster_versions",
    "control_plane_process",
    "get",
    "lds_version",
    "make_snapshot",
    "route_versions",
    "selection_version",
    "traffic_running",
    "wait_traffic",
]

ALL_TYPES = (CLUSTER, ENDPOINT, LISTENER, ROUTE)
_REPO = Path(__file__).resolve().parents[2]


@attrs.define
class Entry:
    """One thing the server reported: ``kind`` is open/close/request/response/ack/nack/event."""

    kind: str
    stream: StreamInfo
    item: Any
    at: float = attrs.field(factory=time.monotonic)

    @property
    def type_url(self) -> str | None:
        return getattr(self.item, "type_url", None)


class CallbackLog(ServerCallbacks):
    """Every callback of a server, in order, as :class:`Entry` records (either protocol);
    :meth:`until` waits for a condition on them, woken by each new entry."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._added = asyncio.Event()

    def _add(self, kind: str, stream: StreamInfo, item: Any) -> None:
        self.entries.append(Entry(kind, stream, item))
        self._added.set()

    async def until(
        self, condition: Callable[[], bool], *, timeout: float = 30.0, what: str = "condition"
    ) -> None:
        """Wait until ``condition()`` holds, checking it after each callback; on timeout,
        fail with the log."""
        try:
            with anyio.fail_after(timeout):
                while not condition():
                    self._added.clear()
                    await self._added.wait()
        except TimeoutError:
            raise AssertionError(
                f"timed out after {timeout} s waiting for {what}; the server saw:\n{self.dump()}"
            ) from None

    def dump(self, since: int = 0) -> str:
        """The log as text, for assertion messages."""
        return "\n".join(
            f"  stream {entry.stream.id} {entry.kind:8} {entry.item!r:.200}"
            for entry in self.entries[since:]
            if entry.kind != "event"
        )

    def on_stream_open(self, stream: StreamInfo) -> None:
        self._add("open", stream, None)

    def on_stream_close(self, stream: StreamInfo, error: BaseException | None) -> None:
        self._add("close", stream, error)

    def on_request(
        self, stream: StreamInfo, request: DiscoveryRequest | DeltaDiscoveryRequest
    ) -> None:
        self._add("request", stream, request)

    def on_event(self, stream: StreamInfo, event: Event) -> None:
        self._add("event", stream, event)

    def on_ack(self, stream: StreamInfo, event: ResponseAcked) -> None:
        self._add("ack", stream, event)

    def on_nack(self, stream: StreamInfo, event: ResponseNacked) -> None:
        self._add("nack", stream, event)

    def on_response(self, stream: StreamInfo, response: Any) -> None:
        self._add("response", stream, response)

    def mark(self) -> int:
        """A position in the log, for ``since=``."""
        return len(self.entries)

    def select(
        self,
        kind: str,
        type_url: str | None = None,
        *,
        streams: Iterable[StreamInfo] | None = None,
        since: int = 0,
        until: int | None = None,
    ) -> list[Any]:
        """The recorded items of ``kind`` (optionally of one type / on some streams) logged
        from mark ``since`` up to mark ``until``."""
        ids = None if streams is None else {stream.id for stream in streams}
        return [
            entry.item
            for entry in self.entries[since:until]
            if entry.kind == kind
            and (type_url is None or entry.type_url == type_url)
            and (ids is None or entry.stream.id in ids)
        ]

    def acks(self, type_url: str | None = None, since: int = 0) -> list[ResponseAcked]:
        return self.select("ack", type_url, since=since)

    def nacks(self, type_url: str | None = None, since: int = 0) -> list[ResponseNacked]:
        return self.select("nack", type_url, since=since)

    def opened(self, since: int = 0) -> list[StreamInfo]:
        return [entry.stream for entry in self.entries[since:] if entry.kind == "open"]

    def closed(self, since: int = 0) -> list[StreamInfo]:
        return [entry.stream for entry in self.entries[since:] if entry.kind == "close"]


class Recorder(CallbackLog):
    """The callbacks of SotW servers, with queries over SotW requests and responses.

    Several servers (before and after a control-plane restart) may share one recorder.
    """

    def responses(self, type_url: str | None = None, **kw: Any) -> list[SotwResponse]:
        return self.select("response", type_url, **kw)

    def requests(self, type_url: str | None = None, **kw: Any) -> list[DiscoveryRequest]:
        return self.select("request", type_url, **kw)

    def acked_versions(self, types: Iterable[str] = ALL_TYPES, since: int = 0) -> dict[str, str]:
        """For each type whose latest response (after ``since``) is ACKed, its version.

        Types still awaiting an answer, NACKed, or never sent are left out.
        """
        done: dict[str, str] = {}
        for type_url in types:
            sent = self.responses(type_url, since=since)
            if not sent:
                continue
            latest = sent[-1]
            if any(ack.nonce == latest.nonce for ack in self.acks(type_url, since=since)):
                done[type_url] = latest.version_info
        return done

    def dump(self, since: int = 0) -> str:
        """The log as text, for assertion messages."""
        lines = []
        for entry in self.entries[since:]:
            item = entry.item
            if entry.kind == "request":
                detail = (
                    f"{short(item.type_url)} v={item.version_info[:8]!r} "
                    f"n={item.response_nonce!r} names={list(item.resource_names)}"
                    + (" ERROR" if item.error_detail else "")
                )
            elif entry.kind == "response":
                detail = (
                    f"{short(item.type_url)} v={item.version_info[:8]!r} n={item.nonce!r} "
                    f"[{', '.join(item.selection.resources)}]"
                )
            elif entry.kind in ("ack", "nack"):
                detail = f"{short(item.type_url)} n={item.nonce!r}"
            elif entry.kind == "event":
                continue
            else:
                detail = f"type={entry.stream.type_url} {item!r}" if item else ""
            lines.append(f"  stream {entry.stream.id} {entry.kind:8} {detail}")
        return "\n".join(lines)


# -- resources ------------------------------------------------------------------------------


def selection_version(snapshot: Snapshot, type_url: str, names: Iterable[str]) -> str:
    """The version of the ``names`` selection of ``type_url`` (an EDS/RDS response's version)."""
    selection = snapshot.select(type_url, Subscription(frozenset(names)))
    assert selection is not None, f"the snapshot has no {short(type_url)}"
    return selection.version


def make_snapshot(
    listener_port: int,
    backends: Mapping[str, int],
    route_cluster: str,
    *,
    headers: dict[str, str] | None = None,
    per_type: bool = False,
    connect_timeouts: Mapping[str, float] | None = None,
) -> Snapshot:
    """One listener on ``listener_port`` whose route ``route_0`` sends ``/`` to
    ``route_cluster``; one EDS cluster per ``backends`` entry (name -> port).

    ``per_type`` makes EDS and RDS come from their own services instead of ADS.
    """
    source = b.grpc_source() if per_type else None
    timeouts = connect_timeouts or {}
    resources: list[Any] = []
    for name, port in backends.items():
        resources.append(
            b.eds_cluster(name, source=source, connect_timeout=timeouts.get(name, 1.0))
        )
        resources.append(b.load_assignment(name, [("127.0.0.1", port)]))
    resources.append(b.http_listener("listener_0", listener_port, "route_0", source=source))
    resources.append(
        b.route_configuration("route_0", [("/", route_cluster)], response_headers=headers)
    )
    return Snapshot(resources)


# -- traffic --------------------------------------------------------------------------------

Result = tuple[float, int | None, str]
"""One GET / through Envoy: (monotonic time, status or ``None`` if it failed, body)."""


async def get(port: int, *, timeout: float = 5.0) -> tuple[int, dict[str, str], str] | None:
    """GET / through Envoy's listener; ``None`` if the connection failed."""
    try:
        return await http_get("127.0.0.1", port, timeout=timeout)
    except OSError:
        return None


async def wait_traffic(
    envoy: Envoy,
    port: int,
    body: str,
    *,
    header: tuple[str, str] | None = None,
    timeout: float = 30.0,
) -> tuple[int, dict[str, str], str]:
    """Wait until GET / through Envoy answers 200 with ``body`` (and ``header``)."""
    seen: list[Any] = []

    async def ok() -> bool:
        result = await get(port)
        seen.append(result)
        if result is None or result[0] != 200 or result[2] != body:
            return False
        return header is None or result[1].get(header[0]) == header[1]

    await envoy.wait_for(
        ok, timeout=timeout, what=f"traffic answering {body!r} {header} (last: {seen[-1:]})"
    )
    result = seen[-1]
    assert result is not None
    return result  # type: ignore[no-any-return]


@attrs.define
class Traffic:
    """GET / through Envoy from ``workers`` concurrent loops, every ``interval`` seconds."""

    port: int
    interval: float = 0.02
    workers: int = 1
    results: list[Result] = attrs.field(factory=list)
    _stop: asyncio.Event = attrs.field(factory=asyncio.Event)
    _progress: asyncio.Event = attrs.field(factory=asyncio.Event)

    async def _worker(self) -> None:
        while not self._stop.is_set():
            result = await get(self.port)
            if result is None:
                self.results.append((time.monotonic(), None, ""))
            else:
                self.results.append((time.monotonic(), result[0], result[2]))
            self._progress.set()
            with anyio.move_on_after(self.interval):
                await self._stop.wait()

    async def run(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.workers)))

    async def flowing(self, count: int = 5, *, since: float = 0.0, timeout: float = 10.0) -> None:
        """Wait until at least ``count`` requests completed after ``since`` (monotonic time),
        whatever their outcome: traffic ran across whatever happened in between."""
        with anyio.fail_after(timeout):
            while len(self.between(since, float("inf"))) < count:
                self._progress.clear()
                await self._progress.wait()

    def between(self, start: float, end: float) -> list[Result]:
        return [result for result in self.results if start <= result[0] <= end]

    def failures(self) -> list[Result]:
        return [result for result in self.results if result[1] != 200]

    def bodies(self) -> set[str]:
        return {result[2] for result in self.results}


@contextlib.asynccontextmanager
async def traffic_running(
    port: int, *, interval: float = 0.02, workers: int = 1
) -> AsyncIterator[Traffic]:
    """Send GET / through Envoy continuously while the block runs.

    A plain asyncio task rather than a task group, so that a failure in the block reaches
    the test as itself rather than inside an exception group.
    """
    traffic = Traffic(port, interval, workers)
    task = asyncio.create_task(traffic.run())
    try:
        yield traffic
    finally:
        traffic._stop.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(15):
            await task


# -- a control plane in another process -----------------------------------------------------


@contextlib.asynccontextmanager
async def control_plane_process(
    xds_port: int, listener_port: int, backend_port: int
) -> AsyncIterator[anyio.abc.Process]:
    """Serve ``make_snapshot(listener_port, {"backend_a": backend_port}, "backend_a")`` from
    a separate Python process on ``xds_port``; it is killed when the block ends (or earlier
    by the test, to simulate a crash)."""
    command = [
        sys.executable,
        "-m",
        "tests.integration._envoy_support",
        str(xds_port),
        str(listener_port),
        str(backend_port),
    ]
    process = await anyio.open_process(command, cwd=_REPO, stderr=subprocess.STDOUT)
    try:
        assert process.stdout is not None
        received = b""
        with anyio.fail_after(30):
            while b"ready" not in received:
                chunk = await process.stdout.receive()
                received += chunk
        yield process
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.aclose()


async def _serve(xds_port: int, listener_port: int, backend_port: int) -> None:
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, make_snapshot(listener_port, {"backend_a": backend_port}, "backend_a"))
    async with Http2Transport(XdsServer(cache)) as transport:
        await transport.start(port=xds_port)
        print("ready", flush=True)
        await anyio.sleep_forever()


# -- admin ----------------------------------------------------------------------------------


def _section(dump: Mapping[str, Any], suffix: str) -> dict[str, Any]:
    for config in dump["configs"]:
        if config["@type"].endswith("." + suffix):
            return dict(config)
    raise AssertionError(f"no {suffix} in config_dump")


def cds_version(dump: Mapping[str, Any]) -> str:
    """The version of the last CDS response Envoy accepted."""
    return str(_section(dump, "ClustersConfigDump").get("version_info", ""))


def lds_version(dump: Mapping[str, Any]) -> str:
    """The version of the last LDS response Envoy accepted."""
    return str(_section(dump, "ListenersConfigDump").get("version_info", ""))


def cluster_versions(dump: Mapping[str, Any]) -> dict[str, str]:
    """Dynamic active clusters: name -> the CDS version that last added or changed it."""
    section = _section(dump, "ClustersConfigDump")
    return {
        item["cluster"]["name"]: item["version_info"]
        for item in section.get("dynamic_active_clusters", [])
    }


def cluster_timeouts(dump: Mapping[str, Any]) -> dict[str, str]:
    """Dynamic active clusters: name -> connect_timeout as Envoy renders it."""
    section = _section(dump, "ClustersConfigDump")
    return {
        item["cluster"]["name"]: item["cluster"].get("connect_timeout", "")
        for item in section.get("dynamic_active_clusters", [])
    }


def route_versions(dump: Mapping[str, Any]) -> dict[str, str]:
    """Dynamic route configurations: name -> version."""
    section = _section(dump, "RoutesConfigDump")
    return {
        item["route_config"]["name"]: item["version_info"]
        for item in section.get("dynamic_route_configs", [])
    }


if __name__ == "__main__":
    anyio.run(_serve, int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
