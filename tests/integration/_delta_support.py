"""Helpers for the real-Envoy Delta (incremental) xDS tests: a recording callbacks object
that understands Delta responses, resource builders, traffic probes and admin readers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import anyio
import attrs

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    Resource,
    ResponseAcked,
    ResponseNacked,
    ServerCallbacks,
    StreamInfo,
    make_resource,
)
from xdscore import builders as b
from xdscore.protocol import (
    DeltaDiscoveryRequest,
    DeltaResponse,
    DiscoveryRequest,
    Event,
    SotwResponse,
)
from xdscore.testing import Envoy, http_get

__all__ = [
    "ALL_TYPES",
    "DeltaRecorder",
    "Traffic",
    "cluster_hosts",
    "dynamic_clusters",
    "get",
    "resources",
    "short",
    "traffic_running",
    "wait_traffic",
]

ALL_TYPES = (CLUSTER, ENDPOINT, LISTENER, ROUTE)


def short(type_url: str) -> str:
    """``Cluster`` for the cluster type URL, and so on (for messages)."""
    return type_url.rsplit(".", 1)[-1]


@attrs.define
class Entry:
    """One callback: ``kind`` is open/close/request/response/ack/nack/event."""

    kind: str
    stream: StreamInfo
    item: Any
    at: float = attrs.field(factory=time.monotonic)

    @property
    def type_url(self) -> str | None:
        return getattr(self.item, "type_url", None)


class DeltaRecorder(ServerCallbacks):
    """Records every callback of one server in order (use one recorder per server: stream
    ids and nonces restart with each :class:`XdsServer`)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def on_stream_open(self, stream: StreamInfo) -> None:
        self.entries.append(Entry("open", stream, None))

    def on_stream_close(self, stream: StreamInfo, error: BaseException | None) -> None:
        self.entries.append(Entry("close", stream, error))

    def on_request(
        self, stream: StreamInfo, request: DiscoveryRequest | DeltaDiscoveryRequest
    ) -> None:
        self.entries.append(Entry("request", stream, request))

    def on_event(self, stream: StreamInfo, event: Event) -> None:
        self.entries.append(Entry("event", stream, event))

    def on_ack(self, stream: StreamInfo, event: ResponseAcked) -> None:
        self.entries.append(Entry("ack", stream, event))

    def on_nack(self, stream: StreamInfo, event: ResponseNacked) -> None:
        self.entries.append(Entry("nack", stream, event))

    def on_response(self, stream: StreamInfo, response: SotwResponse | DeltaResponse) -> None:
        self.entries.append(Entry("response", stream, response))

    # -- queries -----------------------------------------------------------------------------

    def mark(self) -> int:
        """A position in the log, for ``since=``."""
        return len(self.entries)

    def _select(self, kind: str, type_url: str | None, since: int) -> list[Entry]:
        return [
            entry
            for entry in self.entries[since:]
            if entry.kind == kind and (type_url is None or entry.type_url == type_url)
        ]

    def requests(self, type_url: str | None = None, since: int = 0) -> list[DeltaDiscoveryRequest]:
        return [entry.item for entry in self._select("request", type_url, since)]

    def responses(self, type_url: str | None = None, since: int = 0) -> list[DeltaResponse]:
        return [entry.item for entry in self._select("response", type_url, since)]

    def acks(self, type_url: str | None = None, since: int = 0) -> list[ResponseAcked]:
        return [entry.item for entry in self._select("ack", type_url, since)]

    def nacks(self, type_url: str | None = None, since: int = 0) -> list[ResponseNacked]:
        return [entry.item for entry in self._select("nack", type_url, since)]

    def opened(self, since: int = 0) -> list[StreamInfo]:
        return [entry.stream for entry in self._select("open", None, since)]

    def is_acked(self, response: DeltaResponse) -> bool:
        """True if the client ACKed ``response`` (same stream, same nonce)."""
        streams = [
            entry.stream for entry in self._select("response", None, 0) if entry.item is response
        ]
        return any(
            entry.item.nonce == response.nonce
            and entry.item.type_url == response.type_url
            and any(entry.stream is stream for stream in streams)
            for entry in self._select("ack", None, 0)
        )

    def latest_acked(self, type_url: str, since: int = 0) -> bool:
        """True if at least one response of ``type_url`` was sent after ``since`` and the
        latest of them is ACKed."""
        sent = self.responses(type_url, since)
        return bool(sent) and self.is_acked(sent[-1])

    def all_acked(self, types: Iterable[str] = ALL_TYPES, since: int = 0) -> bool:
        return all(self.latest_acked(type_url, since) for type_url in types)

    def dump(self, since: int = 0) -> str:
        """The log as text, for assertion messages."""
        lines = []
        for entry in self.entries[since:]:
            item = entry.item
            if entry.kind == "request":
                detail = (
                    f"{short(item.type_url)} n={item.response_nonce!r} "
                    f"sub={list(item.resource_names_subscribe)} "
                    f"unsub={list(item.resource_names_unsubscribe)} "
                    f"irv={sorted(item.initial_resource_versions)}"
                    + (" ERROR" if item.error_detail else "")
                )
            elif entry.kind == "response":
                detail = (
                    f"{short(item.type_url)} n={item.nonce!r} "
                    f"resources={[r.name for r in item.resources]} removed={list(item.removed)}"
                )
            elif entry.kind in ("ack", "nack"):
                detail = f"{short(item.type_url)} n={item.nonce!r}"
            elif entry.kind == "event":
                continue
            else:
                detail = repr(item) if item else ""
            lines.append(f"  stream {entry.stream.id} {entry.kind:8} {detail}")
        return "\n".join(lines)


