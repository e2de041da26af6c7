"""Helpers for the fault tests: a server on loopback and raw gRPC clients that misbehave.

The clients are grpcio's asyncio API with no serializers, so they send exactly the bytes a
test chooses (including bytes that are not a protobuf message at all) and receive the raw
response bytes, which the helpers decode with the ``xds-protos`` messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import grpc
import h2.config
import h2.connection
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import duration_pb2
from google.protobuf.message import Message

from xdscore import (
    CLUSTER,
    ENDPOINT,
    GrpclibTransport,
    Http2Transport,
    Resource,
    ServerCallbacks,
    Snapshot,
    SnapshotCache,
    StreamInfo,
    StreamLimits,
    XdsServer,
    make_resource,
    same_for_all,
)
from xdscore import builders as b
from xdscore.server import Rebalancing, ServerLimits

from ..factories import wait_until

TransportKind = type[Http2Transport] | type[GrpclibTransport]
ON_BOTH_TRANSPORTS = pytest.mark.parametrize(
    "transport_kind", [Http2Transport, GrpclibTransport], ids=["http2", "grpclib"]
)
"""For tests of what both transports must do alike: each runs on each."""

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
DELTA_ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
CDS = "/envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters"
LDS = "/envoy.service.listener.v3.ListenerDiscoveryService/StreamListeners"

MARKER = "generation"
"""The cluster whose ``alt_stat_name`` says which snapshot generation a client holds."""
UNLIMITED = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
]


# -- the server ----------------------------------------------------------------------------


class Recorder(ServerCallbacks):
    """What the server reported, per stream id."""

    def __init__(self) -> None:
        self.opened: dict[int, StreamInfo] = {}
        self.closed: dict[int, BaseException | None] = {}
        self.responses: Counter[int] = Counter()

    def on_stream_open(self, stream: StreamInfo) -> None:
        self.opened[stream.id] = stream

    def on_stream_close(self, stream: StreamInfo, error: BaseException | None) -> None:
        self.closed[stream.id] = error

    def on_response(self, stream: StreamInfo, response: Any) -> None:
        self.responses[stream.id] += 1

    def stream_of(self, node_id: str) -> int:
        """The id of the (only) stream whose node is ``node_id``."""
        found = [
            info.id
            for info in self.opened.values()
            if info.node is not None and info.node.id == node_id
        ]
        assert len(found) == 1, f"streams of node {node_id!r}: {found}"
        return found[0]


@attrs.define
class Plane:
    """A running control plane on 127.0.0.1 and the knobs the tests turn."""

    cache: SnapshotCache
    server: XdsServer
    transport: Http2Transport | GrpclibTransport
    recorder: Recorder
    port: int
    generation: int = 0
    extra: Callable[[int], Iterable[Resource]] = lambda generation: ()
    """The resources, beyond the marker cluster, of the snapshot of a generation."""

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def publish(self, generation: int | None = None) -> int:
        """Serve a new snapshot: the marker cluster at ``generation`` plus :attr:`extra`."""
        self.generation = self.generation + 1 if generation is None else generation
        resources = [marker_cluster(self.generation), *self.extra(self.generation)]
        self.cache.set_snapshot(None, Snapshot(resources))
        return self.generation

    def active(self) -> int:
        return len(list(self.server.streams()))

    def writing(self, stream_id: int, type_url: str) -> bool:
        """Whether the server sent (or is writing: it polls, then writes at once) a response
        of ``type_url`` on stream ``stream_id`` that the client has not answered yet."""
        for stream in self.server.streams():
            if stream.info.id == stream_id:
                state = stream.machine.type_states().get(type_url)
                return state is not None and state.outstanding is not None
        return False


@asynccontextmanager
async def control_plane(
    *,
    limits: StreamLimits | None = None,
    server_limits: ServerLimits | None = None,
    rebalancing: Rebalancing | None = None,
    recorder: Recorder | None = None,
    transport_kind: type[Http2Transport] | type[GrpclibTransport] = Http2Transport,
) -> AsyncIterator[Plane]:
    """A server whose every client (any node) gets one snapshot, stopped on exit, served by
    ``transport_kind`` (xdscore's own HTTP/2 server unless a test asks for grpclib's)."""
    cache = SnapshotCache(group=same_for_all)
    recorder = recorder or Recorder()
    server = XdsServer(
        cache,
        callbacks=recorder,
        limits=limits,
        server_limits=server_limits,
        rebalancing=rebalancing,
    )
    transport = transport_kind(server)
    port = await transport.start()
    plane = Plane(cache=cache, server=server, transport=transport, recorder=recorder, port=port)
    plane.publish(0)
    try:
        yield plane
    finally:
        with anyio.fail_after(10):
            await transport.stop()


# -- resources -----------------------------------------------------------------------------


def marker_cluster(generation: int, name: str = MARKER) -> Resource:
    """A static cluster (no references, so ordering never holds it) naming ``generation``."""
    cluster = cluster_pb2.Cluster(
        name=name,
        type=cluster_pb2.Cluster.DiscoveryType.STATIC,
        alt_stat_name=f"g{generation}",
        connect_timeout=duration_pb2.Duration(seconds=1),
    )
    return make_resource(cluster)


def load_assignments(count: int, endpoints: int, *, prefix: str = "cla") -> list[Resource]:
    """``count`` load assignments of ``endpoints`` endpoints each, built from one template."""
    template = b.load_assignment(
        "template", [(f"10.{i // 250 % 250}.{i % 250}.1", 10_000 + i) for i in range(endpoints)]
    )
    out = []
    for index in range(count):
        template.cluster_name = f"{prefix}-{index}"
        out.append(
            make_resource(
                template.SerializeToString(deterministic=True),
                type_url=ENDPOINT,
                name=template.cluster_name,
            )
        )
    return out


def marker_assignment(generation: int, name: str) -> Resource:
    """A small load assignment whose locality zone names ``generation``."""
    return make_resource(b.load_assignment(name, [("10.0.0.1", 80)], zone=f"g{generation}"))


def generation_of(response: Any, type_url: str = CLUSTER) -> int:
    """The generation a SotW or Delta response carries (the marker cluster, or a zone-marked
    load assignment)."""
    if isinstance(response, discovery_pb2.DeltaDiscoveryResponse):
        entries = [resource.resource for resource in response.resources]
    else:
        entries = list(response.resources)
    for packed in entries:
        if type_url == CLUSTER:
            cluster = cluster_pb2.Cluster.FromString(packed.value)
            if cluster.name == MARKER:
                return int(cluster.alt_stat_name[1:])
        else:
            assignment = endpoint_pb2.ClusterLoadAssignment.FromString(packed.value)
            zone = assignment.endpoints[0].locality.zone if assignment.endpoints else ""
            if zone.startswith("g"):
                return int(zone[1:])
    raise AssertionError(f"no generation marker in a response of {len(response.resources)}")


# -- requests ------------------------------------------------------------------------------


def node(node_id: str, cluster: str = "fault-tests") -> base_pb2.Node:
    return base_pb2.Node(id=node_id, cluster=cluster)


def request(
    type_url: str = CLUSTER,
    names: Iterable[str] = (),
    *,
    node_id: str | None = None,
    version: str = "",
    nonce: str = "",
) -> discovery_pb2.DiscoveryRequest:
    message = discovery_pb2.DiscoveryRequest(
        type_url=type_url, resource_names=list(names), version_info=version, response_nonce=nonce
    )
    if node_id is not None:
        message.node.CopyFrom(node(node_id))
    return message


def ack(response: Any, names: Iterable[str] = ()) -> Any:
    """The ACK of a SotW response (repeating ``names``) or of a Delta response."""
    if isinstance(response, discovery_pb2.DeltaDiscoveryResponse):
        return delta_request(response.type_url, nonce=response.nonce)
    return request(response.type_url, names, version=response.version_info, nonce=response.nonce)


def delta_request(
    type_url: str = CLUSTER,
    subscribe: Iterable[str] = (),
    *,
    node_id: str | None = None,
    nonce: str = "",
) -> discovery_pb2.DeltaDiscoveryRequest:
    message = discovery_pb2.DeltaDiscoveryRequest(
        type_url=type_url, resource_names_subscribe=list(subscribe), response_nonce=nonce
    )
    if node_id is not None:
        message.node.CopyFrom(node(node_id))
    return message


# -- clients -------------------------------------------------------------------------------


@attrs.define
class Failure:
    """How a call ended, as the client saw it."""

    code: grpc.StatusCode
    details: str


class RawCall:
    """One bidirectional stream carrying raw bytes.

    Nothing is read until a test first asks for a response: a client that never calls
    :meth:`recv` never reads, so its HTTP/2 window fills up. From then on a reader task
    drains the call into a queue (cancelling a grpc read would cancel the whole call).
    """

    def __init__(self, channel: grpc.aio.Channel, path: str, *, delta: bool = False) -> None:
        self.call: Any = channel.stream_stream(path)()
        self._response_type: Callable[[bytes], Any] = (
            discovery_pb2.DeltaDiscoveryResponse.FromString
            if delta
            else discovery_pb2.DiscoveryResponse.FromString
        )
        self._queue: asyncio.Queue[bytes | Failure] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        while True:
            try:
                data = await self.call.read()
            except grpc.aio.AioRpcError as exc:
                self._queue.put_nowait(Failure(exc.code(), exc.details() or ""))
                return
            except asyncio.CancelledError:
                if not self.call.cancelled():
                    raise  # this task was cancelled, not the call
                # grpc raises CancelledError from reads of a call the client cancelled.
                self._queue.put_nowait(Failure(grpc.StatusCode.CANCELLED, "cancelled locally"))
                return
            if data is grpc.aio.EOF:
                code = await self.call.code()
                self._queue.put_nowait(Failure(code, await self.call.details() or ""))
                return
            self._queue.put_nowait(data)

    async def next(self, timeout: float) -> bytes | Failure:
        """The next response's bytes, or how the call ended."""
        if self._reader is None:
            self._reader = asyncio.create_task(self._read())
        with anyio.fail_after(timeout):
            return await self._queue.get()

    async def send(self, message: Message | bytes) -> None:
        """Write one message. A write the server beat by ending the call is not an error
        here: :meth:`recv` or :meth:`failure` then report how the call ended (though grpcio
        may then report its own INTERNAL error instead of the server's status)."""
        data = message if isinstance(message, bytes) else message.SerializeToString()
        try:
            await self.call.write(data)
        except grpc.aio.AioRpcError:
            await self.call.code()  # the write failed because the call is over

    async def recv(self, timeout: float = 5.0) -> Any:
        """The next response; fails the test if the stream ends or nothing comes in time."""
        item = await self.next(timeout)
        assert not isinstance(item, Failure), f"the stream ended: {item}"
        return self._response_type(item)

    async def failure(self, timeout: float = 5.0) -> Failure:
        """How the call ends (an OK end included); responses before it are skipped."""
        with anyio.fail_after(timeout):
            while not isinstance(item := await self.next(timeout), Failure):
                pass
        return item

    async def silent(self, seconds: float) -> None:
        """Assert nothing arrives (and the call does not end) for ``seconds``."""
        with anyio.move_on_after(seconds):
            item = await self.next(seconds + 1)
            raise AssertionError(f"expected silence, got {item!r:.300}")

    def cancel(self) -> None:
        self.call.cancel()

    async def finished(self) -> None:
        """Wait for the call to end and the reader to see it (cancel the call first)."""
        await self.call.code()
        if self._reader is not None:
            # Not cancelled: the pending read must complete on this event loop.
            await self._reader


