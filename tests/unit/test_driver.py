"""The stream driver in memory: real machines, real codec, no network and no sleeps.

A :class:`~xdscore.server.ClientDriver` and :meth:`XdsServer.run_stream` are joined by
:func:`~xdscore.testing.byte_stream_pair`; every wait is on an event, under a deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import attrs
import pytest

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    GrpcStatus,
    RemoteProtocolError,
    ServerCallbacks,
    Snapshot,
    SnapshotCache,
    StreamInfo,
    StreamLimits,
    XdsServer,
    same_for_all,
)
from xdscore import builders as b
from xdscore.protocol import DeltaClient, DiscoveryRequest, SotwClient, SotwResponse
from xdscore.server import ClientDriver, _server
from xdscore.server._codecs import SOTW
from xdscore.server._observer import _overridden as _hook
from xdscore.testing import MemoryByteStream, byte_stream_pair
from xdscore.wire import Node, decode_request, decode_response, encode_request, make_node

pytestmark = pytest.mark.anyio
DEADLINE = 5.0
NODE = make_node(id="driver-test")


def config(port: int, clusters: tuple[str, ...] = ("a", "b")) -> Snapshot:
    return Snapshot(
        [
            *(b.eds_cluster(name) for name in clusters),
            *(b.load_assignment(name, [("10.0.0.1", port)]) for name in clusters),
            b.http_listener("l", 10000, "r"),
            b.route_configuration("r", [("/", clusters[0])]),
        ]
    )


@attrs.define
class Recorder(ServerCallbacks):
    """Remembers what the server reported, and signals each change."""

    closed: list[tuple[int, BaseException | None]] = attrs.field(factory=list)
    responses: list[SotwResponse | object] = attrs.field(factory=list)
    changed: anyio.Event = attrs.field(factory=anyio.Event)

    def on_stream_close(self, stream: StreamInfo, error: BaseException | None) -> None:
        self.closed.append((stream.id, error))
        self.signal()

    def on_event(self, stream: StreamInfo, event: object) -> None:
        self.signal()

    def on_response(self, stream: StreamInfo, response: object) -> None:
        self.responses.append(response)
        self.signal()

    def client_saw(self, response: object, answer: object) -> None:
        """A ClientDriver ``on_response`` hook that wakes the waiters too."""
        self.signal()

    def signal(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


async def until(condition: Callable[[], bool], wake: Callable[[], anyio.Event]) -> None:
    """Wait, under the deadline, until ``condition`` holds, re-checking at each wake-up."""
    with anyio.fail_after(DEADLINE):
        while not condition():
            await wake().wait()


@attrs.define
class Rig:
    """A server on one end of a memory stream; the test holds the other end."""

    server: XdsServer
    cache: SnapshotCache
    recorder: Recorder
    client_end: MemoryByteStream
    server_end: MemoryByteStream
    outcome: list[BaseException | None]
    group: anyio.abc.TaskGroup


@asynccontextmanager
async def rig(
    *, buffer: int = 0, protocol: str = "sotw", limits: StreamLimits | None = None
) -> AsyncIterator[Rig]:
    cache = SnapshotCache(group=same_for_all)
    recorder = Recorder()
    server = XdsServer(cache, callbacks=recorder, limits=limits)
    client_end, server_end = byte_stream_pair(buffer)
    outcome: list[BaseException | None] = []

    async def serve() -> None:
        try:
            await server.run_stream(server_end, protocol=protocol)  # type: ignore[arg-type]
        except Exception as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    async with anyio.create_task_group() as group:
        group.start_soon(serve)
        yield Rig(server, cache, recorder, client_end, server_end, outcome, group)
        group.cancel_scope.cancel()


async def watching_clusters(r: Rig) -> ClientDriver:
    """A SotW client of ``r``'s server, served ``config(80)``, watching every cluster."""
    r.cache.set_snapshot(None, config(80))
    client = ClientDriver(SotwClient(node=NODE), r.client_end, on_response=r.recorder.client_saw)
    r.group.start_soon(client.run)
    await client.watch(CLUSTER, None)
    return client


