"""On-demand virtual hosts (VHDS, Delta only) against a real Envoy (1.40).

Envoy's route configuration ``route_0`` has no virtual hosts of its own and takes them from
VHDS over ADS; the ``envoy.filters.http.on_demand`` filter asks for ``route_0/<host>`` when
a request's host matches none. What Envoy does, as these tests see it:

* its first VHDS request names nothing (it subscribes to the namespace ``route_0``) and its
  listener waits for an answer (15 s, the initial fetch timeout, without one);
* a request for a host it lacks is paused while it subscribes to ``route_0/<host>``; it
  resumes when a response carries an entry with that alias: a virtual host (the request is
  routed) or, for a host the server does not know, a body-less entry (404);
* a virtual host added to the cache later is pushed to an Envoy that asked for its alias.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.http.on_demand.v3 import on_demand_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from xdscore import (
    LISTENER,
    ROUTE,
    VIRTUAL_HOST,
    GrpclibTransport,
    Resource,
    Snapshot,
    SnapshotCache,
    XdsServer,
    make_resource,
    same_for_all,
)
from xdscore import builders as b
from xdscore.testing import Envoy, EnvoyError, HttpBackend, envoy_bootstrap, free_port

from ._delta_support import DeltaRecorder
from .test_scopes_envoy import _get as get

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(60)]

LOOPBACK = "127.0.0.1"


def on_demand_listener(port: int) -> Any:
    """``listener_0`` on ``port``: RDS ``route_0`` over ADS, the on-demand filter first."""
    listener = b.http_listener("listener_0", port, "route_0")
    manager = hcm_pb2.HttpConnectionManager()
    chain_filter = listener.filter_chains[0].filters[0]
    chain_filter.typed_config.Unpack(manager)
    del manager.http_filters[:]
    on_demand = manager.http_filters.add(name="envoy.filters.http.on_demand")
    on_demand.typed_config.Pack(on_demand_pb2.OnDemand())
    router = manager.http_filters.add(name="envoy.filters.http.router")
    router.typed_config.Pack(router_pb2.Router())
    chain_filter.typed_config.Pack(manager)
    return listener


def vhds_routes() -> route_pb2.RouteConfiguration:
    """``route_0`` with no virtual host of its own: all of them come from VHDS over ADS."""
    config = route_pb2.RouteConfiguration(name="route_0")
    config.vhds.config_source.CopyFrom(b.ads_source())
    return config


def virtual_host(host: str, cluster: str) -> Resource:
    """VHDS resource ``route_0/<host>`` for the one domain ``host``, aliased as Envoy asks."""
    vhost = route_components_pb2.VirtualHost(name=f"route_0/{host}", domains=[host])
    route = vhost.routes.add()
    route.match.prefix = "/"
    route.route.cluster = cluster
    return make_resource(vhost, aliases=(f"route_0/{host}",))


async def timed_get(port: int, host: str) -> tuple[int, str, float]:
    start = time.monotonic()
    status, body = await get(port, host)
    return status, body, time.monotonic() - start


def vhds_sent(recorder: DeltaRecorder, since: int = 0) -> list[tuple[list[str], list[str]]]:
    """Each VHDS response after ``since``: (names sent, names removed)."""
    return [
        ([r.name for r in response.resources], list(response.removed))
        for response in recorder.responses(VIRTUAL_HOST, since=since)
    ]


@pytest.mark.xfail(
    strict=True,
    reason="Envoy's VHDS watch is by namespace (route_0): an empty response reaches only "
    "wildcard watches, so the listener waits out the 15 s initial fetch timeout until the "
    "first VHDS response carries a virtual host (or a removal) in the namespace route_0; the "
    "server does not yet derive that namespace from the route configurations it sent",
)
async def test_listener_with_on_demand_virtual_hosts_is_ready_within_a_second() -> None:
    await on_demand_virtual_hosts(ready_within=1.0)


async def test_unknown_host_404_and_hosts_fetched_and_added_on_demand() -> None:
    """Everything after the listener is up (today, after Envoy's 15 s initial fetch timeout
    for VHDS: see the xfail above)."""
    await on_demand_virtual_hosts(ready_within=20.0)


async def on_demand_virtual_hosts(*, ready_within: float) -> None:
    recorder = DeltaRecorder()
    with HttpBackend("hello-A") as a, HttpBackend("hello-B") as b_backend:
        listener_port = free_port()
        base = [
            make_resource(b.eds_cluster("a")),
            make_resource(b.load_assignment("a", [(LOOPBACK, a.port)])),
            make_resource(b.eds_cluster("b")),
            make_resource(b.load_assignment("b", [(LOOPBACK, b_backend.port)])),
            make_resource(on_demand_listener(listener_port)),
            make_resource(vhds_routes()),
        ]
        cache = SnapshotCache(group=same_for_all)
        cache.set_snapshot(None, Snapshot([*base, virtual_host("a.example", "a")]))
        transport = GrpclibTransport(XdsServer(cache, callbacks=recorder))
        await transport.start(port=0)
        try:
            assert transport.port is not None
            bootstrap = envoy_bootstrap(xds_port=transport.port, delta=True)
            started = time.monotonic()
            async with Envoy(bootstrap) as envoy:

                async def listener_active() -> bool:
                    stats = await envoy.stats()
                    return stats.get("listener_manager.total_listeners_active") == 1

                try:
                    await envoy.wait_for(listener_active, timeout=ready_within, interval=0.02)
                except EnvoyError as exc:
                    raise AssertionError(f"{exc}\n{recorder.dump()}") from None
                ready = time.monotonic() - started
                log = recorder.dump()

                # Envoy's first VHDS request names nothing, and gets no answer: an empty one
                # would not end its wait (see the xfail for why the listener still waits).
                first = recorder.requests(VIRTUAL_HOST)[0]
                assert list(first.resource_names_subscribe) == [], log
                assert not first.response_nonce, log
                assert vhds_sent(recorder) == [], log
                assert ready < ready_within, f"listener ready after {ready:.2f} s\n{log}"
                assert recorder.nacks() == [], log
                assert recorder.latest_acked(LISTENER), log
                assert recorder.latest_acked(ROUTE), log

                # A host nobody serves: Envoy asks for route_0/nope.example, gets the
                # alias-only entry, and answers 404 at once.
                mark = recorder.mark()
                status, _, took = await timed_get(listener_port, "nope.example")
                log = recorder.dump(mark)
                assert status == 404, log
                assert took < 1.0, f"404 after {took:.2f} s\n{log}"
                asked = recorder.requests(VIRTUAL_HOST, since=mark)
                assert ["route_0/nope.example"] in [
                    list(r.resource_names_subscribe) for r in asked
                ], log
                sent = [
                    r for s in recorder.responses(VIRTUAL_HOST, since=mark) for r in s.resources
                ]
                assert sent == [Resource.unresolved(VIRTUAL_HOST, "route_0/nope.example")], log
                assert recorder.nacks() == [], log

                # A host the cache has: fetched on demand on its first request, then routed.
                mark = recorder.mark()
                status, body, took = await timed_get(listener_port, "a.example")
                assert (status, body) == (200, "hello-A"), recorder.dump(mark)
                assert took < 1.0, f"a.example after {took:.2f} s\n{recorder.dump(mark)}"
                assert vhds_sent(recorder, mark) == [(["route_0/a.example"], [])], recorder.dump(
                    mark
                )

                # A host first unknown (404), then added to the cache: pushed to Envoy, which
                # asked for its alias, and served from then on.
                status, _, took = await timed_get(listener_port, "later.example")
                assert status == 404, recorder.dump(mark)
                assert took < 1.0, f"404 after {took:.2f} s\n{recorder.dump(mark)}"
                mark = recorder.mark()
                cache.set_snapshot(
                    None,
                    Snapshot(
                        [*base, virtual_host("a.example", "a"), virtual_host("later.example", "b")]
                    ),
                )
                added = time.monotonic()

                async def later_served() -> bool:
                    return await get(listener_port, "later.example") == (200, "hello-B")

                await envoy.wait_for(later_served, timeout=10, interval=0.05)
                took = time.monotonic() - added
                log = recorder.dump(mark)
                assert took < 1.0, f"later.example served after {took:.2f} s\n{log}"
                assert vhds_sent(recorder, mark) == [(["route_0/later.example"], [])], log
                assert recorder.latest_acked(VIRTUAL_HOST), log

                # A host added while nobody asked for it reaches Envoy on its first request.
                mark = recorder.mark()
                cache.set_snapshot(
                    None,
                    Snapshot(
                        [
                            *base,
                            virtual_host("a.example", "a"),
                            virtual_host("later.example", "b"),
                            virtual_host("fresh.example", "b"),
                        ]
                    ),
                )
                status, body, took = await timed_get(listener_port, "fresh.example")
                log = recorder.dump(mark)
                assert (status, body) == (200, "hello-B"), log
                assert took < 1.0, f"fresh.example after {took:.2f} s\n{log}"
                assert vhds_sent(recorder, mark) == [(["route_0/fresh.example"], [])], log
                assert recorder.nacks() == [], recorder.dump()
        finally:
            with anyio.CancelScope(shield=True):
                await transport.stop()
