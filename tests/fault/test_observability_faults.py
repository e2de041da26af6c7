"""Observability under misbehaviour, on a real server over loopback.

Status, CSDS and the admin endpoint must tell the truth about a client that stopped
reading, refuse bad questions with the documented status, and never disturb the xDS side:
in every test a well-behaved client keeps receiving what is pushed during the fault.
"""

from __future__ import annotations

import http.client
import json
from functools import partial

import anyio
import anyio.to_thread
import grpc
import pytest
from envoy.service.status.v3 import csds_pb2
from envoy.type.matcher.v3 import node_pb2, regex_pb2, string_pb2, struct_pb2, value_pb2

from xdscore import (
    CLUSTER,
    ENDPOINT,
    Http2Transport,
    SnapshotCache,
    StreamLimits,
    XdsServer,
)
from xdscore.server._status import SyncState, TypeStatus
from xdscore.testing import http_get
from xdscore.transport import AdminApp, serve_admin
from xdscore.wire import Node

from ._clients import (
    ADS,
    UNLIMITED,
    Failure,
    HealthyClient,
    Plane,
    Recorder,
    channel,
    control_plane,
    eventually,
    healthy_client,
    load_assignments,
    marker_assignment,
    request,
)
from .test_bad_clients import _grpc_settled, _no_errors_logged  # noqa: F401  (autouse)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CSDS = "/envoy.service.status.v3.ClientStatusDiscoveryService"
FETCH = f"{CSDS}/FetchClientStatus"
STREAM = f"{CSDS}/StreamClientStatus"


def type_status(plane: Plane, node_id: str, type_url: str) -> TypeStatus | None:
    for stream in plane.server.status():
        if stream.node_id == node_id:
            for status in stream.types:
                if status.type_url == type_url:
                    return status
    return None


def acked(plane: Plane, node_id: str, type_url: str, version: str) -> bool:
    status = type_status(plane, node_id, type_url)
    return status is not None and status.acked_version == version


def pushes_in_flight(plane: Plane) -> float | None:
    assert plane.server.metrics is not None
    return plane.server.metrics.registry.get_sample_value("xdscore_pushes_in_flight")


async def still_pushed(healthy: HealthyClient) -> None:
    """Publish a new generation; the healthy client receives it (a generous deadline: the
    point is that it arrives at all, on a machine that may be busy)."""
    await healthy.reached(healthy.plane.publish(), timeout=10)


def current_version(plane: Plane, type_url: str) -> str:
    snapshot = plane.cache.snapshot(None)
    assert snapshot is not None
    return snapshot.version(type_url)


# -- a client that stops reading -----------------------------------------------------------


async def test_a_client_that_stops_reading_stays_stale_while_others_sync() -> None:
    async with control_plane() as plane:
        # About 6 MB per EDS response: far more than the stuck client's HTTP/2 window.
        assignments = load_assignments(2000, 100)
        plane.extra = lambda generation: [*assignments, marker_assignment(generation, "marker")]
        plane.publish()
        names = [resource.name for resource in assignments] + ["marker"]
        first_eds = current_version(plane, ENDPOINT)
        async with (
            healthy_client(plane) as healthy,
            channel(plane.target, options=UNLIMITED) as chan,
            healthy_client(plane, "neighbour", connection=chan) as neighbour,
        ):
            stuck = chan.open(ADS)
            await stuck.send(request(ENDPOINT, names, node_id="stuck"))
            await eventually(lambda: plane.active() == 3)
            # Its response is being written (the type is STALE from then on, not NOT SENT).
            await eventually(
                lambda: (
                    (t := type_status(plane, "stuck", ENDPOINT)) is not None
                    and t.sync is SyncState.STALE
                )
            )

            for _ in range(3):
                generation = plane.publish()
                await healthy.reached(generation, timeout=10)
                await neighbour.reached(generation, timeout=10)
                cds = current_version(plane, CLUSTER)
                for node_id in ("healthy", "neighbour"):
                    await eventually(partial(acked, plane, node_id, CLUSTER, cds))
                    synced = type_status(plane, node_id, CLUSTER)
                    assert synced is not None
                    assert synced.sync is SyncState.SYNCED, synced
                    assert synced.cache_version == synced.sent_version == cds
                    assert synced.nack is None

                stale = type_status(plane, "stuck", ENDPOINT)
                assert stale is not None
                assert stale.sync is SyncState.STALE, stale
                assert stale.cache_version == current_version(plane, ENDPOINT) != first_eds
                assert stale.acked_version == ""
                # Its one response is still being written (or, at most, written and unread).
                assert stale.sent_version in ("", first_eds)
                assert (stale.acks, stale.nacks) == (0, 0)
            (stuck_stream,) = [s for s in plane.server.status() if s.node_id == "stuck"]
            assert not stuck_stream.synced
            stuck_id = plane.recorder.stream_of("stuck")
            written = plane.recorder.responses[stuck_id]
            assert written <= 1
            # The stuck write, unless it finished, is the one push in flight: the healthy
            # clients' are all done.
            await eventually(lambda: pushes_in_flight(plane) == 1 - written)
            stuck.cancel()
            await eventually(lambda: plane.active() == 2)
            assert pushes_in_flight(plane) == 0


