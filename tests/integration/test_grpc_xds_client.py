"""xdscore against gRPC's own xDS client (proxyless gRPC, the ``grpcio`` package).

The client runs in a subprocess (``grpc_xds_client_main.py``) so its bootstrap environment
variable is clean and no grpc C-core state leaks into the test process. The backends are
grpcio servers in this process; the control plane is xdscore on the grpclib transport.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent import futures
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import attrs
import grpc  # a hard dependency of this test: missing grpcio must fail, not skip
import pytest

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
    WILDCARD,
    DiscoveryRequest,
    Event,
    NodeIdentified,
    SotwResponse,
    SubscriptionChanged,
)

from ..factories import wait_until
from ._client_process import ClientProcess, running, start

pytestmark = [pytest.mark.anyio, pytest.mark.grpc_client]

TARGET = "echo.test"
ROUTE_NAME = "echo-route"
SERVICE, METHOD_NAME = "demo.Echo", "Say"
METHOD = f"/{SERVICE}/{METHOD_NAME}"
NODE_ID = "grpc-client"
HELPER = Path(__file__).with_name("grpc_xds_client_main.py")
XDS_TYPES = (LISTENER, ROUTE, CLUSTER, ENDPOINT)
SHORT = {LISTENER: "LDS", ROUTE: "RDS", CLUSTER: "CDS", ENDPOINT: "EDS"}
Runs = list[tuple[str, int]]
"""Consecutive RPC outcomes and how many of each, in order."""
CONVERGE = 10.0
"""Seconds to wait for the client to reach a state (it normally takes well under one)."""


# -- the pieces ---------------------------------------------------------------------------


class Recorder(ServerCallbacks):
    """Everything the server reports, in order, for assertions after the fact."""

    def __init__(self) -> None:
        self.streams: list[StreamInfo] = []
        self.requests: list[tuple[int, DiscoveryRequest]] = []
        self.events: list[tuple[int, Event]] = []
        self.responses: list[tuple[int, SotwResponse]] = []
        self.closed: list[tuple[int, BaseException | None]] = []
        self.timeline: list[DiscoveryRequest | SotwResponse] = []
        """Requests received and responses sent, in the order they happened."""
        self.on_ack_calls: list[ResponseAcked] = []
        self.on_nack_calls: list[ResponseNacked] = []

    def on_stream_open(self, stream: StreamInfo) -> None:
        self.streams.append(stream)

    def on_stream_close(self, stream: StreamInfo, error: BaseException | None) -> None:
        self.closed.append((stream.id, error))

    def on_request(self, stream: StreamInfo, request: object) -> None:
        assert isinstance(request, DiscoveryRequest), f"unexpected {request!r}"
        self.requests.append((stream.id, request))
        self.timeline.append(request)

    def on_event(self, stream: StreamInfo, event: Event) -> None:
        self.events.append((stream.id, event))

    def on_ack(self, stream: StreamInfo, event: ResponseAcked) -> None:
        self.on_ack_calls.append(event)

    def on_nack(self, stream: StreamInfo, event: ResponseNacked) -> None:
        self.on_nack_calls.append(event)

    def on_response(self, stream: StreamInfo, response: object) -> None:
        assert isinstance(response, SotwResponse), f"unexpected {response!r}"
        self.responses.append((stream.id, response))
        self.timeline.append(response)

    # views

    def acks(self, type_url: str) -> list[ResponseAcked]:
        return [
            e for _, e in self.events if isinstance(e, ResponseAcked) and e.type_url == type_url
        ]

    def nacks(self) -> list[ResponseNacked]:
        return [e for _, e in self.events if isinstance(e, ResponseNacked)]

    def subscriptions(self, type_url: str) -> list[SubscriptionChanged]:
        return [
            e
            for _, e in self.events
            if isinstance(e, SubscriptionChanged) and e.type_url == type_url
        ]

    def last_response(self, type_url: str) -> SotwResponse | None:
        sent = [r for _, r in self.responses if r.type_url == type_url]
        return sent[-1] if sent else None

    def acked_latest(self, type_url: str) -> bool:
        """The newest response of ``type_url`` was ACKed (same nonce and version)."""
        latest = self.last_response(type_url)
        return latest is not None and any(
            a.nonce == latest.nonce and a.version_info == latest.version_info
            for a in self.acks(type_url)
        )

    def transcript(self) -> str:
        """A readable log of the exchange, for assertion messages."""
        lines = []
        for item in self.timeline:
            short = SHORT.get(item.type_url, item.type_url)
            if isinstance(item, DiscoveryRequest):
                lines.append(
                    f"  <- {short} names={list(item.resource_names)} "
                    f"version={item.version_info!r} nonce={item.response_nonce!r}"
                    + (f" NACK {item.error_detail.message!r}" if item.error_detail else "")
                )
            else:
                lines.append(
                    f"  -> {short} {sorted(item.selection.resources)} "
                    f"version={item.version_info!r} nonce={item.nonce!r}"
                )
        return "\n".join(lines)


@contextmanager
def grpc_backend(name: str) -> Iterator[int]:
    """A grpcio server on a free loopback port answering ``METHOD`` with ``name``."""

    def say(request: bytes, context: grpc.ServicerContext) -> bytes:
        return name.encode()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE, {METHOD_NAME: grpc.unary_unary_rpc_method_handler(say)}
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    assert port, "the backend could not bind a port"
    server.start()
    try:
        yield port
    finally:
        server.stop(grace=None).wait(timeout=5)


def snapshot(route_to: str, clusters: dict[str, int]) -> Snapshot:
    """What a proxyless client needs: listener -> route -> cluster -> endpoints.

    ``clusters`` maps each cluster to serve to its backend's port; the route sends
    everything to ``route_to``.
    """
    resources: list[object] = [
        b.api_listener(TARGET, ROUTE_NAME),
        b.route_configuration(ROUTE_NAME, [("/", route_to)]),
    ]
    for cluster, port in clusters.items():
        resources.append(b.eds_cluster(cluster, http2=True))
        resources.append(b.load_assignment(cluster, [("127.0.0.1", port)]))
    return Snapshot(resources)


class XdsClient(ClientProcess):
    """The subprocess running gRPC's xDS client; one command and one reply line at a time."""

    async def call(self) -> str:
        """One RPC: ``OK <reply>`` or ``ERR <code> <details>``."""
        await self.send("call")
        return await self.read_line(timeout=15)

    async def burst(self, seconds: float, during: Callable[[], None], after: float) -> Runs:
        """RPCs back to back for ``seconds``; ``during()`` runs ``after`` seconds in."""
        await self.send(f"burst {seconds}")
        assert await self.read_line(timeout=5) == "BURSTING"
        # Not a wait for a condition: the client keeps making RPCs back to back, and the
        # change must land after some of them went through (the subprocess reports its
        # RPCs only when the burst is over).
        await anyio.sleep(after)
        during()
        summary = json.loads(await self.read_line(timeout=seconds + 15))
        return [(outcome, count) for outcome, count in summary["runs"]]

    async def call_until(self, expected: str, *, within: float, recorder: Recorder) -> None:
        """Call until the reply is ``OK expected``."""
        replies = [""]

        async def answered() -> bool:
            replies.append(await self.call())
            return replies[-1] == f"OK {expected}"

        try:
            await wait_until(answered, timeout=within, interval=0.1, what=f"reply {expected!r}")
        except TimeoutError:
            raise AssertionError(
                f"no reply {expected!r} within {within}s; last was {replies[-1]!r}\n"
                f"exchange:\n{recorder.transcript()}\nclient log:\n{self.log_tail()}"
            ) from None


