"""``xdscore diff``: the pure comparison of Envoy's config dump with CSDS reports.

Both sides are built by hand: Envoy's ``/config_dump`` as the JSON Envoy writes, the control
plane's view as the :class:`ResourceReport` values CSDS decodes to, each resource encoded
from the proto3 JSON mapping.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

import pytest
from google.protobuf import json_format

from xdscore.cli import main
from xdscore.cli._diff import (
    compare,
    dump_node_id,
    dump_protocol,
    envoy_resources,
    field_diff,
    normalise,
    render_json,
    render_text,
)
from xdscore.testing import free_port
from xdscore.wire._csds import ResourceReport
from xdscore.wire._messages import import_all_protos, message_class
from xdscore.wire._resource import Resource
from xdscore.wire._typeurls import CLUSTER, ENDPOINT, LISTENER, ROUTE, SECRET, TYPE_URL_PREFIX

ADMIN = TYPE_URL_PREFIX + "envoy.admin.v3."
HCM = TYPE_URL_PREFIX + (
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)
V1, V2 = "v1-aaaa", "v2-bbbb"


def listener(port: int = 10000, stat_prefix: str = "ingress") -> dict[str, Any]:
    return {
        "@type": LISTENER,
        "name": "listener_0",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": {
                            "@type": HCM,
                            "stat_prefix": stat_prefix,
                            "rds": {
                                "route_config_name": "route_0",
                                "config_source": {"ads": {}, "resource_api_version": "V3"},
                            },
                        },
                    }
                ]
            }
        ],
    }


def route() -> dict[str, Any]:
    return {
        "@type": ROUTE,
        "name": "route_0",
        "virtual_hosts": [
            {
                "name": "all",
                "domains": ["*"],
                "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "backend"}}],
            }
        ],
    }


def cluster(name: str = "backend", timeout: str = "1s", kind: str = "EDS") -> dict[str, Any]:
    document: dict[str, Any] = {
        "@type": CLUSTER,
        "name": name,
        "type": kind,
        "connect_timeout": timeout,
    }
    if kind == "EDS":
        document["eds_cluster_config"] = {"eds_config": {"ads": {}, "resource_api_version": "V3"}}
    return document


def endpoints(port: int = 8080) -> dict[str, Any]:
    """As the control plane writes them."""
    return {
        "@type": ENDPOINT,
        "cluster_name": "backend",
        "endpoints": [
            {"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"port_value": port}}}}]}
        ],
    }


def envoy_endpoints(port: int = 8080) -> dict[str, Any]:
    """As Envoy 1.40 dumps the same endpoints, rebuilt from its host set."""
    return {
        "@type": ENDPOINT,
        "cluster_name": "backend",
        "endpoints": [
            {
                "locality": {},
                "lb_endpoints": [
                    {
                        "endpoint": {
                            "address": {"socket_address": {"port_value": port}},
                            "health_check_config": {},
                        },
                        "health_status": "HEALTHY",
                        "load_balancing_weight": 1,
                    }
                ],
                "load_balancing_weight": 0,
            }
        ],
        "policy": {"overprovisioning_factor": 140},
    }


def report(
    document: dict[str, Any] | None,
    version: str = V1,
    *,
    type_url: str = "",
    name: str = "",
    config: str = "SYNCED",
    client: str = "ACKED",
    error: str = "",
) -> ResourceReport:
    """One CSDS entry carrying ``document`` encoded as the control plane would."""
    resource = None
    if document is not None:
        type_url = document["@type"]
        name = document.get("name") or document["cluster_name"]
        import_all_protos()
        fields = {k: v for k, v in document.items() if k != "@type"}
        message = json_format.ParseDict(fields, message_class(type_url)())
        resource = Resource(type_url=type_url, name=name, body=message.SerializeToString())
    return ResourceReport(
        type_url=type_url,
        name=name,
        version=version,
        config_status=config,
        client_status=client,
        resource=resource,
        error=error,
        error_version=V2 if error else "",
    )


def config_dump(
    *,
    listeners: Sequence[dict[str, Any]] = (),
    clusters: Sequence[dict[str, Any]] = (),
    warming_clusters: Sequence[dict[str, Any]] = (),
    routes: Sequence[dict[str, Any]] = (),
    endpoint_configs: Sequence[dict[str, Any]] = (),
    lds_version: str = V1,
    cds_version: str = V1,
    api_type: str = "GRPC",
) -> dict[str, Any]:
    """An Envoy ``/config_dump?include_eds`` with these dynamic entries."""
    return {
        "configs": [
            {
                "@type": ADMIN + "BootstrapConfigDump",
                "bootstrap": {
                    "node": {"id": "proxy-1", "cluster": "test"},
                    "dynamic_resources": {
                        "ads_config": {"api_type": api_type, "transport_api_version": "V3"},
                        "lds_config": {"ads": {}, "resource_api_version": "V3"},
                        "cds_config": {"ads": {}, "resource_api_version": "V3"},
                    },
                },
            },
            {
                "@type": ADMIN + "ClustersConfigDump",
                "version_info": cds_version,
                "static_clusters": [{"cluster": cluster("xds_cluster", kind="STATIC")}],
                "dynamic_active_clusters": list(clusters),
                "dynamic_warming_clusters": list(warming_clusters),
            },
            {
                "@type": ADMIN + "EndpointsConfigDump",
                "dynamic_endpoint_configs": list(endpoint_configs),
            },
            {
                "@type": ADMIN + "ListenersConfigDump",
                "version_info": lds_version,
                "dynamic_listeners": list(listeners),
            },
            {"@type": ADMIN + "RoutesConfigDump", "dynamic_route_configs": list(routes)},
            {"@type": ADMIN + "SecretsConfigDump"},
        ]
    }


def active_listener(document: dict[str, Any], version: str = V1) -> dict[str, Any]:
    return {
        "name": document["name"],
        "active_state": {"version_info": version, "listener": document},
    }


def in_sync_dump() -> dict[str, Any]:
    return config_dump(
        listeners=[active_listener(listener())],
        clusters=[{"version_info": V1, "cluster": cluster()}],
        routes=[{"version_info": V1, "route_config": route()}],
        endpoint_configs=[{"endpoint_config": envoy_endpoints()}],
    )


def in_sync_reports() -> list[ResourceReport]:
    return [report(listener()), report(route()), report(cluster()), report(endpoints())]


def states(dump: dict[str, Any], reports: list[ResourceReport]) -> dict[tuple[str, str], str]:
    return {(r.short, r.name): r.state for r in compare(dump, reports).resources}


def test_in_sync() -> None:
    comparison = compare(in_sync_dump(), in_sync_reports())
    assert comparison.in_sync
    assert comparison.node == "proxy-1"
    assert comparison.protocol == "sotw"
    assert {(r.short, r.name): r.state for r in comparison.resources} == {
        ("lds", "listener_0"): "MATCH",
        ("rds", "route_0"): "MATCH",
        ("cds", "backend"): "MATCH",
        ("eds", "backend"): "MATCH",
    }
    assert all(not r.fields for r in comparison.resources)
    text = render_text(comparison)
    assert text.splitlines()[0] == "node proxy-1 (State of the World): in sync: 4 matching"


def test_a_field_that_differs_is_named_by_its_path() -> None:
    dump = in_sync_dump()
    dump["configs"][3]["dynamic_listeners"] = [active_listener(listener(stat_prefix="a"))]
    reports = [report(listener(stat_prefix="b")), *in_sync_reports()[1:]]
    comparison = compare(dump, reports)
    assert not comparison.in_sync
    (differs,) = [r for r in comparison.resources if r.state != "MATCH"]
    assert (differs.short, differs.name, differs.state) == ("lds", "listener_0", "DIFFERS")
    assert differs.fields == ("filter_chains[0].filters[0].typed_config.stat_prefix: 'a' != 'b'",)
    assert "DIFFERS  lds  listener_0" in render_text(comparison)


def test_envoy_lacks_a_resource() -> None:
    dump = in_sync_dump()
    dump["configs"][4]["dynamic_route_configs"] = []
    found = states(dump, in_sync_reports())
    assert found[("rds", "route_0")] == "MISSING"
    assert [s for k, s in found.items() if k != ("rds", "route_0")] == ["MATCH"] * 3


def test_envoy_has_an_extra_resource() -> None:
    dump = in_sync_dump()
    dump["configs"][1]["dynamic_active_clusters"].append(
        {"version_info": V1, "cluster": cluster("leftover", kind="STATIC")}
    )
    found = states(dump, in_sync_reports())
    assert found[("cds", "leftover")] == "EXTRA"
    assert found[("cds", "backend")] == "MATCH"


def test_a_listener_in_error_state_carries_envoys_message() -> None:
    """Envoy keeps the old listener active and records the rejected one with its reason;
    it also dumps the error once more in an entry without a name, which is merged."""
    details = "cannot bind '127.0.0.1:20000': Address already in use"
    error_state = {"failed_configuration": listener(20000), "details": details}
    dump = in_sync_dump()
    dump["configs"][3]["dynamic_listeners"] = [
        {**active_listener(listener(10000)), "error_state": error_state},
        {"error_state": copy.deepcopy(error_state)},
    ]
    nack = f"Error adding/updating listener(s) listener_0: {details}"
    reports = [
        report(listener(20000), config="ERROR", client="NACKED", error=nack),
        *in_sync_reports()[1:],
    ]
    comparison = compare(dump, reports)
    (lds,) = [r for r in comparison.resources if r.short == "lds"]
    assert lds.state == "ERROR"
    assert lds.envoy_holds == "active, error"
    assert lds.envoy_error == details
    assert lds.plane_error == nack
    assert lds.fields == ("address.socket_address.port_value: 10000 != 20000",)
    assert not comparison.in_sync
    text = render_text(comparison)
    assert "ERROR    lds  listener_0" in text
    assert f"Envoy's error: {details}" in text


def test_a_listener_envoy_never_had_is_in_error_not_missing() -> None:
    details = "cannot bind '127.0.0.1:20000': Address already in use"
    dump = in_sync_dump()
    dump["configs"][3]["dynamic_listeners"] = [
        {"error_state": {"failed_configuration": listener(20000), "details": details}}
    ]
    lds = next(
        r
        for r in compare(dump, [report(listener(20000), client="NACKED", config="ERROR")]).resources
        if r.short == "lds"
    )
    assert (lds.state, lds.envoy_holds, lds.envoy_error) == ("ERROR", "error", details)


def test_an_earlier_rejection_does_not_hide_a_match() -> None:
    dump = in_sync_dump()
    dump["configs"][3]["dynamic_listeners"][0]["error_state"] = {
        "failed_configuration": listener(20000),
        "details": "cannot bind",
    }
    comparison = compare(dump, in_sync_reports())
    assert comparison.in_sync
    (lds,) = [r for r in comparison.resources if r.short == "lds"]
    assert lds.notes == ("Envoy still records an earlier rejected version: cannot bind",)


def test_sotw_a_resource_keeps_the_version_that_last_changed_it() -> None:
    """Over SotW the response at v2 changed only cluster b: Envoy shows a at v1, b at v2
    and the type at v2; the control plane reports both at v2. In sync, by content: a's
    label is said, not held against it."""
    dump = config_dump(
        clusters=[
            {"version_info": V1, "cluster": cluster("a", kind="STATIC")},
            {"version_info": V2, "cluster": cluster("b", "2s", kind="STATIC")},
        ],
        cds_version=V2,
    )
    reports = [report(cluster("a", kind="STATIC"), V2), report(cluster("b", "2s", "STATIC"), V2)]
    comparison = compare(dump, reports)
    assert comparison.in_sync
    a, b = comparison.resources
    assert (a.labels_differ, b.labels_differ) == (True, False)
    assert a.notes == (
        f"the same content under other version labels: version: {V1!r} != {V2!r} "
        "(labels name the response that carried or last changed it)",
    )
    head = render_text(comparison).splitlines()[0]
    assert head.endswith("in sync: 2 matching (1 under other version labels, the same content)")


def test_sotw_only_labels_differ_after_a_rejected_response() -> None:
    """Issue 33: Envoy applied part of a response it rejected (v2) and has had nothing to
    change since; the control plane's label is v3. Same content: in sync, labels said."""
    dump = config_dump(listeners=[active_listener(listener(), V2)], lds_version=V2)
    comparison = compare(dump, [report(listener(), "v3")])
    assert comparison.in_sync
    (lds,) = comparison.resources
    assert (lds.state, lds.labels_differ, lds.fields) == ("MATCH", True, ())
    assert f"labels: LDS version: {V2!r} != 'v3' (labels" in lds.notes[0]
    assert render_json(comparison)["labels_differ"] == 1


