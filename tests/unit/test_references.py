"""Which resources a resource refers to, read from its encoding."""

from __future__ import annotations

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2, scoped_route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from google.protobuf.message import Message

from xdscore import (
    CLUSTER,
    ENDPOINT,
    EXTENSION_CONFIG,
    LISTENER,
    ROUTE,
    SCOPED_ROUTE,
    SECRET,
    make_resource,
)
from xdscore.builders import api_listener, eds_cluster, http_listener, route_configuration
from xdscore.wire._references import Reference, references, unresolvable

from ..factories import pack, tls_cluster


def refs(type_url: str, message: Message) -> set[tuple[str, str]]:
    found = references(type_url, message.SerializeToString())
    return {(ref.type_url, ref.name) for ref in found}


def fields(type_url: str, message: Message) -> dict[tuple[str, str], str]:
    return {
        (ref.type_url, ref.name): ref.field
        for ref in references(type_url, message.SerializeToString())
    }


def _listener_with(
    *network_filters: Message, tls: tls_pb2.DownstreamTlsContext | None = None
) -> listener_pb2.Listener:
    chain = listener_components_pb2.FilterChain()
    for index, config in enumerate(network_filters):
        network_filter = chain.filters.add()
        network_filter.name = f"filter-{index}"
        network_filter.typed_config.CopyFrom(pack(config))
    if tls is not None:
        chain.transport_socket.name = "envoy.transport_sockets.tls"
        chain.transport_socket.typed_config.CopyFrom(pack(tls))
    return listener_pb2.Listener(name="l", filter_chains=[chain])


def _tls_context_names(context: tls_pb2.CommonTlsContext) -> None:
    context.tls_certificate_sds_secret_configs.add(name="cert-1")
    context.tls_certificate_sds_secret_configs.add(name="cert-2")
    context.validation_context_sds_secret_config.name = "ca"


# --- Listener ---------------------------------------------------------------------------------


def test_listener_hcm_rds_refers_to_route_configuration() -> None:
    listener = http_listener("l", 10000, "routes-1")
    assert refs(LISTENER, listener) == {(ROUTE, "routes-1")}
    assert "rds" in fields(LISTENER, listener)[(ROUTE, "routes-1")]


def test_api_listener_refers_to_route_configuration() -> None:
    listener = api_listener("xds:///svc", "svc-routes")
    assert refs(LISTENER, listener) == {(ROUTE, "svc-routes")}
    assert fields(LISTENER, listener)[(ROUTE, "svc-routes")].startswith("api_listener")


def test_listener_tcp_proxy_cluster_and_weighted_clusters() -> None:
    single = tcp_proxy_pb2.TcpProxy(stat_prefix="tcp", cluster="backend")
    weighted = tcp_proxy_pb2.TcpProxy(stat_prefix="tcp")
    weighted.weighted_clusters.clusters.add(name="blue", weight=90)
    weighted.weighted_clusters.clusters.add(name="green", weight=10)
    assert refs(LISTENER, _listener_with(single)) == {(CLUSTER, "backend")}
    assert refs(LISTENER, _listener_with(weighted)) == {(CLUSTER, "blue"), (CLUSTER, "green")}
    assert refs(LISTENER, _listener_with(single, weighted)) == {
        (CLUSTER, "backend"),
        (CLUSTER, "blue"),
        (CLUSTER, "green"),
    }


def test_listener_inline_route_config_refers_to_clusters() -> None:
    manager = hcm_pb2.HttpConnectionManager(stat_prefix="h")
    manager.route_config.CopyFrom(route_configuration("inline", [("/", "a"), ("/b", "b")]))
    assert refs(LISTENER, _listener_with(manager)) == {(CLUSTER, "a"), (CLUSTER, "b")}


def test_listener_downstream_tls_refers_to_sds_secrets() -> None:
    tls = tls_pb2.DownstreamTlsContext()
    _tls_context_names(tls.common_tls_context)
    listener = _listener_with(tcp_proxy_pb2.TcpProxy(stat_prefix="t", cluster="backend"), tls=tls)
    assert refs(LISTENER, listener) == {
        (CLUSTER, "backend"),
        (SECRET, "cert-1"),
        (SECRET, "cert-2"),
        (SECRET, "ca"),
    }


def test_listener_combined_validation_context_secret() -> None:
    tls = tls_pb2.DownstreamTlsContext()
    combined = tls.common_tls_context.combined_validation_context
    combined.validation_context_sds_secret_config.name = "combined-ca"
    combined.default_validation_context.SetInParent()
    assert refs(LISTENER, _listener_with(tls=tls)) == {(SECRET, "combined-ca")}


