"""Which resources a resource refers to, read from its protobuf encoding.

One function, `references`, used by the snapshot consistency check, the analysis
and the make-before-break ordering. It understands the references Envoy resolves by name
through xDS:

* Listener: route configurations (HCM ``rds``), scoped route configurations (HCM
  ``scoped_routes`` over SRDS), clusters (``tcp_proxy`` and its weighted clusters, routes
  inlined in an HCM), secrets (SDS in the downstream TLS context), extension configs (HTTP
  filters with ``config_discovery``), for every filter chain, the default one and the
  ``api_listener`` of proxyless gRPC.
* RouteConfiguration: clusters (``cluster``, ``weighted_clusters``, request mirrors).
  ``cluster_header`` and ``cluster_specifier_plugin`` are resolved per request and cannot
  be checked statically: `unresolvable` lists them instead.
* ScopedRouteConfiguration: its route configuration.
* Cluster: its endpoints (EDS ``service_name``, defaulting to the cluster's name) and
  secrets (SDS in the upstream TLS context, transport socket matches included).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import attrs
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2, scoped_route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message

from ._names import canonical_name
from ._typeurls import CLUSTER, ENDPOINT, EXTENSION_CONFIG, LISTENER, ROUTE, SCOPED_ROUTE, SECRET

__all__ = [
    "Reference",
    "has_references",
    "references",
    "trim_route_configuration",
    "unresolvable",
]

_M = TypeVar("_M", bound=Message)
_EDS = cluster_pb2.Cluster.DiscoveryType.Value("EDS")


@attrs.frozen(order=True)
class Reference:
    """A reference to the resource ``name`` of type ``type_url``; ``field`` says from where.

    ``name`` is in canonical form, as resource names are
    ([`canonical_name`][xdscore.wire.canonical_name]).
    """

    type_url: str
    name: str = attrs.field(converter=canonical_name)
    field: str = attrs.field(eq=False, order=False)


def references(type_url: str, body: bytes) -> tuple[Reference, ...]:
    """The resources that the resource encoded in ``body`` refers to, in a stable order."""
    extractor = _EXTRACTORS.get(type_url)
    if extractor is None:
        return ()
    try:
        found = set(extractor(body))
    except DecodeError:
        return ()
    return tuple(sorted(found))


def vhds_namespace(type_url: str, body: bytes) -> str | None:
    """For a route configuration that takes virtual hosts from VHDS, the namespace collection
    its client's VHDS watch matches (``<name>/*``: Envoy watches the route configuration's name
    as a namespace); ``None`` for anything else."""
    if type_url != ROUTE:
        return None
    try:
        config = route_pb2.RouteConfiguration.FromString(body)
    except DecodeError:
        return None
    return f"{config.name}/*" if config.HasField("vhds") and config.name else None


def has_references(type_url: str) -> bool:
    """Whether resources of ``type_url`` can refer to others at all."""
    return type_url in _EXTRACTORS


def unresolvable(type_url: str, body: bytes) -> tuple[str, ...]:
    """Fields of a route configuration whose cluster is chosen per request."""
    if type_url != ROUTE:
        return ()
    try:
        config = route_pb2.RouteConfiguration.FromString(body)
    except DecodeError:
        return ()
    return tuple(sorted(set(_dynamic_clusters(config))))


def _unpack(message: any_pb2.Any, cls: type[_M]) -> _M | None:
    if message.type_url != "type.googleapis.com/" + cls.DESCRIPTOR.full_name:
        return None
    try:
        parsed: _M = cls.FromString(message.value)
    except DecodeError:
        return None
    return parsed


def _listener(body: bytes) -> Iterator[Reference]:
    listener = listener_pb2.Listener.FromString(body)
    chains = list(listener.filter_chains)
    if listener.HasField("default_filter_chain"):
        chains.append(listener.default_filter_chain)
    for index, chain in enumerate(chains):
        where = f"filter_chains[{index}]"
        for filter_ in chain.filters:
            yield from _network_filter(filter_.typed_config, f"{where}.filters[{filter_.name}]")
        if chain.HasField("transport_socket"):
            tls = _unpack(chain.transport_socket.typed_config, tls_pb2.DownstreamTlsContext)
            if tls is not None:
                yield from _tls_secrets(tls.common_tls_context, f"{where}.transport_socket")
    if listener.HasField("api_listener"):
        yield from _network_filter(listener.api_listener.api_listener, "api_listener")


def _network_filter(config: any_pb2.Any, where: str) -> Iterator[Reference]:
    hcm = _unpack(config, hcm_pb2.HttpConnectionManager)
    if hcm is not None:
        yield from _http_connection_manager(hcm, where)
        return
    tcp = _unpack(config, tcp_proxy_pb2.TcpProxy)
    if tcp is not None:
        if tcp.cluster:
            yield Reference(CLUSTER, tcp.cluster, f"{where}.tcp_proxy.cluster")
        for weighted in tcp.weighted_clusters.clusters:
            yield Reference(CLUSTER, weighted.name, f"{where}.tcp_proxy.weighted_clusters")


def _http_connection_manager(hcm: hcm_pb2.HttpConnectionManager, where: str) -> Iterator[Reference]:
    if hcm.HasField("rds") and hcm.rds.route_config_name:
        yield Reference(ROUTE, hcm.rds.route_config_name, f"{where}.rds")
    if hcm.HasField("route_config"):
        yield from _route_clusters(hcm.route_config, f"{where}.route_config")
    if hcm.HasField("scoped_routes"):
        scoped = hcm.scoped_routes
        if scoped.HasField("scoped_route_configurations_list"):
            for config in scoped.scoped_route_configurations_list.scoped_route_configurations:
                if config.route_configuration_name:
                    yield Reference(
                        ROUTE, config.route_configuration_name, f"{where}.scoped_routes"
                    )
        elif scoped.HasField("scoped_rds") and scoped.scoped_rds.srds_resources_locator:
            yield Reference(
                SCOPED_ROUTE, scoped.scoped_rds.srds_resources_locator, f"{where}.scoped_rds"
            )
    for http_filter in hcm.http_filters:
        if http_filter.HasField("config_discovery"):
            yield Reference(
                EXTENSION_CONFIG, http_filter.name, f"{where}.http_filters[{http_filter.name}]"
            )


def _route_config(body: bytes) -> Iterator[Reference]:
    yield from _route_clusters(route_pb2.RouteConfiguration.FromString(body), "")


def _route_clusters(config: route_pb2.RouteConfiguration, where: str) -> Iterator[Reference]:
    prefix = f"{where}." if where else ""
    for host in config.virtual_hosts:
        for index, route in enumerate(host.routes):
            if not route.HasField("route"):
                continue
            field = f"{prefix}virtual_hosts[{host.name}].routes[{index}]"
            yield from _route_action(route.route, field)


def _route_action(action: route_components_pb2.RouteAction, field: str) -> Iterator[Reference]:
    if action.cluster:
        yield Reference(CLUSTER, action.cluster, f"{field}.cluster")
    for weighted in action.weighted_clusters.clusters:
        if weighted.name:
            yield Reference(CLUSTER, weighted.name, f"{field}.weighted_clusters")
    for mirror in action.request_mirror_policies:
        if mirror.cluster:
            yield Reference(CLUSTER, mirror.cluster, f"{field}.request_mirror_policies")


def _dynamic_clusters(config: route_pb2.RouteConfiguration) -> Iterator[str]:
    for host in config.virtual_hosts:
        for index, route in enumerate(host.routes):
            field = f"virtual_hosts[{host.name}].routes[{index}]"
            if route.route.cluster_header:
                yield f"{field}.cluster_header"
            if route.route.HasField("cluster_specifier_plugin") or route.route.HasField(
                "inline_cluster_specifier_plugin"
            ):
                yield f"{field}.cluster_specifier_plugin"
            if route.route.weighted_clusters.clusters and any(
                w.cluster_header for w in route.route.weighted_clusters.clusters
            ):
                yield f"{field}.weighted_clusters.cluster_header"


def _scoped_route(body: bytes) -> Iterator[Reference]:
    scoped = scoped_route_pb2.ScopedRouteConfiguration.FromString(body)
    if scoped.route_configuration_name:
        yield Reference(ROUTE, scoped.route_configuration_name, "route_configuration_name")


def _cluster(body: bytes) -> Iterator[Reference]:
    cluster = cluster_pb2.Cluster.FromString(body)
    if cluster.WhichOneof("cluster_discovery_type") == "type" and cluster.type == _EDS:
        service = cluster.eds_cluster_config.service_name or cluster.name
        yield Reference(ENDPOINT, service, "eds_cluster_config.service_name")
    sockets = (
        [("transport_socket", cluster.transport_socket)]
        if cluster.HasField("transport_socket")
        else []
    )
    sockets += [
        (f"transport_socket_matches[{match.name}]", match.transport_socket)
        for match in cluster.transport_socket_matches
    ]
    for where, socket in sockets:
        tls = _unpack(socket.typed_config, tls_pb2.UpstreamTlsContext)
        if tls is not None:
            yield from _tls_secrets(tls.common_tls_context, where)


def _tls_secrets(context: tls_pb2.CommonTlsContext, where: str) -> Iterator[Reference]:
    for config in context.tls_certificate_sds_secret_configs:
        if config.name:
            yield Reference(SECRET, config.name, f"{where}.tls_certificate_sds_secret_configs")
    if context.HasField("validation_context_sds_secret_config"):
        name = context.validation_context_sds_secret_config.name
        if name:
            yield Reference(SECRET, name, f"{where}.validation_context_sds_secret_config")
    if context.HasField("combined_validation_context"):
        name = context.combined_validation_context.validation_context_sds_secret_config.name
        if name:
            yield Reference(SECRET, name, f"{where}.combined_validation_context")


_EXTRACTORS = {
    LISTENER: _listener,
    ROUTE: _route_config,
    SCOPED_ROUTE: _scoped_route,
    CLUSTER: _cluster,
}


def trim_route_configuration(body: bytes, keep: Callable[[frozenset[str]], bool]) -> bytes:
    """``body`` without the virtual hosts for whose clusters ``keep`` is false, encoded
    deterministically; ``body`` itself when every host is kept or it does not decode."""
    try:
        config = route_pb2.RouteConfiguration.FromString(body)
    except DecodeError:
        return body
    kept = [host for host in config.virtual_hosts if keep(_host_clusters(host))]
    if len(kept) == len(config.virtual_hosts):
        return body
    del config.virtual_hosts[:]
    config.virtual_hosts.extend(kept)
    encoded: bytes = config.SerializeToString(deterministic=True)
    return encoded


def _host_clusters(host: route_components_pb2.VirtualHost) -> frozenset[str]:
    found: set[str] = set()
    for route in host.routes:
        if route.HasField("route"):
            found.update(ref.name for ref in _route_action(route.route, ""))
    return frozenset(found)
