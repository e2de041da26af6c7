"""The config loader reads YAML and JSON as Envoy does: its relaxations, and nothing more,
with errors that name the file, the document, the field path, the line and a suggestion."""

from __future__ import annotations

from pathlib import Path

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from xdscore.config import Problem, read_directory
from xdscore.config._envoy_json import classify_plain
from xdscore.wire._messages import decode_resource

CLUSTER = '"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster\n'

# The canonical dynamic-config-fs lds.yaml of Envoy's examples: 'filters' is one mapping.
LDS = """\
resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: listener_0
  address:
    socket_address:
      address: 0.0.0.0
      port_value: 10000
  filter_chains:
  - filters:
      name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": HCM
        stat_prefix: ingress_http
        codec_type: auto
        http_filters:
        - name: envoy.filters.http.router
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
        route_config:
          name: local_route
          virtual_hosts:
          - name: local_service
            domains: "*"
            routes:
            - match:
                prefix: "/"
              route:
                cluster: example_proxy_cluster
""".replace(
    "HCM",
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
    "HttpConnectionManager",
)


def load_one(tmp_path: Path, text: str, name: str = "r.yaml") -> object:
    (tmp_path / name).write_text(text)
    found, problems = read_directory(tmp_path)
    assert problems == [], problems
    [(_, resource)] = found
    return decode_resource(resource.type_url, resource.body)


def problems_of(tmp_path: Path, text: str, name: str = "r.yaml") -> list[Problem]:
    (tmp_path / name).write_text(text)
    _, problems = read_directory(tmp_path)
    return problems


def cluster(tmp_path: Path, text: str) -> cluster_pb2.Cluster:
    message = load_one(tmp_path, CLUSTER + "name: c\n" + text)
    assert isinstance(message, cluster_pb2.Cluster)
    return message


# -- what Envoy accepts beyond the proto3 JSON mapping --------------------------------------


def test_the_dynamic_config_fs_lds_yaml_loads(tmp_path: Path) -> None:
    listener = load_one(tmp_path, LDS)
    assert isinstance(listener, listener_pb2.Listener)
    [chain] = listener.filter_chains
    [network_filter] = chain.filters  # a single mapping for a repeated field
    assert network_filter.name == "envoy.filters.network.http_connection_manager"
    manager = hcm_pb2.HttpConnectionManager.FromString(network_filter.typed_config.value)
    assert manager.codec_type == hcm_pb2.HttpConnectionManager.AUTO  # lower case
    assert list(manager.route_config.virtual_hosts[0].domains) == ["*"]  # a single string


@pytest.mark.parametrize("spelling", ["strict_dns", "Strict_Dns", "STRICT_DNS", "1"])
def test_enum_values_in_any_case_or_by_number(tmp_path: Path, spelling: str) -> None:
    assert cluster(tmp_path, f"type: {spelling}\n").type == cluster_pb2.Cluster.STRICT_DNS


def test_nested_lists_are_flattened_and_nulls_are_default_elements(tmp_path: Path) -> None:
    message = cluster(
        tmp_path,
        "load_assignment:\n  cluster_name: c\n  endpoints:\n  - [{priority: 1}, {priority: 2}]\n"
        "  - ~\n",
    )
    assert [e.priority for e in message.load_assignment.endpoints] == [1, 2, 0]


@pytest.mark.parametrize(("text", "expected"), [('"yes"', True), ('"f"', False), ("on", True),
                                                ("N", False), ('"1"', True)])  # fmt: skip
def test_booleans_as_yaml_cpp_and_protobuf_read_them(
    tmp_path: Path, text: str, expected: bool
) -> None:
    assert cluster(tmp_path, f"respect_dns_ttl: {text}\n").respect_dns_ttl is expected


def test_well_known_types_as_their_plain_messages(tmp_path: Path) -> None:
    message = cluster(
        tmp_path,
        "dns_refresh_rate: {seconds: 5, nanos: 500000000}\n"
        "per_connection_buffer_limit_bytes: {value: 1024}\n",
    )
    assert message.dns_refresh_rate.ToMilliseconds() == 5500
    assert message.per_connection_buffer_limit_bytes.value == 1024


def test_ignore_tagged_keys_hold_anchors_and_are_dropped(tmp_path: Path) -> None:
    message = cluster(tmp_path, "!ignore defaults: &timeout 0.25s\nconnect_timeout: *timeout\n")
    assert message.connect_timeout.ToMilliseconds() == 250


def test_scalars_are_typed_as_envoy_types_them(tmp_path: Path) -> None:
    # Floats, dates and integers beyond int32 stay strings (the field's type converts them);
    # 0x and leading-zero integers are hex and octal, as yaml-cpp reads them.
    assert classify_plain("2024-01-01") == classify_plain("1.5") == "tag:yaml.org,2002:str"
    message = cluster(
        tmp_path,
        "alt_stat_name: 2024-01-01\nper_connection_buffer_limit_bytes: 0x400\n"
        "max_requests_per_connection: 010\n"
        "metadata: {filter_metadata: {m: {weight: 1.5, big: 12345678901, count: 7}}}\n",
    )
    assert message.alt_stat_name == "2024-01-01"
    assert message.per_connection_buffer_limit_bytes.value == 1024
    assert message.max_requests_per_connection.value == 8
    fields = message.metadata.filter_metadata["m"].fields
    assert fields["weight"].string_value == "1.5"
    assert fields["big"].string_value == "12345678901"
    assert fields["count"].number_value == 7