# -- CSDS: bad questions -------------------------------------------------------------------


async def fetch(chan: grpc.aio.Channel, payload: bytes) -> bytes | Failure:
    """One FetchClientStatus call with raw bytes: the answer's bytes, or how it failed."""
    call = chan.unary_unary(FETCH)
    try:
        answer = await call(payload, timeout=5)
    except grpc.aio.AioRpcError as exc:
        return Failure(exc.code(), exc.details() or "")
    assert isinstance(answer, bytes)
    return answer


def by_id(*matchers: node_pb2.NodeMatcher) -> bytes:
    data: bytes = csds_pb2.ClientStatusRequest(node_matchers=list(matchers)).SerializeToString()
    return data


def exact(node_id: str) -> node_pb2.NodeMatcher:
    return node_pb2.NodeMatcher(node_id=string_pb2.StringMatcher(exact=node_id))


async def test_csds_refuses_bad_questions_and_answers_good_ones() -> None:
    limit = 4096
    async with (
        control_plane(limits=StreamLimits(max_request_bytes=limit)) as plane,
        healthy_client(plane) as healthy,
        channel(plane.target) as chan,
    ):
        target = chan.channel

        async def refused(payload: bytes, code: grpc.StatusCode, *fragments: str) -> None:
            failure = await fetch(target, payload)
            assert isinstance(failure, Failure), failure
            assert failure.code == code, failure
            for fragment in fragments:
                assert fragment in failure.details, failure
            await still_pushed(healthy)

        await refused(b"\x0a\x05ab", grpc.StatusCode.INVALID_ARGUMENT, "ClientStatusRequest")
        regex = node_pb2.NodeMatcher(
            node_id=string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex="heal.*"))
        )
        await refused(
            by_id(regex), grpc.StatusCode.INVALID_ARGUMENT, "node_matchers[0]", "safe_regex"
        )
        metadata = exact("healthy")
        metadata.node_metadatas.append(
            struct_pb2.StructMatcher(
                path=[struct_pb2.StructMatcher.PathSegment(key="zone")],
                value=value_pb2.ValueMatcher(present_match=True),
            )
        )
        await refused(
            by_id(exact("healthy"), metadata),
            grpc.StatusCode.INVALID_ARGUMENT,
            "node_matchers[1]",
            "node_metadatas",
        )
        await refused(
            by_id(node_pb2.NodeMatcher()), grpc.StatusCode.INVALID_ARGUMENT, "node_matchers[0]"
        )
        await refused(
            by_id(exact("x" * limit)),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"exceeds the limit of {limit}",
        )

        # An unknown node: no error, no configs.
        answer = await fetch(target, by_id(exact("nobody")))
        assert isinstance(answer, bytes), answer
        assert list(csds_pb2.ClientStatusResponse.FromString(answer).config) == []

        # The positive control: the healthy client, SYNCED at the current generation.
        await eventually(partial(acked, plane, "healthy", CLUSTER, current_version(plane, CLUSTER)))
        answer = await fetch(target, by_id(exact("healthy")))
        assert isinstance(answer, bytes), answer
        (config,) = csds_pb2.ClientStatusResponse.FromString(answer).config
        assert config.node.id == "healthy"
        (cluster,) = config.generic_xds_configs
        assert cluster.type_url == CLUSTER
        assert cluster.version_info == current_version(plane, CLUSTER)
        assert csds_pb2.ConfigStatus.Name(cluster.config_status) == "SYNCED"

        # The streaming service refuses garbage the same way.
        stream = chan.open(STREAM)
        await stream.send(by_id(exact("healthy")))
        item = await stream.next(timeout=5)
        assert isinstance(item, bytes), item
        assert len(csds_pb2.ClientStatusResponse.FromString(item).config) == 1
        await stream.send(b"\x0a\x05ab")
        failure = await stream.failure()
        assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure
        assert "ClientStatusRequest" in failure.details
        await still_pushed(healthy)
        assert plane.active() == 1


