"""Builders for the Envoy resources most control planes start with, as protobuf messages.

They are shortcuts, not a second API: each returns an ``xds-protos`` message that can be
changed further before it goes into a [`Snapshot`][xdscore.Snapshot].
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2, base_pb2, config_source_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import api_listener_pb2, listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from google.protobuf import any_pb2, duration_pb2

__all__ = [
    "ads_source",
    "api_listener",
    "eds_cluster",
    "grpc_source",
    "http_listener",
    "load_assignment",
    "route_configuration",
]

Endpoint = tuple[str, int]


def ads_source() -> config_source_pb2.ConfigSource:
    """Fetch over the aggregated stream (ADS) the client bootstrapped with."""
    return config_source_pb2.ConfigSource(
        ads=config_source_pb2.AggregatedConfigSource(),
        resource_api_version=config_source_pb2.ApiVersion.V3,
    )


def grpc_source(
    cluster: str = "xds_cluster", *, delta: bool = False
) -> config_source_pb2.ConfigSource:
    """Fetch over the type's own discovery service on the bootstrap cluster ``cluster``."""
    source = config_source_pb2.ConfigSource(resource_api_version=config_source_pb2.ApiVersion.V3)
    api = source.api_config_source
    api.api_type = api.ApiType.DELTA_GRPC if delta else api.ApiType.GRPC
    api.transport_api_version = config_source_pb2.ApiVersion.V3
    api.grpc_services.add().envoy_grpc.cluster_name = cluster
    return source


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _duration(seconds: float) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromNanoseconds(round(seconds * 1e9))
    return value


def eds_cluster(
    name: str,
    *,
    connect_timeout: float = 1.0,
    service_name: str = "",
    http2: bool = False,
    source: config_source_pb2.ConfigSource | None = None,
) -> cluster_pb2.Cluster:
    """A round-robin cluster whose endpoints come from EDS (over ADS unless ``source``)."""
    cluster = cluster_pb2.Cluster(
        name=name,
        type=cluster_pb2.Cluster.DiscoveryType.EDS,
        connect_timeout=_duration(connect_timeout),
        lb_policy=cluster_pb2.Cluster.LbPolicy.ROUND_ROBIN,
    )
    cluster.eds_cluster_config.eds_config.CopyFrom(source or ads_source())
    if service_name:
        cluster.eds_cluster_config.service_name = service_name
    if http2:
        cluster.typed_extension_protocol_options[
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
        ].CopyFrom(_http2_options())
    return cluster


def _http2_options() -> any_pb2.Any:
    from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2 as hpo

    options = hpo.HttpProtocolOptions()
    options.explicit_http_config.http2_protocol_options.SetInParent()
    return _pack(options)


def load_assignment(
    cluster_name: str,
    endpoints: Iterable[Endpoint],
    *,
    region: str = "local",
    zone: str = "",
) -> endpoint_pb2.ClusterLoadAssignment:
    """Endpoints of one cluster in one locality, each with load-balancing weight 1."""
    group = endpoint_components_pb2.LocalityLbEndpoints(
        locality=base_pb2.Locality(region=region, zone=zone),
    )
    group.load_balancing_weight.value = 1
    for host, port in endpoints:
        lb_endpoint = group.lb_endpoints.add()
        address = lb_endpoint.endpoint.address.socket_address
        address.address = host
        address.port_value = port
        lb_endpoint.load_balancing_weight.value = 1
    return endpoint_pb2.ClusterLoadAssignment(cluster_name=cluster_name, endpoints=[group])


def _connection_manager(
    route_config_name: str, stat_prefix: str, source: config_source_pb2.ConfigSource | None
) -> hcm_pb2.HttpConnectionManager:
    manager = hcm_pb2.HttpConnectionManager(stat_prefix=stat_prefix)
    manager.rds.route_config_name = route_config_name
    manager.rds.config_source.CopyFrom(source or ads_source())
    router = manager.http_filters.add()
    router.name = "envoy.filters.http.router"
    router.typed_config.CopyFrom(_pack(router_pb2.Router()))
    return manager


def http_listener(
    name: str,
    port: int,
    route_config_name: str,
    *,
    address: str = "127.0.0.1",
    source: config_source_pb2.ConfigSource | None = None,
) -> listener_pb2.Listener:
    """An HTTP listener on ``address:port`` whose routes come from RDS (over ADS by default)."""
    manager = _connection_manager(route_config_name, name, source)
    chain = listener_components_pb2.FilterChain()
    network_filter = chain.filters.add()
    network_filter.name = "envoy.filters.network.http_connection_manager"
    network_filter.typed_config.CopyFrom(_pack(manager))
    return listener_pb2.Listener(
        name=name,
        address=address_pb2.Address(
            socket_address=address_pb2.SocketAddress(address=address, port_value=port)
        ),
        filter_chains=[chain],
    )


def api_listener(name: str, route_config_name: str) -> listener_pb2.Listener:
    """The listener a proxyless gRPC client asks for (its name is the ``xds:///`` target)."""
    manager = _connection_manager(route_config_name, name, None)
    return listener_pb2.Listener(
        name=name, api_listener=api_listener_pb2.ApiListener(api_listener=_pack(manager))
    )


def route_configuration(
    name: str,
    routes: Sequence[tuple[str, str]],
    *,
    domains: Sequence[str] = ("*",),
    response_headers: dict[str, str] | None = None,
) -> route_pb2.RouteConfiguration:
    """One virtual host routing each ``(prefix, cluster)`` pair, in order."""
    host = route_components_pb2.VirtualHost(name=f"{name}_vhost", domains=list(domains))
    for prefix, cluster in routes:
        route = host.routes.add()
        route.match.prefix = prefix
        route.route.cluster = cluster
    for key, value in (response_headers or {}).items():
        option = host.response_headers_to_add.add()
        option.header.key = key
        option.header.value = value
    return route_pb2.RouteConfiguration(name=name, virtual_hosts=[host])