def test_labels_count_where_the_content_cannot_be_compared() -> None:
    """Without the control plane's content, the labels are all there is to compare."""
    dump = config_dump(listeners=[active_listener(listener(), V2)], lds_version=V2)
    unknown = report(None, "v3", type_url=LISTENER, name="listener_0")
    (lds,) = compare(dump, [unknown]).resources
    assert lds.state == "DIFFERS"
    assert lds.fields == (f"LDS version: {V2!r} != 'v3'",)
    assert not lds.labels_differ
    # The content differs: the fields say how, and the type's label is shown with them.
    (lds,) = compare(dump, [report(listener(20000), "v3")]).resources
    assert lds.state == "DIFFERS"
    assert lds.fields[0] == f"LDS version: {V2!r} != 'v3'"
    assert lds.fields[1].startswith("address.socket_address.port_value: 10000 != 20000")


def test_a_nack_of_another_resource_does_not_make_a_held_one_an_error() -> None:
    """Envoy applied a resource of a response it rejected for another: the control plane
    reports the NACK, Envoy holds the content meant. It matches, with a note."""
    dump = config_dump(listeners=[active_listener(listener())])
    nacked = report(listener(), config="ERROR", client="NACKED", error="cannot bind x")
    (lds,) = compare(dump, [nacked]).resources
    assert lds.state == "MATCH"
    assert lds.plane_error == "cannot bind x"
    assert "yet Envoy holds it as intended" in lds.notes[-1]
    # Envoy holding other content: the NACK is an error.
    (lds,) = compare(dump, [report(listener(20000), config="ERROR", client="NACKED")]).resources
    assert lds.state == "ERROR"