# -- the admin endpoint: bad requests ------------------------------------------------------

FLEET = {"healthy"}


def fleet(node: Node) -> str | None:
    """The fleet shares the snapshot of key ``None``; other nodes have none."""
    return None if node.id in FLEET else node.id


def send_raw(port: int, method: str, path: str, headers: dict[str, str] | None = None) -> int:
    """One request with ``http.client`` (blocking); the response status."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request(method, path, headers=headers or {})
        return connection.getresponse().status
    finally:
        connection.close()


async def status_of(port: int, method: str, path: str, **headers: str) -> int:
    return await anyio.to_thread.run_sync(send_raw, port, method, path, headers)


async def test_admin_refuses_bad_requests_and_probes_tell_the_truth() -> None:
    cache = SnapshotCache(group=fleet)
    recorder = Recorder()
    server = XdsServer(cache, callbacks=recorder)
    transport = Http2Transport(server)
    async with serve_admin(AdminApp(server)) as admin:

        async def get(path: str) -> tuple[int, str]:
            status, _, body = await http_get("127.0.0.1", admin, path)
            return status, body

        async def ready() -> int:
            status, body = await get("/readyz")
            assert (status == 503) == ("not ready" in body), (status, body)
            return status

        plane = Plane(cache=cache, server=server, transport=transport, recorder=recorder, port=0)
        assert (await get("/healthz"))[0] == 200
        assert await ready() == 503  # nothing listens, nothing to serve
        plane.publish(0)
        assert await ready() == 503  # something to serve, but nothing listens
        try:
            plane.port = await transport.start()
            assert await ready() == 200
            cache.clear_snapshot(None)
            assert await ready() == 503  # listening, but nothing to serve
            plane.publish()
            assert await ready() == 200

            async with healthy_client(plane) as healthy:
                cases = [
                    ("GET", "/nowhere", 404),
                    ("POST", "/status", 405),
                    ("PUT", "/metrics", 405),
                    ("GET", "/config_dump", 400),
                    ("GET", "/config_dump?node", 400),
                    ("GET", "/config_dump?node=a&node=b", 400),
                    ("GET", "/config_dump?node=stranger", 404),
                    ("GET", "/status?node=" + "x" * 3000, 414),
                ]
                for method, path, expected in cases:
                    got = await status_of(admin, method, path)
                    assert got == expected, (method, path[:40], got)
                    assert (await get("/healthz"))[0] == 200
                    await still_pushed(healthy)

                # Far past any sane size: refused by the app (414, 431), or by uvicorn itself
                # (400) when the request reached it in pieces; either way it keeps serving.
                got = await status_of(admin, "GET", "/" + "p" * 100_000)
                assert got in (400, 414), got
                got = await status_of(admin, "GET", "/healthz", **{"x-big": "h" * 100_000})
                assert got in (400, 431), got
                got = await status_of(admin, "GET", "/healthz", **{"x-big": "h" * 1_000_000})
                assert got in (400, 431), got
                assert (await get("/healthz"))[0] == 200
                await still_pushed(healthy)

                # And the good requests still answer truthfully.
                cds_version = current_version(plane, CLUSTER)
                await eventually(partial(acked, plane, "healthy", CLUSTER, cds_version))
                status, body = await get("/status")
                assert status == 200, body
                (proxy,) = json.loads(body)["proxies"]
                assert proxy["node"] == "healthy"
                (cds,) = proxy["types"]
                assert cds["sync"] == SyncState.SYNCED.value
                assert cds["acked"]["version"] == cds["cache_version"] == cds_version
                status, body = await get("/config_dump?node=healthy")
                assert status == 200, body
                (dumped,) = json.loads(body)["types"]
                assert dumped["type_url"] == CLUSTER
                snapshot = cache.snapshot(None)
                assert snapshot is not None
                clusters = snapshot.resources(CLUSTER) or {}
                assert [(r["name"], r["version"]) for r in dumped["resources"]] == [
                    (name, resource.version) for name, resource in clusters.items()
                ]
                assert await ready() == 200
        finally:
            await transport.stop()
        assert await ready() == 503  # the transport stopped listening
        assert (await get("/healthz"))[0] == 200
