"""``xdscore analyze DIR``: exit codes 0/1/2, text and JSON output, on real YAML directories."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xdscore.cli import main

ROOT = Path(__file__).resolve().parents[2]

CLUSTERS = """\
# Two clusters whose endpoints come from EDS; several resources in one file.
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: backend_a
  type: EDS
  connect_timeout: 1s
  eds_cluster_config:
    eds_config: {ads: {}, resource_api_version: V3}
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: backend_b
  type: EDS
  connect_timeout: 1s
  eds_cluster_config:
    eds_config: {ads: {}, resource_api_version: V3}
"""

ENDPOINTS = """\
"@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
cluster_name: backend_a
endpoints:
  - locality: {region: local}
    lb_endpoints:
      - endpoint:
          address:
            socket_address: {address: 127.0.0.1, port_value: 8081}
---
"@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
cluster_name: backend_b
endpoints:
  - locality: {region: local}
    lb_endpoints:
      - endpoint:
          address:
            socket_address: {address: 127.0.0.1, port_value: 8082}
"""

LISTENERS = """\
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

ROUTES = """\
"@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
name: route_0
virtual_hosts:
  - name: demo
    domains: ["*"]
    routes:
      - match: {prefix: /b}
        route: {cluster: backend_b}
      - match: {prefix: /}
        route: {cluster: backend_a}
"""

UNUSED_ROUTES = """\
---
"@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
name: old_routes
virtual_hosts:
  - name: old
    domains: ["old.example.com"]
    routes:
      - match: {prefix: /}
        route: {cluster: backend_a}
"""


def _write(directory: Path, **files: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / f"{name}.yaml").write_text(text)
    return directory


def _good(directory: Path) -> Path:
    return _write(
        directory, clusters=CLUSTERS, endpoints=ENDPOINTS, listeners=LISTENERS, routes=ROUTES
    )


def test_the_demo_config_is_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(ROOT / "examples" / "demo-config")]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "6 resources: 0 error(s), 0 warning(s), 0 info" in captured.err