def test_delta_versions_are_per_resource() -> None:
    dump = config_dump(
        clusters=[{"version_info": V1, "cluster": cluster("a", kind="STATIC")}],
        api_type="DELTA_GRPC",
        cds_version="",
    )
    assert dump_protocol(dump) == "delta"
    assert states(dump, [report(cluster("a", kind="STATIC"), V1)]) == {("cds", "a"): "MATCH"}
    relabelled = compare(dump, [report(cluster("a", kind="STATIC"), V2)]).resources[0]
    assert (relabelled.state, relabelled.labels_differ) == ("MATCH", True)
    unknown = report(None, V2, type_url=CLUSTER, name="a")
    differs = compare(dump, [unknown]).resources[0]
    assert differs.state == "DIFFERS"
    assert differs.fields == (f"version: {V1!r} != {V2!r}",)


def test_a_warming_cluster_is_warming() -> None:
    dump = in_sync_dump()
    dump["configs"][1]["dynamic_warming_clusters"] = [
        {"version_info": V2, "cluster": cluster(timeout="2s")}
    ]
    dump["configs"][1]["version_info"] = V2  # Envoy accepted the response; it warms
    reports = [*in_sync_reports()[:2], report(cluster(timeout="2s"), V2), report(endpoints())]
    found = compare(dump, reports)
    (cds,) = [r for r in found.resources if r.short == "cds"]
    assert (cds.state, cds.envoy_holds) == ("WARMING", "active, warming")
    assert cds.fields == ("connect_timeout: '1s' != '2s'",)