@asynccontextmanager
async def xds_client(xds_port: int, tmp_path: Path) -> AsyncIterator[XdsClient]:
    """Start the client subprocess; always reap it, killing it if it does not quit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_XDS_BOOTSTRAP")}
    stderr_path = tmp_path / "grpc_client.stderr"
    process = await start(
        [sys.executable, str(HELPER), str(xds_port), TARGET, METHOD], stderr=stderr_path, env=env
    )
    async with running(XdsClient(process, stderr_path)) as client:
        yield client


@attrs.define
class ControlPlane:
    cache: SnapshotCache
    recorder: Recorder
    port: int


@asynccontextmanager
async def control_plane(
    initial: Snapshot, *, ordered_ads: bool = True
) -> AsyncIterator[ControlPlane]:
    """xdscore serving ``initial`` to every node, on a free loopback port."""
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, initial)
    recorder = Recorder()
    server = XdsServer(cache, callbacks=recorder, ordered_ads=ordered_ads)
    async with Http2Transport(server) as transport:
        yield ControlPlane(cache, recorder, await transport.start())


async def eventually(check: Callable[[], bool], what: str, recorder: Recorder) -> None:
    try:
        await wait_until(check, timeout=CONVERGE, what=what)
    except TimeoutError:
        raise AssertionError(
            f"timed out waiting for {what}; exchange:\n{recorder.transcript()}"
        ) from None


def assert_never_wildcard(recorder: Recorder) -> None:
    """No ``*``, no empty LDS/CDS list (legacy wildcard), and none seen by the server.

    An empty RDS/EDS list is allowed: it means "nothing" (gRPC sends one for EDS while it
    swaps its only cluster for another), and the server must not read it as wildcard.
    """
    for stream_id, request in recorder.requests:
        assert WILDCARD not in request.resource_names, f"[{stream_id}] {request!r}"
        if request.type_url in (LISTENER, CLUSTER):
            assert request.resource_names, f"[{stream_id}] wildcard request {request!r}"
    for type_url in XDS_TYPES:
        for change in recorder.subscriptions(type_url):
            assert not change.subscription.wildcard, change
            assert not change.subscription.legacy, change


# -- the tests ----------------------------------------------------------------------------


async def test_grpc_client_resolves_through_lds_rds_cds_eds(tmp_path: Path) -> None:
    with grpc_backend("backend-a") as backend_port:
        async with (
            control_plane(snapshot("cluster-a", {"cluster-a": backend_port})) as cp,
            xds_client(cp.port, tmp_path) as client,
        ):
            recorder = cp.recorder
            await client.call_until("backend-a", within=CONVERGE, recorder=recorder)
            await eventually(
                lambda: all(recorder.acked_latest(t) for t in XDS_TYPES),
                "an ACK of every type",
                recorder,
            )
            # Still serving after the ACKs.
            assert await client.call() == "OK backend-a"

    log = recorder.transcript()
    assert not recorder.nacks(), f"the client NACKed:\n{log}"
    assert not recorder.on_nack_calls
    assert not [e for _, e in recorder.closed if e is not None], recorder.closed

    # One ADS stream, opened by the node from the bootstrap.
    assert len(recorder.streams) == 1, log
    (stream,) = recorder.streams
    assert stream.aggregated
    assert stream.protocol == "sotw"
    assert stream.node is not None
    assert stream.node.id == NODE_ID
    assert stream.node.locality is not None
    assert stream.node.locality.zone == "z"
    opening = recorder.requests[0][1]
    assert opening.node is not None
    assert opening.node.id == NODE_ID
    identified = [e for _, e in recorder.events if isinstance(e, NodeIdentified)]
    assert [e.node.id for e in identified] == [NODE_ID]

    # Strict order LDS -> RDS -> CDS -> EDS, each first asked for by name.
    order: list[str] = []
    first_names: dict[str, tuple[str, ...]] = {}
    for _, request in recorder.requests:
        if request.type_url not in first_names:
            order.append(request.type_url)
            first_names[request.type_url] = request.resource_names
    assert order == list(XDS_TYPES), log
    assert first_names == {
        LISTENER: (TARGET,),
        ROUTE: (ROUTE_NAME,),
        CLUSTER: ("cluster-a",),
        ENDPOINT: ("cluster-a",),
    }, log

    # Each type was answered before the next one was asked for (the client only learns a
    # name from the resource that references it).
    def first(kind: type, type_url: str) -> int:
        return next(
            i
            for i, item in enumerate(recorder.timeline)
            if isinstance(item, kind) and item.type_url == type_url
        )

    for earlier, later in itertools.pairwise(XDS_TYPES):
        assert first(SotwResponse, earlier) < first(DiscoveryRequest, later), log

    # Every type ACKed (on_ack too), for exactly the version and nonce the server last sent.
    assert {a.type_url for a in recorder.on_ack_calls} == set(XDS_TYPES), log
    for type_url in XDS_TYPES:
        assert recorder.acked_latest(type_url), f"{SHORT[type_url]} not ACKed:\n{log}"
        latest = recorder.last_response(type_url)
        assert latest is not None
        assert sorted(latest.selection.resources) == sorted(first_names[type_url]), log

    # Never wildcard: every subscription named explicit names.
    assert_never_wildcard(recorder)
    for type_url, names in first_names.items():
        assert recorder.subscriptions(type_url)[0].subscription.names == frozenset(names)


async def test_grpc_client_follows_route_to_new_cluster(tmp_path: Path) -> None:
    with grpc_backend("backend-a") as port_a, grpc_backend("backend-b") as port_b:
        async with (
            control_plane(snapshot("cluster-a", {"cluster-a": port_a})) as cp,
            xds_client(cp.port, tmp_path) as client,
        ):
            cache, recorder = cp.cache, cp.recorder
            await client.call_until("backend-a", within=CONVERGE, recorder=recorder)
            await eventually(
                lambda: all(recorder.acked_latest(t) for t in XDS_TYPES),
                "an ACK of every type",
                recorder,
            )
            before = {t: recorder.last_response(t) for t in XDS_TYPES}

            # The route now sends everything to cluster-b, and cluster-a is gone in the same
            # step. Make-before-break ordering on ADS keeps cluster-a (and its endpoints)
            # until the client has ACKed the route that no longer names it; the client asks
            # for cluster-b by name once the route names it, and switches when it has it.
            # So RPCs made back to back across the move all succeed: a, then b, no error.
            # (With XdsServer(ordered_ads=False) the CDS response without cluster-a lands
            # first and RPCs fail: "CDS resource cluster-a: does not exist".)
            runs = await client.burst(
                3.0,
                lambda: cache.set_snapshot(None, snapshot("cluster-b", {"cluster-b": port_b})),
                after=0.5,
            )
            outcomes = [outcome for outcome, _ in runs]
            assert outcomes == ["OK backend-a", "OK backend-b"], (
                f"RPCs during the move: {runs}\nexchange:\n{recorder.transcript()}"
            )
            for _ in range(5):
                assert await client.call() == "OK backend-b"

            def settled() -> bool:
                cds = recorder.subscriptions(CLUSTER)
                eds = recorder.subscriptions(ENDPOINT)
                return (
                    bool(cds)
                    and cds[-1].subscription.names == frozenset({"cluster-b"})
                    and bool(eds)
                    and eds[-1].subscription.names == frozenset({"cluster-b"})
                    and all(recorder.acked_latest(t) for t in XDS_TYPES)
                )

            await eventually(settled, "CDS/EDS subscribed to cluster-b only, all ACKed", recorder)
            assert await client.call() == "OK backend-b"

    log = recorder.transcript()
    assert not recorder.nacks(), f"the client NACKed:\n{log}"
    assert not recorder.on_nack_calls
    assert len(recorder.streams) == 1, log
    assert recorder.streams[0].node is not None
    assert recorder.streams[0].node.id == NODE_ID

    # The route changed, so RDS was re-sent with a new version and ACKed.
    rds_before, rds_after = before[ROUTE], recorder.last_response(ROUTE)
    assert rds_before is not None
    assert rds_after is not None
    assert rds_after.version_info != rds_before.version_info, log
    assert recorder.acked_latest(ROUTE)
    # The LDS resource did not change, so it was not sent again.
    lds_before = before[LISTENER]
    assert lds_before is not None
    assert recorder.last_response(LISTENER) is lds_before, log

    # The client moved its subscriptions by name (a, then a+b or b, then b), never wildcard.
    cds_names = [c.subscription.names for c in recorder.subscriptions(CLUSTER)]
    assert cds_names[0] == frozenset({"cluster-a"}), log
    assert cds_names[-1] == frozenset({"cluster-b"}), log
    assert_never_wildcard(recorder)


async def test_grpc_client_switches_cluster_without_failing_rpcs(tmp_path: Path) -> None:
    """Make-before-break: the new cluster is added while the old one stays, then it goes."""
    with grpc_backend("backend-a") as port_a, grpc_backend("backend-b") as port_b:
        async with (
            control_plane(snapshot("cluster-a", {"cluster-a": port_a})) as cp,
            xds_client(cp.port, tmp_path) as client,
        ):
            cache, recorder = cp.cache, cp.recorder
            await client.call_until("backend-a", within=CONVERGE, recorder=recorder)
            await eventually(
                lambda: all(recorder.acked_latest(t) for t in XDS_TYPES),
                "an ACK of every type",
                recorder,
            )

            both = {"cluster-a": port_a, "cluster-b": port_b}
            runs = await client.burst(
                3.0, lambda: cache.set_snapshot(None, snapshot("cluster-b", both)), after=0.5
            )
            outcomes = [outcome for outcome, _ in runs]
            assert outcomes == ["OK backend-a", "OK backend-b"], (
                f"RPCs during the switch: {runs}\nexchange:\n{recorder.transcript()}"
            )

            await eventually(
                lambda: (
                    recorder.subscriptions(CLUSTER)[-1].subscription.names
                    == recorder.subscriptions(ENDPOINT)[-1].subscription.names
                    == frozenset({"cluster-b"})
                    and all(recorder.acked_latest(t) for t in XDS_TYPES)
                ),
                "the client to drop cluster-a",
                recorder,
            )
            # Now that nothing references or asks for cluster-a, removing it is a no-op.
            sent = len(recorder.responses)
            runs = await client.burst(
                1.0,
                lambda: cache.set_snapshot(None, snapshot("cluster-b", {"cluster-b": port_b})),
                after=0.2,
            )
            assert [outcome for outcome, _ in runs] == ["OK backend-b"], runs

    log = recorder.transcript()
    assert not recorder.nacks(), f"the client NACKed:\n{log}"
    assert not recorder.on_nack_calls
    assert len(recorder.streams) == 1, log
    assert len(recorder.responses) == sent, f"removing an unused cluster sent something:\n{log}"
    assert_never_wildcard(recorder)
