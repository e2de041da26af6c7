"""xdscore.analysis: one test per diagnostic code (where it fires and where it must not)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from envoy.config.core.v3 import extension_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import scoped_route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from google.protobuf.message import Message

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    SCOPED_ROUTE,
    SECRET,
    Resource,
    Snapshot,
    make_resource,
)
from xdscore import builders as b
from xdscore.analysis import CODES, Diagnostic, Report, Severity, analyze
from xdscore.config import ConfigError, load_directory

from ..factories import pack, secret, tls_cluster

ROOT = Path(__file__).resolve().parents[2]


def _pairs(*messages: Message | Resource) -> list[tuple[str, Resource]]:
    """Resources as a config directory would give them: one file per resource."""
    found = []
    for index, item in enumerate(messages):
        resource = item if isinstance(item, Resource) else make_resource(item)
        found.append((f"config/{index:02}.yaml", resource))
    return found


def _with(report: Report, code: str) -> list[Diagnostic]:
    return [d for d in report.diagnostics if d.code == code]


def _hcm(listener: listener_pb2.Listener) -> hcm_pb2.HttpConnectionManager:
    manager = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
    return manager


def _set_hcm(listener: listener_pb2.Listener, manager: hcm_pb2.HttpConnectionManager) -> None:
    listener.filter_chains[0].filters[0].typed_config.CopyFrom(pack(manager))


def _tls_listener(name: str, route: str, secret: str) -> listener_pb2.Listener:
    listener = b.http_listener(name, 10443, route)
    tls = tls_pb2.DownstreamTlsContext()
    tls.common_tls_context.tls_certificate_sds_secret_configs.add(name=secret)
    socket = listener.filter_chains[0].transport_socket
    socket.name = "envoy.transport_sockets.tls"
    socket.typed_config.CopyFrom(pack(tls))
    return listener


def _ecds_listener(name: str, route: str, filter_name: str) -> listener_pb2.Listener:
    listener = b.http_listener(name, 10000, route)
    manager = _hcm(listener)
    del manager.http_filters[:]
    discovered = manager.http_filters.add(name=filter_name)
    discovered.config_discovery.config_source.ads.SetInParent()
    discovered.config_discovery.type_urls.append(
        "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
    )
    _set_hcm(listener, manager)
    return listener


def _extension(name: str) -> extension_pb2.TypedExtensionConfig:
    return extension_pb2.TypedExtensionConfig(name=name, typed_config=pack(router_pb2.Router()))


def _complete() -> list[Message]:
    """A consistent configuration using every kind of reference; nothing to report."""
    return [
        b.eds_cluster("web"),
        tls_cluster("secure", validation="upstream-ca"),
        b.load_assignment("web", [("10.0.0.1", 8080)]),
        b.load_assignment("secure", [("10.0.0.2", 8443)]),
        _tls_listener("https", "routes", "server-cert"),
        _ecds_listener("filtered", "scoped-target", "authz"),
        b.route_configuration("routes", [("/", "web"), ("/secure", "secure")]),
        b.route_configuration("scoped-target", [("/", "web")], domains=["api.example.com"]),
        scoped_route_pb2.ScopedRouteConfiguration(
            name="scope-a",
            route_configuration_name="scoped-target",
            # Envoy requires a key (validate.rules message.required; XDS013 otherwise).
            key=scoped_route_pb2.ScopedRouteConfiguration.Key(
                fragments=[scoped_route_pb2.ScopedRouteConfiguration.Key.Fragment(string_key="a")]
            ),
        ),
        secret("server-cert"),
        secret("upstream-ca"),
        _extension("authz"),
    ]


def test_complete_configuration_has_nothing_to_report() -> None:
    assert analyze(_pairs(*_complete())).diagnostics == ()
    assert analyze(Snapshot(_complete())).diagnostics == ()


# --- one test per code ------------------------------------------------------------------------


def test_xds001_dangling_reference() -> None:
    resources = [
        b.eds_cluster("web"),  # its endpoints are missing
        tls_cluster("secure", validation="missing-ca"),
        b.load_assignment("secure", [("10.0.0.2", 8443)]),
        _tls_listener("https", "missing-routes", "missing-cert"),
        _ecds_listener("filtered", "routes", "missing-filter"),
        b.route_configuration("routes", [("/", "missing-cluster")]),
        scoped_route_pb2.ScopedRouteConfiguration(
            name="scope-a", route_configuration_name="missing-scoped-target"
        ),
    ]
    report = analyze(_pairs(*resources))
    dangling = _with(report, "XDS001")
    assert {(d.type_url, d.name, d.field) for d in dangling} == {
        (CLUSTER, "web", "eds_cluster_config.service_name"),
        (
            CLUSTER,
            "secure",
            "transport_socket.validation_context_sds_secret_config",
        ),
        (
            LISTENER,
            "https",
            "filter_chains[0].filters[envoy.filters.network.http_connection_manager].rds",
        ),
        (
            LISTENER,
            "https",
            "filter_chains[0].transport_socket.tls_certificate_sds_secret_configs",
        ),
        (
            LISTENER,
            "filtered",
            "filter_chains[0].filters[envoy.filters.network.http_connection_manager]"
            ".http_filters[missing-filter]",
        ),
        (ROUTE, "routes", "virtual_hosts[routes_vhost].routes[0].cluster"),
        (SCOPED_ROUTE, "scope-a", "route_configuration_name"),
    }
    assert all(d.severity is Severity.ERROR for d in dangling)
    route = next(d for d in dangling if d.type_url == ROUTE)
    assert route.where == "config/05.yaml"
    assert "cluster 'missing-cluster'" in route.message
    assert "route configuration 'routes'" in route.message

    # Not when every target exists ...
    assert _with(analyze(_pairs(*_complete())), "XDS001") == []
    # ... nor, for a snapshot, when it holds nothing of the target's type (another source
    # may serve it), unless told that it is complete.
    partial = Snapshot([b.eds_cluster("web"), b.route_configuration("routes", [("/", "web")])])
    assert _with(analyze(partial), "XDS001") == []
    forced = _with(analyze(partial, complete=True), "XDS001")
    assert [(d.name, d.field) for d in forced] == [("web", "eds_cluster_config.service_name")]
    # A snapshot that lists the type as served (and holds none of it) counts it as present.
    declared = Snapshot([b.eds_cluster("web")], types=[ENDPOINT])
    assert len(_with(analyze(declared), "XDS001")) == 1


def test_xds002_duplicate_name() -> None:
    found = [
        ("clusters.yaml (document 1)", make_resource(b.eds_cluster("web"))),
        ("endpoints.yaml (document 1)", make_resource(b.load_assignment("web", []))),
        ("more/clusters.yaml (document 2)", make_resource(b.eds_cluster("web", http2=True))),
    ]
    duplicates = _with(analyze(found), "XDS002")
    assert len(duplicates) == 1
    (duplicate,) = duplicates
    assert duplicate.severity is Severity.ERROR
    assert (duplicate.type_url, duplicate.name) == (CLUSTER, "web")
    assert duplicate.where == "more/clusters.yaml (document 2)"
    assert "clusters.yaml (document 1)" in duplicate.message

    # The same name in two types is no duplicate.
    assert _with(analyze(found[:2]), "XDS002") == []


def test_xds003_wrong_type() -> None:
    listener = b.http_listener("l", 10000, "routes")
    garbage = Resource(type_url=CLUSTER, name="garbage", body=b"\xff\xff\xff")
    mislabelled = Resource(
        type_url=CLUSTER, name="l", body=listener.SerializeToString(), message=listener
    )
    report = analyze(Snapshot([garbage, mislabelled]))
    wrong = _with(report, "XDS003")
    assert [(d.name, d.severity) for d in wrong] == [
        ("garbage", Severity.ERROR),
        ("l", Severity.ERROR),
    ]
    assert "does not parse as envoy.config.cluster.v3.Cluster" in wrong[0].message
    assert "envoy.config.listener.v3.Listener message" in wrong[1].message

    # Not for resources whose bytes are their declared type, however they were given.
    fine = [
        make_resource(b.eds_cluster("web")),
        make_resource(b.eds_cluster("raw").SerializeToString(), type_url=CLUSTER),
    ]
    assert _with(analyze(Snapshot(fine)), "XDS003") == []


def test_xds004_unreferenced_resource() -> None:
    resources = [
        *_complete(),
        b.route_configuration("unused-routes", [("/", "web")], domains=["old.example.com"]),
        b.load_assignment("unused-endpoints", [("10.0.0.9", 80)]),
        secret("unused-secret"),
        b.eds_cluster("unused-cluster", service_name="web"),  # clusters are roots
        b.http_listener("unused-listener", 10001, "routes"),  # so are listeners
        _extension("unused-extension"),  # extension configs are not checked
    ]
    unreferenced = _with(analyze(_pairs(*resources)), "XDS004")
    assert {(d.type_url, d.name) for d in unreferenced} == {
        (ROUTE, "unused-routes"),
        (ENDPOINT, "unused-endpoints"),
        (SECRET, "unused-secret"),
    }
    assert all(d.severity is Severity.WARNING for d in unreferenced)
    assert all(d.where and d.where.startswith("config/") for d in unreferenced)

    # Nothing is unreferenced when everything is used ...
    assert _with(analyze(_pairs(*_complete())), "XDS004") == []
    # ... nor in a snapshot that does not hold every type that could refer to it.
    routes_only = Snapshot([b.route_configuration("routes", [("/", "web")])])
    assert _with(analyze(routes_only), "XDS004") == []
    assert len(_with(analyze(routes_only, complete=True), "XDS004")) == 1


def test_xds005_cluster_chosen_per_request() -> None:
    config = b.route_configuration("routes", [("/", "web")])
    dynamic = config.virtual_hosts[0].routes.add()
    dynamic.match.prefix = "/dyn"
    dynamic.route.cluster_header = "x-target-cluster"
    report = analyze(_pairs(b.eds_cluster("web"), b.load_assignment("web", []), config))
    (info,) = _with(report, "XDS005")
    assert info.severity is Severity.INFO
    assert (info.type_url, info.name) == (ROUTE, "routes")
    assert info.field == "virtual_hosts[routes_vhost].routes[1].cluster_header"
    assert not report.has_errors

    # Not for routes to a named cluster.
    plain = b.route_configuration("routes", [("/", "web")])
    assert _with(analyze(_pairs(plain), complete=False), "XDS005") == []


def test_xds006_eds_cluster_with_empty_endpoints() -> None:
    empty = endpoint_pb2.ClusterLoadAssignment(cluster_name="svc-empty")
    empty.endpoints.add().locality.region = "local"  # a locality, but no endpoint in it
    resources = [
        b.eds_cluster("empty", service_name="svc-empty"),
        empty,
        b.eds_cluster("web"),
        b.load_assignment("web", [("10.0.0.1", 8080)]),
        b.eds_cluster("leds"),
        endpoint_pb2.ClusterLoadAssignment(
            cluster_name="leds",
            endpoints=[
                endpoint_components_pb2.LocalityLbEndpoints(
                    leds_cluster_locality_config=endpoint_components_pb2.LedsClusterLocalityConfig(
                        leds_collection_name="xdstp://example/leds/*"
                    )
                )
            ],
        ),
        b.eds_cluster("nothing"),  # its endpoints do not exist at all: XDS001, not XDS006
    ]
    # A LEDS locality is endpoints from elsewhere, unless LEDS endpoints are present (below).
    report = analyze(_pairs(*resources), complete=False)
    (warning,) = _with(report, "XDS006")
    assert warning.severity is Severity.WARNING
    assert (warning.type_url, warning.name) == (CLUSTER, "empty")
    assert "'svc-empty'" in warning.message
    assert warning.where == "config/00.yaml"
    assert [d.name for d in _with(report, "XDS001")] == ["nothing"]


def test_xds006_leds_collection_without_endpoints() -> None:
    # With LEDS endpoints present, a cluster whose localities all name collections that hold
    # none of them is empty too; one whose collection holds an endpoint is not.
    def leds(cluster: str, collection: str) -> endpoint_pb2.ClusterLoadAssignment:
        group = endpoint_components_pb2.LocalityLbEndpoints()
        group.leds_cluster_locality_config.leds_collection_name = collection
        return endpoint_pb2.ClusterLoadAssignment(cluster_name=cluster, endpoints=[group])

    authority = "xdstp://example/envoy.config.endpoint.v3.LbEndpoint"
    member = endpoint_components_pb2.LbEndpoint()
    member.endpoint.address.socket_address.address = "10.0.0.1"
    member.endpoint.address.socket_address.port_value = 80
    resources = [
        b.eds_cluster("full"),
        leds("full", f"{authority}/full/*?zone=z1&app=web"),
        b.eds_cluster("hollow"),
        leds("hollow", f"{authority}/hollow/*"),
        make_resource(member, name=f"{authority}/full/ep1?app=web&zone=z1"),
        make_resource(member, name=f"{authority}/hollow/deep/ep2"),  # not in hollow/*
    ]
    (warning,) = _with(analyze(_pairs(*resources)), "XDS006")
    assert (warning.type_url, warning.name) == (CLUSTER, "hollow")
    assert f"LEDS collections ({authority}/hollow/*) hold no endpoint" in warning.message
    # A directory is the whole source: its LEDS collections with no endpoint are empty.
    everything = _with(analyze(_pairs(*resources[:4])), "XDS006")
    assert [d.name for d in everything] == ["full", "hollow"]
    # A snapshot that serves no LEDS endpoints leaves them to another source: nothing to say.
    assert _with(analyze(Snapshot(resources[:4])), "XDS006") == []


def test_xds007_name_mismatch() -> None:
    renamed = make_resource(b.eds_cluster("web"), name="frontend")
    endpoints = make_resource(b.load_assignment("web", []), name="frontend")
    report = analyze(Snapshot([renamed, endpoints]))
    mismatches = _with(report, "XDS007")
    assert [(d.type_url, d.name, d.field) for d in mismatches] == [
        (CLUSTER, "frontend", "name"),
        (ENDPOINT, "frontend", "cluster_name"),
    ]
    assert all(d.severity is Severity.ERROR for d in mismatches)
    assert "'web'" in mismatches[0].message

    # Not when the names agree, nor for xdstp:// names.
    agreed = Snapshot([make_resource(b.eds_cluster("web"), name="web")])
    assert _with(analyze(agreed), "XDS007") == []
    xdstp = make_resource(
        b.eds_cluster("web"), name="xdstp://example/envoy.config.cluster.v3.Cluster/web"
    )
    assert _with(analyze(Snapshot([xdstp])), "XDS007") == []


def test_xds008_duplicate_domain() -> None:
    config = b.route_configuration("routes", [("/", "web")], domains=["example.com", "*"])
    second = config.virtual_hosts.add(name="second", domains=["EXAMPLE.com", "other.com", "*"])
    second.routes.add().match.prefix = "/"
    second.routes[0].route.cluster = "web"
    report = analyze(_pairs(b.eds_cluster("web"), b.load_assignment("web", [("h", 1)]), config))
    duplicates = _with(report, "XDS008")
    assert all(d.severity is Severity.ERROR for d in duplicates)
    assert sorted(d.message for d in duplicates) == [
        "route configuration 'routes' lists domain 'EXAMPLE.com' in virtual hosts "
        "'routes_vhost' and 'second'; Envoy rejects the whole route configuration",
        "route configuration 'routes' lists the wildcard domain '*' in virtual hosts "
        "'routes_vhost' and 'second'; Envoy rejects the whole route configuration",
    ]
    assert {d.field for d in duplicates} == {"virtual_hosts[second].domains"}

    # Not when every domain is listed once, whatever the virtual hosts are called.
    distinct = b.route_configuration("routes", [("/", "web")], domains=["example.com"])
    distinct.virtual_hosts.add(name="routes_vhost", domains=["example.org", "*.example.com"])
    assert _with(analyze(_pairs(distinct), complete=False), "XDS008") == []


def test_xds009_unknown_fields() -> None:
    listener_bytes = b.http_listener("l", 10000, "routes").SerializeToString()
    mislabelled = make_resource(listener_bytes, type_url=CLUSTER)
    (warning,) = _with(analyze(Snapshot([mislabelled])), "XDS009")
    assert warning.severity is Severity.WARNING
    assert (warning.type_url, warning.name) == (CLUSTER, "l")
    assert "(2)" in warning.message  # Listener.address, which Cluster does not have

    # Not for bytes of the declared type.
    assert _with(analyze(Snapshot([b.http_listener("l", 10000, "routes")])), "XDS009") == []


def _localities(cluster: str, *weights: int | None) -> endpoint_pb2.ClusterLoadAssignment:
    """Endpoints of ``cluster``: one locality (zone z0, z1, ...) per weight, ``None`` for
    none set, each with one endpoint."""
    assignment = endpoint_pb2.ClusterLoadAssignment(cluster_name=cluster)
    for index, weight in enumerate(weights):
        group = assignment.endpoints.add()
        group.locality.zone = f"z{index}"
        if weight is not None:
            group.load_balancing_weight.value = weight
        address = group.lb_endpoints.add().endpoint.address.socket_address
        address.address, address.port_value = "10.0.0.1", 8080 + index
    return assignment


def _xds014_resources() -> list[Message]:
    """A gRPC target and an Envoy listener, each with clusters whose localities lack weights."""
    grpc_routes = [("/a", "grpc-a"), ("/b", "grpc-b"), ("/c", "grpc-c"), ("/shared", "shared")]
    with_empty_locality = _localities("grpc-c-endpoints", 3)
    with_empty_locality.endpoints.add().locality.zone = "empty"  # nothing in it to ignore
    return [
        b.api_listener("echo.test", "grpc-routes"),
        b.route_configuration("grpc-routes", grpc_routes),
        b.eds_cluster("grpc-a", http2=True),
        _localities("grpc-a", 1, None),  # the second locality is ignored by gRPC
        b.eds_cluster("grpc-b", http2=True),
        _localities("grpc-b", 0),  # weight 0: refused by Envoy's rules already (XDS013)
        b.eds_cluster("grpc-c", service_name="grpc-c-endpoints"),
        with_empty_locality,
        b.eds_cluster("shared"),
        _localities("shared", None),
        b.http_listener("edge", 10000, "edge-routes"),
        b.route_configuration("edge-routes", [("/", "envoy-only"), ("/shared", "shared")]),
        b.eds_cluster("envoy-only"),
        _localities("envoy-only", None, None),  # Envoy does not need weights
    ]


def test_xds014_locality_without_weight_reached_by_grpc() -> None:
    resources = _xds014_resources()
    report = analyze(_pairs(*resources))
    found = _with(report, "XDS014")
    assert [(d.name, d.field, d.where) for d in found] == [
        ("grpc-a", "endpoints[1].load_balancing_weight", "config/03.yaml"),
        ("shared", "endpoints[0].load_balancing_weight", "config/09.yaml"),
    ]
    assert all(d.severity is Severity.WARNING and d.type_url == ENDPOINT for d in found)
    assert found[0].message == (
        "endpoints 'grpc-a': locality endpoints[1] has no load_balancing_weight; gRPC clients "
        "(API listener 'echo.test') ignore it, and fail RPCs with UNAVAILABLE if no other "
        "locality is left"
    )
    assert [(d.code, d.name) for d in report.diagnostics if d.code != "XDS014"] == [
        ("XDS013", "grpc-b")
    ]
    # The same for a snapshot (which has no locations).
    from_snapshot = _with(analyze(Snapshot(resources)), "XDS014")
    assert [(d.name, d.message) for d in from_snapshot] == [(d.name, d.message) for d in found]

    # Not for what no API listener reaches: the same resources served to Envoy alone.
    assert _with(analyze(_pairs(*resources[10:], *resources[8:10])), "XDS014") == []
    # Not without the listeners (another source may serve them): nothing reaches anything.
    endpoints_only = Snapshot([r for r in resources if not isinstance(r, listener_pb2.Listener)])
    assert _with(analyze(endpoints_only), "XDS014") == []


# --- the report and the API -------------------------------------------------------------------


def test_report_is_sorted_and_renders_as_text_and_json() -> None:
    resources = [
        b.route_configuration("b-routes", [("/", "missing-b")]),
        b.route_configuration("a-routes", [("/", "missing-a")]),
        b.load_assignment("orphan", []),
    ]
    report = analyze(_pairs(*resources))
    assert [(d.code, d.name) for d in report] == [
        ("XDS001", "a-routes"),
        ("XDS001", "b-routes"),
        ("XDS004", "orphan"),  # envoy.config.endpoint... sorts before envoy.config.route...
        ("XDS004", "a-routes"),
        ("XDS004", "b-routes"),
    ]
    assert report.has_errors
    assert len(report.errors) == 2
    assert len(report.warnings) == 3
    assert report.at_least(Severity.ERROR).codes() == ["XDS001", "XDS001"]
    lines = report.to_text().splitlines()
    assert lines[0] == (
        "config/01.yaml: ERROR XDS001 route configuration 'a-routes' refers to cluster "
        "'missing-a' (virtual_hosts[a-routes_vhost].routes[0].cluster), which does not exist"
    )
    assert all(re.match(r"^\S+: (ERROR|WARNING|INFO) XDS\d{3} ", line) for line in lines)
    as_json = report.to_json()
    assert as_json[0] == {
        "code": "XDS001",
        "severity": "error",
        "message": report.diagnostics[0].message,
        "type_url": ROUTE,
        "name": "a-routes",
        "where": "config/01.yaml",
        "field": "virtual_hosts[a-routes_vhost].routes[0].cluster",
    }
    # Without a location (a snapshot), the text still has one line per diagnostic.
    snapshot = Snapshot(resources)
    first = analyze(snapshot, complete=True).diagnostics[0]
    assert str(first).startswith("snapshot: ERROR XDS001 route configuration 'a-routes'")
    placed = analyze(snapshot, locations={(ROUTE, "a-routes"): "routes.yaml"}, complete=True)
    assert placed.diagnostics[0].where == "routes.yaml"


def test_analyze_refuses_anything_but_a_snapshot_or_pairs() -> None:
    with pytest.raises(TypeError, match="Snapshot or \\(where, Resource\\) pairs"):
        analyze([make_resource(b.eds_cluster("web"))])  # type: ignore[list-item]


def test_every_code_is_documented() -> None:
    import xdscore.analysis

    docs = (ROOT / "docs" / "analysis.md").read_text()
    assert xdscore.analysis.__doc__ is not None
    for code, (severity, _title) in CODES.items():
        assert re.search(rf"{code}\s+{severity.name}", xdscore.analysis.__doc__), code
        assert re.search(rf"\|\s*`?{code}`?\s*\|\s*{severity.name}\s*\|", docs), code


# --- the config directory server refuses errors, logs warnings --------------------------------

_LISTENER = """\
"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: listener_0
address:
  socket_address: {address: 127.0.0.1, port_value: 10000}