def test_listener_default_filter_chain_is_read_too() -> None:
    listener = http_listener("l", 10000, "main-routes")
    chain = listener.default_filter_chain
    network_filter = chain.filters.add()
    network_filter.name = "tcp"
    network_filter.typed_config.CopyFrom(
        pack(tcp_proxy_pb2.TcpProxy(stat_prefix="t", cluster="fallback"))
    )
    assert refs(LISTENER, listener) == {(ROUTE, "main-routes"), (CLUSTER, "fallback")}


def test_listener_scoped_routes_and_ecds_filters() -> None:
    manager = hcm_pb2.HttpConnectionManager(stat_prefix="h")
    scoped_list = manager.scoped_routes.scoped_route_configurations_list
    scoped_list.scoped_route_configurations.add(name="s1", route_configuration_name="rc-1")
    http_filter = manager.http_filters.add(name="envoy.filters.http.dynamic")
    http_filter.config_discovery.config_source.ads.SetInParent()
    assert refs(LISTENER, _listener_with(manager)) == {
        (ROUTE, "rc-1"),
        (EXTENSION_CONFIG, "envoy.filters.http.dynamic"),
    }
    over_srds = hcm_pb2.HttpConnectionManager(stat_prefix="h")
    over_srds.scoped_routes.scoped_rds.srds_resources_locator = "scopes"
    assert refs(LISTENER, _listener_with(over_srds)) == {(SCOPED_ROUTE, "scopes")}


def test_listener_without_references() -> None:
    assert refs(LISTENER, listener_pb2.Listener(name="bare")) == set()


# --- RouteConfiguration -----------------------------------------------------------------------


def test_route_configuration_clusters() -> None:
    config = route_configuration("r", [("/a", "a"), ("/b", "b"), ("/again", "a")])
    found = references(ROUTE, config.SerializeToString())
    assert [(ref.type_url, ref.name) for ref in found] == [(CLUSTER, "a"), (CLUSTER, "b")]


def test_route_configuration_weighted_clusters_and_mirrors() -> None:
    config = route_pb2.RouteConfiguration(name="r")
    host = config.virtual_hosts.add(name="vh", domains=["*"])
    weighted = host.routes.add()
    weighted.match.prefix = "/w"
    weighted.route.weighted_clusters.clusters.add(name="blue").weight.value = 80
    weighted.route.weighted_clusters.clusters.add(name="green").weight.value = 20
    mirrored = host.routes.add()
    mirrored.match.prefix = "/m"
    mirrored.route.cluster = "primary"
    mirrored.route.request_mirror_policies.add(cluster="shadow")
    redirect = host.routes.add()
    redirect.match.prefix = "/r"
    redirect.redirect.host_redirect = "example.com"
    assert refs(ROUTE, config) == {
        (CLUSTER, "blue"),
        (CLUSTER, "green"),
        (CLUSTER, "primary"),
        (CLUSTER, "shadow"),
    }
    where = fields(ROUTE, config)
    assert "weighted_clusters" in where[(CLUSTER, "blue")]
    assert "request_mirror_policies" in where[(CLUSTER, "shadow")]


def test_unresolvable_reports_cluster_header() -> None:
    config = route_pb2.RouteConfiguration(name="r")
    host = config.virtual_hosts.add(name="vh", domains=["*"])
    dynamic = host.routes.add()
    dynamic.match.prefix = "/"
    dynamic.route.cluster_header = "x-cluster"
    body = config.SerializeToString()
    assert unresolvable(ROUTE, body) == ("virtual_hosts[vh].routes[0].cluster_header",)
    # A header-chosen cluster is not a static reference.
    assert references(ROUTE, body) == ()


def test_unresolvable_reports_weighted_cluster_header_and_plugins() -> None:
    config = route_pb2.RouteConfiguration(name="r")
    host = config.virtual_hosts.add(name="vh", domains=["*"])
    static = host.routes.add()
    static.match.prefix = "/static"
    static.route.cluster = "a"
    weighted = host.routes.add()
    weighted.match.prefix = "/w"
    weighted.route.weighted_clusters.clusters.add(cluster_header="x-w")
    plugin = host.routes.add()
    plugin.match.prefix = "/p"
    plugin.route.cluster_specifier_plugin = "my-plugin"
    assert unresolvable(ROUTE, config.SerializeToString()) == (
        "virtual_hosts[vh].routes[1].weighted_clusters.cluster_header",
        "virtual_hosts[vh].routes[2].cluster_specifier_plugin",
    )