def test_json_files_keep_their_types(tmp_path: Path) -> None:
    message = load_one(
        tmp_path,
        '{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "c", '
        '"type": "logical_dns", "connectTimeout": "2s", '
        '"metadata": {"filterMetadata": {"m": {"weight": 1.5}}}}',
        name="c.json",
    )
    assert isinstance(message, cluster_pb2.Cluster)
    assert message.type == cluster_pb2.Cluster.LOGICAL_DNS
    assert message.metadata.filter_metadata["m"].fields["weight"].number_value == 1.5


# -- and nothing more: each error names the file, document, field, line, and a suggestion ---


def test_a_misspelt_field_is_refused_with_its_path_line_and_a_suggestion(tmp_path: Path) -> None:
    text = LDS.replace("stat_prefix: ingress_http", "stat_prefx: ingress_http")
    [problem] = problems_of(tmp_path, text, name="lds.yaml")
    assert problem.where == f"{tmp_path / 'lds.yaml'} (document 1) [0]"
    assert problem.line == 13
    assert problem.field == "filter_chains[0].filters[0].typed_config.stat_prefx"
    assert "did you mean 'stat_prefix'?" in problem.message
    assert "line 13: filter_chains[0].filters[0].typed_config.stat_prefx" in str(problem)


def test_every_problem_of_a_resource_is_reported(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        "---\n" + CLUSTER + "name: c\ntype: strict_dsn\nconect_timeout: 1s\n",
    )
    assert [(p.line, p.field) for p in problems] == [(4, "type"), (5, "conect_timeout")]
    assert "(document 1)" in problems[0].where
    assert "did you mean 'STRICT_DNS'?" in problems[0].message
    assert "did you mean 'connect_timeout'?" in problems[1].message


def test_errors_in_a_later_document_name_it_and_its_line(tmp_path: Path) -> None:
    text = CLUSTER + "name: a\n---\n" + CLUSTER + "name: b\nlb_policy: fastest\n"
    [problem] = problems_of(tmp_path, text)[-1:]
    assert problem.where.endswith("(document 2)")
    assert (problem.line, problem.field) == (6, "lb_policy")
    assert "not a value of envoy.config.cluster.v3.Cluster.LbPolicy" in problem.message


@pytest.mark.parametrize(
    ("text", "field", "says"),
    [
        ("name: 123\n", "name", "expected a string, got the number 123"),
        ("name: yes\n", "name", "expected a string, got the boolean true"),
        ("name: c\nrespect_dns_ttl: maybe\n", "respect_dns_ttl", "expected true or false"),
        ("name: c\ntype: 1.5\n", "type", "'1.5' is not a value"),
        ("name: c\nload_assignment: [1]\n", "load_assignment", "expected a mapping"),
        (
            "name: c\neds_cluster_config: {eds_config: {ads: {}, path: /x}}\n",
            "eds_cluster_config.eds_config.path",
            "only one field of the oneof 'config_source_specifier'",
        ),
        (
            "name: c\ntransport_socket: {name: t, typed_config: {name: x}}\n",
            "transport_socket.typed_config",
            "needs its '@type'",
        ),
        (
            "name: c\ntransport_socket: {name: t, typed_config: "
            "{'@type': type.googleapis.com/no.such.Message}}\n",
            "transport_socket.typed_config",
            "--descriptors",
        ),
    ],
)
def test_what_envoy_refuses_is_refused(tmp_path: Path, text: str, field: str, says: str) -> None:
    [problem] = problems_of(tmp_path, CLUSTER + text)
    assert problem.field == field
    assert says in problem.message


def test_an_unknown_field_is_refused_even_in_camel_case(tmp_path: Path) -> None:
    [problem] = problems_of(tmp_path, CLUSTER + "name: c\nconnectTimeot: 1s\n")
    assert problem.field == "connectTimeot"
    assert "did you mean 'connect_timeout'?" in problem.message


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("connect_timeout: 5 s\n", "connect_timeout"),
        ("connect_timeout: +5s\n", "connect_timeout"),
        ("connect_timeout: 1_0s\n", "connect_timeout"),
        ("connect_timeout: 0.0000000001s\n", "connect_timeout"),
        ("per_connection_buffer_limit_bytes: 1_000\n", "per_connection_buffer_limit_bytes"),
        ("per_connection_buffer_limit_bytes: ' 5'\n", "per_connection_buffer_limit_bytes"),
        ("common_lb_config: {healthy_panic_threshold: {value: 1_0.5}}\n",
         "common_lb_config.healthy_panic_threshold.value"),
    ],
)  # fmt: skip
def test_what_json_format_takes_but_envoy_does_not_is_refused(
    tmp_path: Path, text: str, field: str
) -> None:
    [problem] = problems_of(tmp_path, CLUSTER + "name: c\n" + text)
    assert problem.field == field


def test_numbers_in_strings_as_envoy_reads_them(tmp_path: Path) -> None:
    message = cluster(
        tmp_path,
        "connect_timeout: '-0.5s'\nper_connection_buffer_limit_bytes: '+7'\n"
        "common_lb_config: {healthy_panic_threshold: {value: '1e1'}}\n"
        "lb_subset_config: {}\n",
    )
    assert message.connect_timeout.ToMilliseconds() == -500
    assert message.per_connection_buffer_limit_bytes.value == 7
    assert message.common_lb_config.healthy_panic_threshold.value == 10