class Connection:
    """One HTTP/2 connection (a grpc channel of its own), like one proxy's.

    grpc's asyncio layer delivers completions to the event loop an operation started on;
    an operation still pending when a test's loop closes would surface in the next test.
    So :meth:`close` does not return before every call on the connection has finished.
    """

    def __init__(
        self,
        target: str,
        options: list[tuple[str, Any]] | None = None,
        compression: grpc.Compression | None = None,
    ) -> None:
        # A local subchannel pool keeps grpc from sharing one connection between channels.
        local = [("grpc.use_local_subchannel_pool", 1), *(options or [])]
        self.channel = grpc.aio.insecure_channel(target, options=local, compression=compression)
        self.calls: list[RawCall] = []

    def open(self, path: str, *, delta: bool = False) -> RawCall:
        """Start a stream on ``path`` (nothing is sent until the test sends)."""
        call = RawCall(self.channel, path, delta=delta)
        self.calls.append(call)
        return call

    async def close(self) -> None:
        """Close the connection abruptly (calls still open are cancelled) and wait."""
        await self.channel.close()
        with anyio.fail_after(5):
            for call in self.calls:
                await call.finished()


@asynccontextmanager
async def channel(
    target: str,
    *,
    options: list[tuple[str, Any]] | None = None,
    compression: grpc.Compression | None = None,
) -> AsyncIterator[Connection]:
    """A fresh connection, closed (and every call on it finished) on exit; ``compression``
    makes grpcio compress every message it sends."""
    connection = Connection(target, options, compression)
    try:
        yield connection
    finally:
        await connection.close()