async def test_a_sotw_client_converges_and_follows_a_change() -> None:
    async with rig() as r:
        client = await watching_clusters(r)
        await client.watch(LISTENER, None)
        machine = client.machine
        assert isinstance(machine, SotwClient)

        def holds(snapshot: Snapshot) -> bool:
            return all(
                {n: x.version for n, x in machine.holds(t).items()}
                == {n: x.version for n, x in (snapshot.resources(t) or {}).items()}
                for t in (CLUSTER, ENDPOINT, LISTENER, ROUTE)
            )

        first = config(80)
        await until(lambda: holds(first), lambda: r.recorder.changed)
        second = config(81, ("a", "c"))
        r.cache.set_snapshot(None, second)
        await until(lambda: holds(second), lambda: r.recorder.changed)
        assert set(machine.holds(ENDPOINT)) == {"a", "c"}  # it followed the new cluster


async def test_the_codec_is_handed_the_nonce_the_stream_sent_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each request is decoded with the nonce of the response sent before it (an ACK ending
    in it decodes without walking its names: see ``decode_request``)."""
    handed: list[tuple[str, str]] = []

    def decode(data: bytes, known: Node | None, max_names: int, nonce: str) -> DiscoveryRequest:
        request = decode_request(data, known, max_names, nonce)
        handed.append((nonce, request.response_nonce))
        return request

    monkeypatch.setattr(_server, "SOTW", attrs.evolve(SOTW, decode=decode))

    def sent() -> list[SotwResponse]:
        return [x for x in r.recorder.responses if isinstance(x, SotwResponse)]

    def acked_last() -> bool:
        return bool(handed and sent() and handed[-1][1] == sent()[-1].nonce)

    async with rig() as r:
        await watching_clusters(r)
        await until(acked_last, lambda: r.recorder.changed)
        assert handed[0] == ("", "")  # nothing was sent before the first request
        pushed = len(sent())
        r.cache.set_snapshot(None, config(81))  # new endpoints: pushed, then ACKed
        await until(lambda: len(sent()) > pushed and acked_last(), lambda: r.recorder.changed)
        assert handed[-1] == (sent()[-1].nonce, sent()[-1].nonce)
        assert all(hint for hint, _ in handed[1:])


async def test_a_delta_client_converges_over_the_same_driver() -> None:
    async with rig(protocol="delta") as r:
        r.cache.set_snapshot(None, config(80))
        client = ClientDriver(
            DeltaClient(node=NODE), r.client_end, on_response=r.recorder.client_saw
        )
        r.group.start_soon(client.run)
        await client.subscribe(CLUSTER)
        await client.subscribe(LISTENER)
        machine = client.machine
        assert isinstance(machine, DeltaClient)
        await until(
            lambda: (
                set(machine.holds(ENDPOINT)) == {"a", "b"} and set(machine.holds(ROUTE)) == {"r"}
            ),
            lambda: r.recorder.changed,
        )


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"\xff\xff\xff", GrpcStatus.INVALID_ARGUMENT),
        (encode_request(DiscoveryRequest(type_url=CLUSTER)), GrpcStatus.INVALID_ARGUMENT),
        (b"\x0a" + bytes([120]) + b"x" * 120, GrpcStatus.RESOURCE_EXHAUSTED),
    ],
    ids=["malformed", "no-node", "too-large"],
)
async def test_a_protocol_error_ends_the_stream_with_its_status(
    data: bytes, status: GrpcStatus
) -> None:
    async with rig(limits=StreamLimits(max_request_bytes=100)) as r:
        await r.client_end.send(data)
        await until(lambda: bool(r.outcome), lambda: r.recorder.changed)
        (error,) = r.outcome
        assert isinstance(error, RemoteProtocolError)
        assert error.status is status
        assert r.recorder.closed == [(1, error)]
        assert list(r.server.streams()) == []


async def test_a_client_gone_mid_write_is_a_clean_end_and_releases_the_watch() -> None:
    async with rig(buffer=0) as r:
        r.cache.set_snapshot(None, config(80))
        request = SotwClient(node=NODE).watch(CLUSTER, None)
        await r.client_end.send(encode_request(request))
        with anyio.fail_after(DEADLINE):
            await r.server_end.writing.wait()  # the cluster response, which nobody reads
        assert r.recorder.responses == []
        assert r.cache.watcher_count() == 1
        r.client_end.reset()
        await until(lambda: bool(r.outcome), lambda: r.recorder.changed)
        assert r.outcome == [None]
        assert r.recorder.closed == [(1, None)]
        assert r.cache.watcher_count() == 0


async def test_a_slow_reader_gets_the_latest_state_not_a_backlog() -> None:
    async with rig(buffer=0) as r:
        r.cache.set_snapshot(None, config(80))
        machine = SotwClient(node=NODE)
        await r.client_end.send(encode_request(machine.watch(CLUSTER, None)))
        with anyio.fail_after(DEADLINE):
            await r.server_end.writing.wait()  # the first response, which nobody reads yet
        for port in (81, 82, 83):  # three changes while the client reads nothing
            r.cache.set_snapshot(None, config(port, ("a", f"p{port}")))
        latest = r.cache.snapshot(None)
        assert latest is not None
        versions = []
        client = ClientDriver(
            machine,
            r.client_end,
            follow=False,
            on_response=lambda response, _: (
                versions.append(response.version_info),
                r.recorder.signal(),
            ),
        )
        r.group.start_soon(client.run)
        await until(lambda: len(versions) == 2, lambda: r.recorder.changed)
        assert versions == [config(80).version(CLUSTER), latest.version(CLUSTER)]
        assert len(r.recorder.responses) == 2


async def answered_once(r: Rig) -> None:
    """A client on the rig's stream watches clusters until it has had an answer."""
    r.cache.set_snapshot(None, config(80))
    client = ClientDriver(SotwClient(node=NODE), r.client_end)
    r.group.start_soon(client.run)
    await client.watch(CLUSTER, None)
    await until(lambda: bool(r.recorder.responses), lambda: r.recorder.changed)