def test_exit_0_with_warnings_only(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    directory = _good(tmp_path / "config")
    (directory / "routes.yaml").write_text(ROUTES + UNUSED_ROUTES)
    assert main(["analyze", str(directory)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line == (
        f"{directory / 'routes.yaml'} (document 2): WARNING XDS004 route configuration "
        "'old_routes' is not used by any listener or scoped route configuration; "
        "no client will ask for it"
    )
    # --min-severity hides it, and the status is still 0.
    assert main(["analyze", str(directory), "--min-severity", "error"]) == 0
    assert capsys.readouterr().out == ""


# The connection manager of LISTENERS, as the API listener a gRPC client asks for.
GRPC_LISTENER = """\
"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: echo.test
api_listener:
  api_listener:
""" + textwrap.indent(textwrap.dedent(LISTENERS.split("typed_config:\n", 1)[1]), "    ")


def test_localities_without_weight_warned_only_when_grpc_clients_use_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The Envoy-only directory has no weights and nothing to say (see test_json_output_when_clean).
    directory = _good(tmp_path / "config")
    (directory / "grpc.yaml").write_text(GRPC_LISTENER)
    assert main(["analyze", str(directory)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{directory / 'endpoints.yaml'} (document {document}): WARNING XDS014 endpoints "
        f"'{name}': locality endpoints[0] has no load_balancing_weight; gRPC clients (API "
        "listener 'echo.test') ignore it, and fail RPCs with UNAVAILABLE if no other locality "
        "is left"
        for document, name in ((1, "backend_a"), (2, "backend_b"))
    ]
    # With weights, nothing.
    weighted = ENDPOINTS.replace(
        "  - locality: {region: local}\n",
        "  - locality: {region: local}\n    load_balancing_weight: 1\n",
    )
    (directory / "endpoints.yaml").write_text(weighted)
    assert main(["analyze", str(directory)]) == 0
    assert capsys.readouterr().out == ""


def test_exit_1_on_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    directory = _good(tmp_path / "config")
    (directory / "routes.yaml").write_text(ROUTES.replace("backend_b", "backend_c"))
    assert main(["analyze", str(directory)]) == 1
    captured = capsys.readouterr()
    (line,) = captured.out.splitlines()
    assert line == (
        f"{directory / 'routes.yaml'} (document 1): ERROR XDS001 route configuration "
        "'route_0' refers to cluster 'backend_c' (virtual_hosts[demo].routes[0].cluster), "
        "which does not exist"
    )
    assert "1 error(s)" in captured.err
    # Errors set the status whatever --min-severity shows.
    assert main(["analyze", str(directory), "--min-severity", "error"]) == 1


def test_exit_1_on_a_duplicate_across_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    directory = _good(tmp_path / "config")
    backend_b_again = CLUSTERS[CLUSTERS.rindex('- "@type"') :].replace("1s", "2s")
    _write(directory / "team-b", more_clusters=backend_b_again)
    assert main(["analyze", str(directory)]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"{directory / 'team-b' / 'more_clusters.yaml'} (document 1) [0]: ")
    assert "ERROR XDS002 cluster 'backend_b' is defined more than once" in line
    assert f"first defined in {directory / 'clusters.yaml'} (document 1) [1]" in line


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param({"broken": "name: [unclosed\n"}, "cannot be read", id="yaml-syntax"),
        pytest.param(
            {"unknown": '"@type": type.googleapis.com/envoy.config.cluster.v9.Cluster\nname: x\n'},
            "no protobuf message is known",
            id="unknown-type",
        ),
        pytest.param(
            {"invalid": CLUSTERS.replace("connect_timeout: 1s", "connect_timeout: soon")},
            "invalid cds resource",
            id="invalid-json-mapping",
        ),
        pytest.param(
            {"fields": CLUSTERS.replace("connect_timeout", "connection_timeout")},
            "invalid cds resource",
            id="unknown-field",
        ),
        pytest.param({"nottyped": "- just a string\n"}, "expected a resource mapping", id="shape"),
    ],
)
def test_exit_1_when_a_file_does_not_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, files: dict[str, str], expected: str
) -> None:
    """What serve refuses, with the status serve exits with."""
    directory = _good(tmp_path / "config")
    _write(directory, **files)
    assert main(["analyze", str(directory)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"cannot analyze {directory}" in captured.err
    (name,) = files
    assert str(directory / f"{name}.yaml") in captured.err
    assert expected in captured.err


def test_exit_2_when_there_is_no_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["analyze", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == (
        f"xdscore: cannot analyze {tmp_path / 'missing'}: no such directory\n"
    )
    (tmp_path / "file").write_text("")
    assert main(["analyze", str(tmp_path / "file")]) == 2
    assert "not a directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze"],
        ["analyze", "DIR", "--format", "xml"],
        ["analyze", "DIR", "--min-severity", "fatal"],
    ],
)
def test_exit_2_on_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("xdscore analyze: ")


def test_json_output(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    directory = _good(tmp_path / "config")
    routes = ROUTES.replace("backend_b", "backend_c") + UNUSED_ROUTES
    dynamic = routes.replace(
        "route: {cluster: backend_a}\n", "route: {cluster_header: x-cluster}\n", 1
    )
    (directory / "routes.yaml").write_text(dynamic)
    assert main(["analyze", str(directory), "--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["errors"] == 1
    assert document["warnings"] == 1
    assert [(d["code"], d["severity"], d["name"]) for d in document["diagnostics"]] == [
        ("XDS001", "error", "route_0"),
        ("XDS004", "warning", "old_routes"),
        ("XDS005", "info", "route_0"),
    ]
    first = document["diagnostics"][0]
    assert first == {
        "code": "XDS001",
        "severity": "error",
        "message": "route configuration 'route_0' refers to cluster 'backend_c' "
        "(virtual_hosts[demo].routes[0].cluster), which does not exist",
        "type_url": "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
        "name": "route_0",
        "where": f"{directory / 'routes.yaml'} (document 1)",
        "field": "virtual_hosts[demo].routes[0].cluster",
    }
    # --min-severity filters the list, not the counts.
    assert main(["analyze", str(directory), "--format", "json", "--min-severity", "error"]) == 1
    filtered = json.loads(capsys.readouterr().out)
    assert [d["code"] for d in filtered["diagnostics"]] == ["XDS001"]
    assert (filtered["errors"], filtered["warnings"]) == (1, 1)


def test_json_output_when_clean(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["analyze", str(_good(tmp_path)), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"diagnostics": [], "errors": 0, "warnings": 0}


def test_console_entry_point(tmp_path: Path) -> None:
    directory = _good(tmp_path / "config")
    (directory / "routes.yaml").write_text(ROUTES.replace("backend_a", "backend_z"))
    command = [sys.executable, "-m", "xdscore", "analyze", str(directory), "--format", "json"]
    failed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert failed.returncode == 1, failed.stderr
    document = json.loads(failed.stdout)
    assert document["errors"] == 1
    assert document["diagnostics"][0]["code"] == "XDS001"
    assert "backend_z" in document["diagnostics"][0]["message"]

    (directory / "routes.yaml").write_text(ROUTES)
    clean = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["errors"] == 0