class DroppingClient:
    """A gRPC stream written by hand with ``h2`` on a plain socket: it never reads from the
    socket, and :meth:`drop` resets the TCP connection without any HTTP/2 goodbye (no
    RST_STREAM, no GOAWAY), as when a proxy's host dies."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    @classmethod
    async def open(cls, port: int, path: str, message: Message) -> DroppingClient:
        """Open a stream on ``path`` and send ``message`` (it must fit the initial window)."""
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        connection.initiate_connection()
        stream_id = connection.get_next_available_stream_id()
        connection.send_headers(
            stream_id,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", f"127.0.0.1:{port}"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        )
        data = message.SerializeToString()
        framed = b"\x00" + len(data).to_bytes(4, "big") + data
        assert len(framed) < connection.local_flow_control_window(stream_id)
        size = connection.max_outbound_frame_size
        for start in range(0, len(framed), size):
            connection.send_data(stream_id, framed[start : start + size])
        writer.write(connection.data_to_send())
        await writer.drain()
        return cls(writer)

    def drop(self) -> None:
        self._writer.transport.abort()


class HealthyClient:
    """A well-behaved ADS client: all clusters, every response ACKed, the generation noted."""

    def __init__(self, plane: Plane, node_id: str = "healthy") -> None:
        self.plane = plane
        self.node_id = node_id
        self.generation = -1
        self.responses = 0
        self.acks = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self.ended: Failure | None = None
        """How the stream ended, if the server ended it."""

    async def _run(self, connection: Connection) -> None:
        call = connection.open(ADS)
        await call.send(request(CLUSTER, node_id=self.node_id))
        try:
            while True:
                item = await call.next(timeout=3600)
                if isinstance(item, Failure):
                    self.ended = item
                    self._changed.set()
                    return
                response = discovery_pb2.DiscoveryResponse.FromString(item)
                self.responses += 1
                self.generation = generation_of(response)
                self._changed.set()
                await call.send(ack(response))
                self.acks += 1
        except BaseException as exc:
            self.error = exc
            self._changed.set()
            raise

    async def reached(self, generation: int, timeout: float = 2.0) -> float:
        """Wait until the client holds ``generation`` (or later); return how long it took."""
        start = time.monotonic()
        with anyio.fail_after(timeout):
            while self.generation < generation:
                assert self.error is None, f"the healthy client failed: {self.error!r}"
                assert self.ended is None, f"the healthy client's stream ended: {self.ended}"
                self._changed.clear()
                await self._changed.wait()
        return time.monotonic() - start

    async def still_served(self, timeout: float = 2.0) -> float:
        """Publish a new generation and wait for this client to receive it."""
        return await self.reached(self.plane.publish(), timeout)


@attrs.define
class ReconnectingClient:
    """An ADS client that watches clusters, ACKs everything and, when the server ends its
    stream, reconnects at once on the same connection (as Envoy does after a clean end)."""

    connection: Connection
    node_id: str
    generation: int = -1
    """The generation of the marker cluster it holds (-1: none, or no marker)."""
    version: str = ""
    """The version of the last response."""
    ends: list[tuple[float, Failure]] = attrs.field(factory=list)
    changed: asyncio.Event = attrs.field(factory=asyncio.Event)

    async def run(self) -> None:
        while True:
            call = self.connection.open(ADS)
            await call.send(request(CLUSTER, node_id=self.node_id))
            while True:
                item = await call.next(timeout=3600)
                if isinstance(item, Failure):
                    self.ends.append((time.monotonic(), item))
                    break
                response = discovery_pb2.DiscoveryResponse.FromString(item)
                self.version = response.version_info
                with contextlib.suppress(AssertionError):
                    self.generation = generation_of(response)
                self.changed.set()
                await call.send(ack(response))

    async def reached(self, generation: int, timeout: float) -> None:
        with anyio.fail_after(timeout):
            while self.generation < generation:
                self.changed.clear()
                await self.changed.wait()


async def stop_clients(tasks: list[asyncio.Task[None]], connections: list[Connection]) -> None:
    """Cancel the client tasks, then close their connections (and wait for them)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for connection in connections:
        await connection.close()


