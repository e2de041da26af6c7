"""Envoy's field constraints (protoc-gen-validate rules in the descriptors), checked by
``analyze`` as XDS013 and refused by the config loader before anything is served."""

from __future__ import annotations

from pathlib import Path

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from google.protobuf import json_format

from xdscore import Snapshot
from xdscore import builders as b
from xdscore.analysis import FIELD_CONSTRAINT, analyze
from xdscore.config import ConfigError, load_directory, read_directory
from xdscore.wire._constraints import violations
from xdscore.wire._messages import decode_resource, make_resource

ROOT = Path(__file__).resolve().parents[2]

GOOD_CLUSTER = {
    "name": "c",
    "type": "STATIC",
    "connect_timeout": "1s",
    "load_assignment": {
        "cluster_name": "c",
        "endpoints": [
            {
                "lb_endpoints": [
                    {
                        "endpoint": {
                            "address": {
                                "socket_address": {"address": "127.0.0.1", "port_value": 8080}
                            }
                        }
                    }
                ]
            }
        ],
    },
}
SOCKET = "load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address"


def cluster_with(path: str, value: object) -> cluster_pb2.Cluster:
    body = json_format.MessageToDict(
        json_format.ParseDict(GOOD_CLUSTER, cluster_pb2.Cluster()), preserving_proto_field_name=True
    )
    target = body
    *parents, last = path.split(".")
    for part in parents:
        name, _, index = part.partition("[")
        target = target.setdefault(name, {})
        if index:
            target = target[int(index.rstrip("]"))]
    target[last] = value
    return json_format.ParseDict(body, cluster_pb2.Cluster())


# One planted violation per rule family: each of these Envoy NACKs (see
# tests/integration/test_constraints_envoy.py for the real Envoy's verdict).
FAMILIES = [
    ("string length", f"{SOCKET}.address", "", "string.min_len"),
    ("numeric range", f"{SOCKET}.port_value", 70000, "uint32.lte"),
    ("duration range", "connect_timeout", "-1s", "duration.gt"),
    ("duration range (zero)", "connect_timeout", "0s", "duration.gt"),
    ("enum defined", "type", 9, "enum.defined_only"),
    (
        "required message",
        "health_checks",
        [
            {
                "interval": "1s",
                "tcp_health_check": {},
                "unhealthy_threshold": 1,
                "healthy_threshold": 1,
            }
        ],
        "duration.required",
    ),
    (
        "required oneof",
        "health_checks",
        [{"interval": "1s", "timeout": "1s", "unhealthy_threshold": 1, "healthy_threshold": 1}],
        "oneof required",
    ),
    ("map key length", "metadata", {"filter_metadata": {"": {}}}, "string.min_len"),
]


@pytest.mark.parametrize(
    ("family", "path", "value", "rule"), FAMILIES, ids=[f[0] for f in FAMILIES]
)
def test_each_rule_family_is_caught_by_analyze(
    family: str, path: str, value: object, rule: str
) -> None:
    report = analyze(Snapshot([cluster_with(path, value)]))
    [diagnostic] = [d for d in report if d.code == FIELD_CONSTRAINT]
    assert rule in diagnostic.message
    assert diagnostic.field is not None
    assert report.has_errors


def test_repeated_min_items_on_a_route_configuration() -> None:
    routes = b.route_configuration("r", [("/", "c")])
    del routes.virtual_hosts[0].domains[:]
    [found] = violations(routes)
    assert (found.field, found.rule) == ("virtual_hosts[0].domains", "repeated.min_items")


def test_the_connect_timeout_envoy_nacks_in_the_sotw_test_is_caught() -> None:
    # tests/integration/test_envoy_sotw.py pushes exactly this (0s) and sees Envoy NACK it
    # with "ConnectTimeout ... greater than".
    cluster = b.eds_cluster("backend_a", connect_timeout=0.0)
    [found] = violations(cluster)
    assert (found.field, found.rule) == ("connect_timeout", "duration.gt")


def test_typed_configs_are_checked_inside_their_any() -> None:
    listener = b.http_listener("l", 10000, "r")
    manager_any = listener.filter_chains[0].filters[0].typed_config
    from envoy.extensions.filters.network.http_connection_manager.v3 import (
        http_connection_manager_pb2 as hcm_pb2,
    )

    manager = hcm_pb2.HttpConnectionManager.FromString(manager_any.value)
    manager.stat_prefix = ""
    manager_any.Pack(manager)
    [found] = violations(listener)
    assert found.field == "filter_chains[0].filters[0].typed_config.stat_prefix"
    assert found.rule == "string.min_len"


def test_a_member_of_a_oneof_is_checked_only_when_chosen() -> None:
    # RouteMatch's path_separated_prefix has a pattern, safe_regex is required: neither
    # applies to a route matching by prefix.
    assert list(violations(b.route_configuration("r", [("/", "c")]))) == []


def test_the_loader_refuses_a_violating_directory(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        '"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster\n'
        "name: c\ntype: STATIC\nconnect_timeout: -1s\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_directory(tmp_path)
    [problem] = caught.value.problems
    assert "XDS013" in problem.message
    assert "connect_timeout must be greater than 0s, is -1s" in problem.message


def test_the_cli_analyze_exits_1_on_a_violation(tmp_path: Path) -> None:
    from xdscore.cli import main

    (tmp_path / "c.yaml").write_text(
        '"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster\n'
        "name: c\ntype: STATIC\nconnect_timeout: 1s\nload_assignment:\n  cluster_name: c\n"
        "  endpoints: {lb_endpoints: {endpoint: {address: {socket_address: "
        "{address: 127.0.0.1, port_value: 70000}}}}}\n"
    )
    assert main(["analyze", str(tmp_path)]) == 1


def valid_resources() -> list[object]:
    return [
        b.eds_cluster("a"),
        b.load_assignment("a", [("127.0.0.1", 8080), ("127.0.0.2", 8081)]),
        b.route_configuration("r", [("/", "a"), ("/b", "a")]),
        b.http_listener("l", 10000, "r"),
        b.api_listener("api", "r"),
        cluster_with("connect_timeout", "0.25s"),
    ]


def test_valid_resources_pass() -> None:
    for message in valid_resources():
        assert list(violations(message)) == [], message  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "directory", sorted({p.parent for p in ROOT.glob("examples/**/*.yaml")}), ids=str
)
def test_the_examples_pass(directory: Path) -> None:
    found, problems = read_directory(directory)
    assert problems == []
    assert [d for d in analyze(found) if d.code == FIELD_CONSTRAINT] == []


def test_the_relaxed_fixtures_pass(tmp_path: Path) -> None:
    from tests.integration.test_config_server import RELAXED_CDS, RELAXED_LDS

    (tmp_path / "lds.yaml").write_text(RELAXED_LDS.replace("LISTENER", "10000"))
    (tmp_path / "cds.yaml").write_text(RELAXED_CDS.replace("BACKEND", "8080"))
    found, problems = read_directory(tmp_path)
    assert problems == []
    assert [str(d) for d in analyze(found) if d.code == FIELD_CONSTRAINT] == []


def test_checking_is_cached_per_descriptor() -> None:
    from xdscore.wire import _constraints

    _constraints._plan.cache_clear()
    resource = make_resource(b.eds_cluster("a"))
    list(violations(decode_resource(resource.type_url, resource.body)))
    first = _constraints._plan.cache_info()
    list(violations(b.eds_cluster("b")))
    again = _constraints._plan.cache_info()
    assert again.misses == first.misses
    assert again.hits > first.hits
