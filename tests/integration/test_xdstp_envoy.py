"""xdstp:// names with context parameters against a real Envoy (1.40), over SotW and Delta.

The snapshot names a route configuration and an EDS cluster with their context parameters
out of order (``?zone=z1&app=web``). Envoy canonicalises each name before it subscribes, so
it asks for ``?app=web&zone=z1``: the server must match the two, and answer with the form
Envoy asked for. The raw names Envoy sent are read off the wire, before the codec
canonicalises them, to check that Envoy does send the canonical form.
"""

from __future__ import annotations

from typing import Any

import pytest
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import (
    ENDPOINT,
    ROUTE,
    Http2Transport,
    Snapshot,
    SnapshotCache,
    XdsServer,
    same_for_all,
)
from xdscore import builders as b
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port

from ._envoy_support import wait_traffic

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(60)]

ROUTE_NAME = "xdstp://test/envoy.config.route.v3.RouteConfiguration/web?zone=z1&app=web"
ROUTE_ASKED = "xdstp://test/envoy.config.route.v3.RouteConfiguration/web?app=web&zone=z1"
CLUSTER_NAME = "xdstp://test/envoy.config.cluster.v3.Cluster/backend?zone=z1&app=web"
CLUSTER_ASKED = "xdstp://test/envoy.config.cluster.v3.Cluster/backend?app=web&zone=z1"


def _snapshot(listener_port: int, backend_port: int) -> Snapshot:
    return Snapshot(
        [
            b.eds_cluster(CLUSTER_NAME),
            b.load_assignment(CLUSTER_NAME, [("127.0.0.1", backend_port)]),
            b.http_listener("listener_0", listener_port, ROUTE_NAME),
            b.route_configuration(ROUTE_NAME, [("/", CLUSTER_NAME)]),
        ]
    )


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
async def test_envoy_gets_resources_named_in_another_parameter_order(
    delta: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: dict[str, set[str]] = {ROUTE: set(), ENDPOINT: set()}
    # Recorded where the codec parses a request (a class attribute: the codec may be
    # compiled, and then its own functions cannot be replaced).
    request_class = discovery_pb2.DeltaDiscoveryRequest if delta else discovery_pb2.DiscoveryRequest
    parse = request_class.FromString

    def recording(data: bytes) -> Any:
        message = parse(data)
        names: Any = message.resource_names_subscribe if delta else message.resource_names
        if message.type_url in asked:
            asked[message.type_url].update(names)
        return message

    monkeypatch.setattr(request_class, "FromString", staticmethod(recording))
    with HttpBackend("hello-xdstp") as backend:
        listener_port = free_port()
        cache = SnapshotCache(group=same_for_all)
        cache.set_snapshot(None, _snapshot(listener_port, backend.port))
        async with Http2Transport(XdsServer(cache)) as transport:
            xds_port = await transport.start()
            async with Envoy(envoy_bootstrap(xds_port=xds_port, delta=delta)) as envoy:
                status, _, _ = await wait_traffic(envoy, listener_port, "hello-xdstp")
                assert status == 200
                # Envoy asked in canonical form, whatever order the resources were named in.
                assert asked == {ROUTE: {ROUTE_ASKED}, ENDPOINT: {CLUSTER_ASKED}}
                stats = await envoy.stats()
                assert stats.get("cluster_manager.cds.update_rejected", 0) == 0
                assert stats.get("listener_manager.lds.update_rejected", 0) == 0
