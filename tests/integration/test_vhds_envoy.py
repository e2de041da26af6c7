"""On-demand virtual hosts (VHDS, Delta only) against a real Envoy (1.40).

Envoy's route configuration ``route_0`` has no virtual hosts of its own and takes them from
VHDS over ADS; the ``envoy.filters.http.on_demand`` filter asks for ``route_0/<host>`` when
a request's host matches none. What Envoy does, as these tests see it:

* its first VHDS request names nothing: it watches the namespace ``route_0`` (every virtual
  host named ``route_0/...``), and its listener waits (15 s, the initial fetch timeout) until
  an answer reaches that watch. The server answers with the virtual hosts of the namespaces
  of the route configurations with VHDS it sent on the stream, or, for an empty namespace,
  with ``route_0/*`` in ``removed_resources``; an empty response would reach no watch;
* a request for a host it lacks is paused while it subscribes to ``route_0/<host>``; it
  resumes when a response carries an entry with that alias: a virtual host (the request is
  routed) or, for a host the server does not know, a body-less entry (404);
* virtual hosts added to or removed from the namespace later are pushed to Envoy;
* after a reconnect its first VHDS request subscribes to ``*`` and the aliases it asked for,
  listing what it holds.
"""

from __future__ import annotations

import contextlib
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
    Http2Transport,
    Resource,
    Snapshot,
    SnapshotCache,
    XdsServer,
    make_resource,
    same_for_all,
)
from xdscore import builders as b
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port

from ..factories import wait_until
from ._delta_support import DeltaRecorder, stats_reached
from .test_envoy_delta import serving
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


def virtual_host(host: str, cluster: str, route: str = "route_0") -> Resource:
    """VHDS resource ``<route>/<host>`` for the one domain ``host``, aliased as Envoy asks."""
    vhost = route_components_pb2.VirtualHost(name=f"{route}/{host}", domains=[host])
    action = vhost.routes.add()
    action.match.prefix = "/"
    action.route.cluster = cluster
    return make_resource(vhost, aliases=(f"{route}/{host}",))


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


@pytest.mark.parametrize("first_hosts", [("a.example",), ()], ids=["one_host", "no_host"])
async def test_listener_with_on_demand_virtual_hosts_is_ready_within_a_second(
    first_hosts: tuple[str, ...],
) -> None:
    """The listener is up in under a second, whether or not ``route_0``'s namespace has
    virtual hosts; then unknown hosts get a 404 at once and hosts added later are served."""
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
            virtual_host("other.example", "a", route="route_1"),
        ]
        hosts = [virtual_host(host, "a") for host in first_hosts]
        cache = SnapshotCache(group=same_for_all)
        cache.set_snapshot(None, Snapshot([*base, *hosts], types=[VIRTUAL_HOST]))
        transport = Http2Transport(XdsServer(cache, callbacks=recorder))
        await transport.start(port=0)
        try:
            assert transport.port is not None
            bootstrap = envoy_bootstrap(xds_port=transport.port, delta=True)
            started = time.monotonic()
            async with Envoy(bootstrap) as envoy:
                ready = await stats_reached(
                    envoy, recorder, {"listener_manager.total_listeners_active": 1}, since=started
                )
                log = recorder.dump()

                # Envoy's first VHDS request names nothing (it watches the namespace route_0);
                # the answer carries the namespace's virtual hosts, or, with none, the
                # namespace's own name removed: either reaches the watch and ends its wait.
                first = recorder.requests(VIRTUAL_HOST)[0]
                assert list(first.resource_names_subscribe) == [], log
                assert not first.response_nonce, log
                expected = [([h.name for h in hosts], [])] if hosts else [([], ["route_0/*"])]
                assert vhds_sent(recorder) == expected, log
                assert ready < 1.0, f"listener ready after {ready:.2f} s\n{log}"
                assert recorder.nacks() == [], log
                assert recorder.latest_acked(LISTENER), log
                assert recorder.latest_acked(ROUTE), log
                assert recorder.latest_acked(VIRTUAL_HOST), log

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

                # A host of another route configuration's namespace is not Envoy's.
                mark = recorder.mark()
                status, _, took = await timed_get(listener_port, "other.example")
                assert status == 404, recorder.dump(mark)
                assert "route_1/other.example" not in [
                    r.name for s in recorder.responses(VIRTUAL_HOST) for r in s.resources
                ], recorder.dump(mark)

                # a.example: sent in the first answer (routed with no VHDS traffic), or added
                # to the namespace now (pushed, then routed).
                mark = recorder.mark()
                if not hosts:
                    hosts = [virtual_host("a.example", "a")]
                    cache.set_snapshot(None, Snapshot([*base, *hosts]))
                    # Asked for before Envoy applied the push, the host would be subscribed
                    # to by name, and rightly sent again: the request waits for the ACK.
                    await wait_until(
                        lambda: recorder.latest_acked(VIRTUAL_HOST, since=mark),
                        what="the pushed host ACKed",
                    )
                await serves(envoy, listener_port, "a.example", "hello-A")
                pushed = [] if first_hosts else [(["route_0/a.example"], [])]
                assert vhds_sent(recorder, mark) == pushed, recorder.dump(mark)

                # A host first unknown (404), then added to the cache: pushed to Envoy (in
                # its namespace, and asked for by alias) and served from then on.
                status, _, took = await timed_get(listener_port, "later.example")
                assert status == 404, recorder.dump(mark)
                assert took < 1.0, f"404 after {took:.2f} s\n{recorder.dump(mark)}"
                mark = recorder.mark()
                hosts.append(virtual_host("later.example", "b"))
                cache.set_snapshot(None, Snapshot([*base, *hosts]))
                took = await serves(envoy, listener_port, "later.example", "hello-B")
                log = recorder.dump(mark)
                assert took < 1.0, f"later.example served after {took:.2f} s\n{log}"
                assert vhds_sent(recorder, mark) == [(["route_0/later.example"], [])], log
                assert recorder.latest_acked(VIRTUAL_HOST), log

                # A host removed from the namespace is removed from Envoy: 404 again.
                mark = recorder.mark()
                hosts.pop()
                cache.set_snapshot(None, Snapshot([*base, *hosts]))

                async def later_gone() -> bool:
                    return (await get(listener_port, "later.example"))[0] == 404

                await envoy.wait_for(later_gone, timeout=5, interval=0.05)
                log = recorder.dump(mark)
                assert vhds_sent(recorder, mark) == [([], ["route_0/later.example"])], log
                assert recorder.nacks() == [], recorder.dump()
        finally:
            with anyio.CancelScope(shield=True):
                await transport.stop()