def test_endpoints_of_clusters_without_eds_are_not_compared() -> None:
    dump = in_sync_dump()
    inline = envoy_endpoints()
    inline["cluster_name"] = "static_one"
    dump["configs"][1]["dynamic_active_clusters"].append(
        {"version_info": V1, "cluster": cluster("static_one", kind="STATIC")}
    )
    dump["configs"][2]["dynamic_endpoint_configs"].append({"endpoint_config": inline})
    reports = [*in_sync_reports(), report(cluster("static_one", kind="STATIC"))]
    assert compare(dump, reports).in_sync


def test_endpoint_differences_survive_envoys_defaults() -> None:
    dump = in_sync_dump()
    dump["configs"][2]["dynamic_endpoint_configs"] = [{"endpoint_config": envoy_endpoints(9090)}]
    (eds,) = [r for r in compare(dump, in_sync_reports()).resources if r.short == "eds"]
    assert eds.fields == (
        "endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value: 9090 != 8080",
    )


def test_a_name_that_does_not_exist_anywhere_matches() -> None:
    reports = [
        *in_sync_reports(),
        report(None, "", type_url=ROUTE, name="nowhere", config="SYNCED", client="DOES_NOT_EXIST"),
    ]
    assert compare(in_sync_dump(), reports).in_sync