async def test_closing_the_server_cancels_its_streams() -> None:
    async with rig() as r:
        await answered_once(r)
        r.server.close()
        await until(lambda: bool(r.outcome), lambda: r.recorder.changed)
        assert r.outcome == [None]
        assert list(r.server.streams()) == []
        assert r.cache.watcher_count() == 0
        with pytest.raises(RemoteProtocolError) as refused:
            await r.server.run_stream(byte_stream_pair()[1], protocol="sotw")
        assert refused.value.status is GrpcStatus.UNAVAILABLE


async def test_stopping_one_stream_ends_it_cleanly_and_the_server_goes_on() -> None:
    async with rig() as r:
        await answered_once(r)
        (stream,) = r.server.streams()
        stream.stop.cancel()
        await until(lambda: bool(r.outcome), lambda: r.recorder.changed)
        assert r.outcome == [None]  # (ended with OK, not cancelled)
        assert r.recorder.closed == [(stream.info.id, None)]
        assert stream.stop.called
        assert not r.server.closed
        assert r.cache.watcher_count() == 0


async def test_a_client_closing_its_side_still_gets_pushes_until_it_leaves() -> None:
    async with rig() as r:
        r.cache.set_snapshot(None, config(80))
        machine = SotwClient(node=NODE)
        await r.client_end.send(encode_request(machine.watch(CLUSTER, None)))
        await r.client_end.send(encode_request(machine.watch(LISTENER, None)))
        r.client_end.close()  # no more requests: gRPC's half-close
        types = set()
        with anyio.fail_after(DEADLINE):
            for _ in range(2):  # written after the half-close (each waits for this read)
                data = await r.client_end.receive()
                assert data is not None
                types.add(decode_response(data).type_url)
        assert types == {CLUSTER, LISTENER}
        assert r.outcome == []
        assert [s.info.id for s in r.server.streams()] == [1]
        r.client_end.reset()
        await until(lambda: bool(r.outcome), lambda: r.recorder.changed)
        assert r.outcome == [None]
        assert r.recorder.closed == [(1, None)]


def test_only_the_callbacks_a_subclass_or_instance_defines_are_called() -> None:
    """The driver skips ServerCallbacks' own (empty) methods, and calls what a subclass
    overrides or an instance was given."""

    class OnAck(ServerCallbacks):
        def on_ack(self, stream: StreamInfo, event: object) -> None:
            pass

    base, subclass = ServerCallbacks(), OnAck()
    assert _hook(base, "on_ack") is None
    assert _hook(subclass, "on_request") is None
    assert _hook(subclass, "on_ack") == subclass.on_ack
    seen: list[object] = []
    patched = ServerCallbacks()
    patched.on_request = lambda stream, request: seen.append(request)  # type: ignore[method-assign]
    hook = _hook(patched, "on_request")
    assert hook is not None
    hook(None, "a request")
    assert seen == ["a request"]