async def serves(envoy: Envoy, port: int, host: str, body: str) -> float:
    """Seconds until GET through Envoy with ``host`` answers 200 with ``body``."""
    start = time.monotonic()

    async def served() -> bool:
        return await get(port, host) == (200, body)

    await envoy.wait_for(served, timeout=10, interval=0.05)
    return time.monotonic() - start


async def test_virtual_hosts_survive_a_control_plane_restart() -> None:
    """After a reconnect Envoy's first VHDS request lists the hosts it holds and subscribes to
    the alias it asked for on demand and to ``*``: its namespace watch, in wildcard form (the
    first stream's first request named nothing). The new stream removes and resends none of
    the hosts Envoy holds; the wildcard makes it send the host of another namespace, which
    Envoy's namespace watch then ignores."""
    before, after = DeltaRecorder(), DeltaRecorder()
    with HttpBackend("hello-A") as a:
        listener_port, xds_port = free_port(), free_port()
        hosts = [virtual_host("a.example", "a")]
        snapshot = Snapshot(
            [
                make_resource(b.eds_cluster("a")),
                make_resource(b.load_assignment("a", [(LOOPBACK, a.port)])),
                make_resource(on_demand_listener(listener_port)),
                make_resource(vhds_routes()),
                virtual_host("other.example", "a", route="route_1"),
                *hosts,
            ]
        )
        cache = SnapshotCache(group=same_for_all)
        cache.set_snapshot(None, snapshot)
        plane = contextlib.AsyncExitStack()
        await plane.enter_async_context(serving(cache, before, xds_port))
        async with plane, Envoy(envoy_bootstrap(xds_port=xds_port, delta=True)) as envoy:
            await stats_reached(
                envoy,
                before,
                {"listener_manager.total_listeners_active": 1},
                since=time.monotonic(),
            )
            assert (await timed_get(listener_port, "nope.example"))[0] == 404
            await serves(envoy, listener_port, "a.example", "hello-A")
            await plane.aclose()  # the first control plane goes away
            async with serving(cache, after, xds_port):

                def reconnected() -> bool:
                    return bool(after.requests(VIRTUAL_HOST))

                await envoy.wait_for(reconnected, timeout=30, interval=0.05)
                await anyio.sleep(0.5)  # let anything due on the new stream go out
                log = after.dump()
                first = after.requests(VIRTUAL_HOST)[0]
                assert sorted(first.initial_resource_versions) == [
                    "route_0/a.example",
                    "route_0/nope.example",
                ], log
                assert sorted(first.resource_names_subscribe) == ["*", "route_0/nope.example"], log
                assert vhds_sent(after) == [(["route_1/other.example"], [])], log
                assert (await timed_get(listener_port, "other.example"))[0] == 404
                assert (await timed_get(listener_port, "a.example"))[:2] == (200, "hello-A")
                assert after.nacks() == [], log
