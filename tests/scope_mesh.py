"""A small namespaced mesh for the scope tests: clusters ``ns/svc``, their endpoints, one
route configuration with a virtual host per service, a listener, and TLS secrets."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from envoy.config.route.v3 import route_components_pb2, route_pb2

from xdscore import Resource, Snapshot, builders, make_resource
from xdscore.wire import all_types

from .factories import secret, tls_cluster

__all__ = ["mesh_resources", "mesh_snapshot", "route_with_hosts"]


def route_with_hosts(name: str, hosts: Iterable[tuple[str, Sequence[str]]]) -> Resource:
    """A route configuration with one virtual host per ``(host, clusters)``: a route per
    cluster, the first by prefix ``/``, the others by ``/<cluster>``."""
    config = route_pb2.RouteConfiguration(name=name)
    for host, clusters in hosts:
        vhost = route_components_pb2.VirtualHost(name=host, domains=[host])
        for index, cluster in enumerate(clusters):
            route = vhost.routes.add()
            route.match.prefix = "/" if index == 0 else f"/{cluster}"
            route.route.cluster = cluster
        config.virtual_hosts.append(vhost)
    return make_resource(config)


def mesh_resources(
    namespaces: Sequence[str], services: int = 2, *, tls: Sequence[str] = (), port: int = 10000
) -> list[Resource]:
    """Clusters ``ns/svc-i`` (TLS ones, in namespaces ``tls``, name secret ``ns-cert``), their
    endpoints, the route configuration ``mesh`` and the listener ``ingress``."""
    out: list[Resource] = []
    hosts: list[tuple[str, Sequence[str]]] = []
    for ns in namespaces:
        if ns in tls:
            out.append(make_resource(secret(f"{ns}-cert")))
        for index in range(services):
            name = f"{ns}/svc-{index}"
            if ns in tls:
                out.append(make_resource(tls_cluster(name, certificates=[f"{ns}-cert"])))
            else:
                out.append(make_resource(builders.eds_cluster(name)))
            out.append(make_resource(builders.load_assignment(name, [("127.0.0.1", 8000)])))
            hosts.append((f"svc-{index}.{ns}", [name]))
    out.append(route_with_hosts("mesh", hosts))
    out.append(make_resource(builders.http_listener("ingress", port, "mesh")))
    return out


def mesh_snapshot(
    namespaces: Sequence[str], services: int = 2, *, tls: Sequence[str] = ()
) -> Snapshot:
    """:func:`mesh_resources` as a snapshot declaring every registered type."""
    return Snapshot(
        mesh_resources(namespaces, services, tls=tls),
        types=[info.type_url for info in all_types()],
    )