def test_unresolvable_is_empty_for_static_routes_and_other_types() -> None:
    config = route_configuration("r", [("/", "a")])
    assert unresolvable(ROUTE, config.SerializeToString()) == ()
    assert unresolvable(CLUSTER, eds_cluster("a").SerializeToString()) == ()


# --- Cluster ----------------------------------------------------------------------------------


def test_eds_cluster_refers_to_its_endpoints_by_cluster_name() -> None:
    assert refs(CLUSTER, eds_cluster("backend")) == {(ENDPOINT, "backend")}


def test_eds_cluster_refers_to_its_service_name() -> None:
    assert refs(CLUSTER, eds_cluster("backend", service_name="backend-eps")) == {
        (ENDPOINT, "backend-eps")
    }


def test_non_eds_cluster_has_no_endpoint_reference() -> None:
    cluster = cluster_pb2.Cluster(name="dns", type=cluster_pb2.Cluster.DiscoveryType.STRICT_DNS)
    assert refs(CLUSTER, cluster) == set()
    assert refs(CLUSTER, cluster_pb2.Cluster(name="static")) == set()


def test_cluster_upstream_tls_refers_to_sds_secrets() -> None:
    cluster = tls_cluster(
        "secure", certificates=["cert-1", "cert-2"], validation="ca", sni="secure.example.com"
    )
    assert refs(CLUSTER, cluster) == {
        (ENDPOINT, "secure"),
        (SECRET, "cert-1"),
        (SECRET, "cert-2"),
        (SECRET, "ca"),
    }


def test_cluster_transport_socket_matches_are_read_too() -> None:
    cluster = eds_cluster("matched")
    tls = tls_pb2.UpstreamTlsContext()
    tls.common_tls_context.tls_certificate_sds_secret_configs.add(name="mtls-cert")
    match = cluster.transport_socket_matches.add(name="mtls")
    match.transport_socket.name = "envoy.transport_sockets.tls"
    match.transport_socket.typed_config.CopyFrom(pack(tls))
    assert refs(CLUSTER, cluster) == {(ENDPOINT, "matched"), (SECRET, "mtls-cert")}
    assert "transport_socket_matches[mtls]" in fields(CLUSTER, cluster)[(SECRET, "mtls-cert")]


def test_cluster_with_non_tls_transport_socket() -> None:
    cluster = eds_cluster("plain")
    cluster.transport_socket.name = "raw"
    cluster.transport_socket.typed_config.CopyFrom(pack(base_pb2.Metadata()))
    assert refs(CLUSTER, cluster) == {(ENDPOINT, "plain")}


# --- ScopedRouteConfiguration and the rest ----------------------------------------------------


def test_scoped_route_refers_to_its_route_configuration() -> None:
    scoped = scoped_route_pb2.ScopedRouteConfiguration(
        name="scope-a", route_configuration_name="rc-a"
    )
    assert refs(SCOPED_ROUTE, scoped) == {(ROUTE, "rc-a")}


def test_types_without_references_and_malformed_bodies() -> None:
    assert references(ENDPOINT, b"\x0a\x01a") == ()
    assert references(LISTENER, b"\xff\xff\xff") == ()
    assert references(CLUSTER, b"\x0a\x05ab") == ()


def test_references_are_sorted_and_deduplicated() -> None:
    route = route_components_pb2.Route()
    route.match.prefix = "/"
    route.route.cluster = "z"
    config = route_configuration("r", [("/1", "b"), ("/2", "a"), ("/3", "b")])
    config.virtual_hosts[0].routes.append(route)
    found = references(ROUTE, config.SerializeToString())
    assert found == tuple(sorted(found))
    assert [ref.name for ref in found] == ["a", "b", "z"]
    assert all(isinstance(ref, Reference) for ref in found)


def test_resource_references_property_uses_the_same_analysis() -> None:
    resource = make_resource(http_listener("l", 10000, "r9"))
    assert [(ref.type_url, ref.name) for ref in resource.references] == [(ROUTE, "r9")]


# --- references to types sent before ----------------------------------------------------------


def test_earlier_references_are_those_to_lower_ranks() -> None:
    """A route configuration's clusters are sent before it (make-before-break may hold it
    back for them); a cluster's endpoints after it (it warms on them instead)."""
    route = make_resource(route_configuration("routes-1", [("/", "c1")]))
    assert {(r.type_url, r.name) for r in route.earlier_references} == {(CLUSTER, "c1")}
    cluster = make_resource(eds_cluster("c1"))
    assert {(r.type_url, r.name) for r in cluster.references} == {(ENDPOINT, "c1")}
    assert cluster.earlier_references == ()