filter_chains:
  - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": HCM_TYPE_URL
          stat_prefix: ingress
          rds:
            route_config_name: route_0
            config_source: {ads: {}, resource_api_version: V3}
          http_filters:
            - name: envoy.filters.http.router
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
""".replace(
    "HCM_TYPE_URL",
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
    "HttpConnectionManager",
)

_ROUTES = """\
"@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
name: {name}
virtual_hosts:
  - name: demo
    domains: ["*"]
    routes:
      - match: {{prefix: /}}
        route: {{cluster: {cluster}}}
"""

_CLUSTER = """\
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: backend_a
type: STATIC
connect_timeout: 1s
load_assignment:
  cluster_name: backend_a
  endpoints:
    - lb_endpoints:
        - endpoint:
            address:
              socket_address: {address: 127.0.0.1, port_value: 8080}
"""


def test_load_directory_refuses_errors_with_their_locations(tmp_path: Path) -> None:
    (tmp_path / "listeners.yaml").write_text(_LISTENER)
    (tmp_path / "routes.yaml").write_text(_ROUTES.format(name="route_0", cluster="backend_x"))
    (tmp_path / "clusters.yaml").write_text(_CLUSTER)
    with pytest.raises(ConfigError) as caught:
        load_directory(tmp_path)
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.code == "XDS001"
    (problem,) = caught.value.problems
    assert problem.where == f"{tmp_path / 'routes.yaml'} (document 1)"
    assert "XDS001" in str(caught.value)
    assert "'backend_x'" in str(caught.value)

    # A dangling reference is not reported alongside a file that does not parse (its target
    # may be in it); a duplicate is.
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    (tmp_path / "routes.yaml").write_text(
        _ROUTES.format(name="route_0", cluster="backend_x")
        + "---\n"
        + _ROUTES.format(name="route_0", cluster="backend_a")
    )
    with pytest.raises(ConfigError) as caught:
        load_directory(tmp_path)
    messages = [problem.message for problem in caught.value.problems]
    assert messages[0].startswith("cannot be read")
    assert [d.code for d in caught.value.diagnostics] == ["XDS002"]
    assert len(messages) == 2


def test_load_directory_logs_warnings_and_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "listeners.yaml").write_text(_LISTENER)
    (tmp_path / "routes.yaml").write_text(
        _ROUTES.format(name="route_0", cluster="backend_a")
        + "---\n"
        + _ROUTES.format(name="route_unused", cluster="backend_a")
    )
    (tmp_path / "clusters.yaml").write_text(_CLUSTER)
    with caplog.at_level(logging.WARNING, logger="xdscore.config"):
        snapshot = load_directory(tmp_path)
    assert sorted(snapshot.resources(ROUTE) or {}) == ["route_0", "route_unused"]
    (record,) = [r for r in caplog.records if r.name == "xdscore.config"]
    assert record.levelno == logging.WARNING
    assert "WARNING XDS004" in record.getMessage()
    assert "route_unused" in record.getMessage()
    assert f"{tmp_path / 'routes.yaml'} (document 2)" in record.getMessage()