# -- resources ------------------------------------------------------------------------------


def resources(
    listener_port: int,
    routed: str,
    endpoints: Mapping[str, Iterable[tuple[str, int]]],
) -> list[Resource]:
    """One EDS cluster and its ClusterLoadAssignment per ``endpoints`` entry, and a listener
    on ``listener_port`` whose route ``route_0`` sends ``/`` to ``routed``."""
    out: list[Resource] = []
    for name, hosts in endpoints.items():
        out.append(make_resource(b.eds_cluster(name)))
        out.append(make_resource(b.load_assignment(name, list(hosts))))
    out.append(make_resource(b.http_listener("listener_0", listener_port, "route_0")))
    out.append(make_resource(b.route_configuration("route_0", [("/", routed)])))
    return out


# -- traffic --------------------------------------------------------------------------------


async def get(port: int) -> tuple[int, dict[str, str], str] | None:
    """GET / through Envoy's listener; ``None`` if the connection failed."""
    try:
        return await http_get("127.0.0.1", port, timeout=5.0)
    except OSError:
        return None


async def wait_traffic(envoy: Envoy, port: int, body: str, *, timeout: float = 30.0) -> None:
    """Wait until GET / through Envoy answers 200 with ``body``."""
    seen: list[Any] = [None]

    async def ok() -> bool:
        result = await get(port)
        seen.append(result)
        return result is not None and result[0] == 200 and result[2] == body

    await envoy.wait_for(ok, timeout=timeout, what=f"traffic answering {body!r} (last: {seen[-1]})")


@attrs.define
class Traffic:
    """GET / results through Envoy from ``workers`` concurrent loops: (time, status, body)."""

    port: int
    interval: float = 0.02
    workers: int = 1
    results: list[tuple[float, int | None, str]] = attrs.field(factory=list)
    _stop: asyncio.Event = attrs.field(factory=asyncio.Event)

    async def _worker(self) -> None:
        while not self._stop.is_set():
            result = await get(self.port)
            if result is None:
                self.results.append((time.monotonic(), None, ""))
            else:
                self.results.append((time.monotonic(), result[0], result[2]))
            with anyio.move_on_after(self.interval):
                await self._stop.wait()

    async def run(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.workers)))

    def between(self, start: float, end: float) -> list[tuple[float, int | None, str]]:
        return [result for result in self.results if start <= result[0] <= end]

    def failures(self) -> list[tuple[float, int | None, str]]:
        return [result for result in self.results if result[1] != 200]

    def bodies(self) -> set[str]:
        return {result[2] for result in self.results}


@contextlib.asynccontextmanager
async def traffic_running(
    port: int, *, interval: float = 0.02, workers: int = 1
) -> AsyncIterator[Traffic]:
    """Send GET / through Envoy continuously while the block runs (a plain asyncio task,
    so a failure in the block reaches the test as itself)."""
    traffic = Traffic(port, interval, workers)
    task = asyncio.create_task(traffic.run())
    try:
        yield traffic
    finally:
        traffic._stop.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(15):
            await task


# -- admin ----------------------------------------------------------------------------------


async def cluster_hosts(envoy: Envoy) -> dict[str, set[tuple[str, int]]]:
    """``/clusters?format=json``: every cluster's hosts as (address, port)."""
    data = json.loads(await envoy.admin("/clusters?format=json"))
    hosts: dict[str, set[tuple[str, int]]] = {}
    for status in data.get("cluster_statuses", []):
        found = hosts.setdefault(status["name"], set())
        for host in status.get("host_statuses", []):
            address = host["address"]["socket_address"]
            found.add((address["address"], int(address["port_value"])))
    return hosts


def dynamic_clusters(dump: Mapping[str, Any]) -> set[str]:
    """The names of the dynamic active clusters in a ``/config_dump``."""
    for config in dump["configs"]:
        if config["@type"].endswith(".ClustersConfigDump"):
            return {item["cluster"]["name"] for item in config.get("dynamic_active_clusters", [])}
    raise AssertionError("no ClustersConfigDump in config_dump")