@asynccontextmanager
async def healthy_client(
    plane: Plane, node_id: str = "healthy", *, connection: Connection | None = None
) -> AsyncIterator[HealthyClient]:
    """A :class:`HealthyClient` that has converged on the current generation, on a
    connection of its own unless ``connection`` is given."""
    client = HealthyClient(plane, node_id)
    async with contextlib.AsyncExitStack() as stack:
        if connection is None:
            connection = await stack.enter_async_context(channel(plane.target))
        client._task = asyncio.create_task(client._run(connection))
        try:
            await client.reached(plane.generation, timeout=5)
            yield client
        finally:
            client._task.cancel()
            await asyncio.wait([client._task])


async def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait until ``condition()`` holds, polling (the server state it reads has no event)."""
    await wait_until(condition, timeout=timeout)


def rss_bytes() -> int:
    """This process's resident set size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


# -- the benchmark server, in a process of its own -----------------------------------------

BENCH_SERVER = Path(__file__).parents[2] / "benchmarks" / "xds_server.py"


class BenchServer:
    """The benchmark server (R clusters from a snapshot, endpoints from a linear cache) as a
    subprocess driven over stdin, so that its memory is measured on its own, from outside."""

    def __init__(self, process: subprocess.Popen[str], target: str) -> None:
        self.process = process
        self.target = target

    def push(self) -> None:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write("push\n")
        self.process.stdin.flush()
        while not self.process.stdout.readline().startswith("SNAPSHOT_SET"):
            pass

    def _status(self, field: str) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        kb = next(line for line in status.splitlines() if line.startswith(f"{field}:"))
        return int(kb.split()[1]) / 1024

    def rss_mb(self) -> float:
        """The process's resident memory now."""
        return self._status("VmRSS")

    def peak_mb(self) -> float:
        """The most resident memory since the last :meth:`reset_peak`."""
        return self._status("VmHWM")

    def reset_peak(self) -> None:
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")


@contextlib.contextmanager
def bench_server(clusters: int, transport: str = "http2") -> Iterator[BenchServer]:
    command = [sys.executable, str(BENCH_SERVER), "--addr", "127.0.0.1:0"]
    command += ["--clusters", str(clusters), "--transport", transport]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("LISTENING"), line
        yield BenchServer(process, line.split("addr=", 1)[1].strip())
    finally:
        process.kill()
        process.wait()