def test_types_envoy_does_not_dump_are_listed_not_compared() -> None:
    runtime = TYPE_URL_PREFIX + "envoy.service.runtime.v3.Runtime"
    reports = [*in_sync_reports(), report(None, V1, type_url=runtime, name="rt")]
    comparison = compare(in_sync_dump(), reports)
    assert comparison.in_sync
    assert comparison.not_compared == (runtime,)


def test_field_diff_leaves() -> None:
    assert field_diff({"a": [1, 2]}, {"a": [1]}) == ["a[1]: 2 != <absent>"]
    assert field_diff({"a": 1}, {"a": 1.0}) == []
    assert field_diff({"a": True}, {"a": 1}) == ["a: True != 1"]
    assert field_diff({"b": {"c": "x"}}, {}) == ['b: {"c":"x"} != <absent>']
    assert field_diff({"key": "[redacted]"}, {"key": "hunter2"}) == []
    assert field_diff("x", "y") == ["(the resource): 'x' != 'y'"]


def test_normalise_drops_type_urls_on_both_sides() -> None:
    assert normalise(LISTENER, listener()) == normalise(LISTENER, {**listener(), "@type": "x"})
    assert "@type" not in json.dumps(normalise(LISTENER, listener()))
    assert normalise(ENDPOINT, envoy_endpoints()) == normalise(ENDPOINT, endpoints())


def test_secrets_are_read_from_the_dump() -> None:
    dump = in_sync_dump()
    secret = {"name": "cert", "generic_secret": {"secret": {"inline_string": "[redacted]"}}}
    dump["configs"][5]["dynamic_active_secrets"] = [
        {"name": "cert", "version_info": V1, "secret": {"@type": SECRET, **secret}}
    ]
    found = envoy_resources(dump)
    assert found[(SECRET, "cert")].active_version == V1
    plain = {"@type": SECRET, "name": "cert", "generic_secret": {"secret": {"inline_string": "x"}}}
    assert compare(dump, [*in_sync_reports(), report(plain)]).in_sync


def test_json_rendering() -> None:
    comparison = compare(in_sync_dump(), [*in_sync_reports()[:3]])
    document = json.loads(json.dumps(render_json(comparison)))
    assert document["in_sync"] is False
    assert document["counts"] == {"EXTRA": 1, "MATCH": 3}
    (extra,) = [r for r in document["resources"] if r["state"] == "EXTRA"]
    assert (extra["type"], extra["name"], extra["envoy_holds"]) == ("eds", "backend", "active")
    assert dump_node_id(in_sync_dump()) == "proxy-1"


def test_unreachable_sides_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    closed = free_port()
    argv = ["diff", "--server", f"127.0.0.1:{closed}", "--envoy-admin", f"127.0.0.1:{closed}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"xdscore: Envoy admin at 127.0.0.1:{closed}/config_dump")
    assert len(err.strip().splitlines()) == 1
