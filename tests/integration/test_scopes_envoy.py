"""Scopes with real Envoys: `xdscore serve DIR` with a scopes.yaml, two Envoys in two scopes.

Each Envoy receives only its scope's listener and clusters and serves its own traffic;
widening scope a's egress to the shared namespace adds the shared cluster (and the virtual
host routing to it) to Envoy a alone, and narrowing it again removes them, with requests
flowing through Envoy a all along and none answered other than 200.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from envoy.config.route.v3 import route_components_pb2, route_pb2
from google.protobuf import json_format
from google.protobuf.message import Message

from xdscore import builders
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port

from ..factories import wait_until
from ._envoy_support import cluster_versions, traffic_running, wait_traffic
from .test_config_server import serve

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(120)]


def _json(message: Message) -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/" + message.DESCRIPTOR.full_name,
        **json_format.MessageToDict(message),
    }


def _routes(name: str, default: str, shared: str) -> route_pb2.RouteConfiguration:
    """``default`` for every host, ``shared`` for the host "shared" (its own virtual host)."""
    config = route_pb2.RouteConfiguration(name=name)
    for host, domain, cluster in (("shared", "shared", shared), ("default", "*", default)):
        vhost = route_components_pb2.VirtualHost(name=host, domains=[domain])
        route = vhost.routes.add()
        route.match.prefix = "/"
        route.route.cluster = cluster
        config.virtual_hosts.append(vhost)
    return config


def _directory(root: Path, ports: dict[str, int], backends: dict[str, int]) -> None:
    resources: list[Message] = []
    for cluster, port in backends.items():
        resources.append(builders.eds_cluster(cluster))
        resources.append(builders.load_assignment(cluster, [("127.0.0.1", port)]))
    for team in ("a", "b"):
        resources.append(_routes(f"routes-{team}", f"{team}/app", "shared/app"))
        resources.append(builders.http_listener(f"ingress-{team}", ports[team], f"routes-{team}"))
    (root / "mesh.json").write_text(json.dumps({"resources": [_json(m) for m in resources]}))


def _scopes(a_egress: list[str]) -> str:
    return json.dumps(
        {
            "scopes": [
                {"name": "a", "nodes": {"cluster": "a"}, "egress": a_egress,
                 "listeners": ["ingress-a"]},
                {"name": "b", "nodes": {"id": "envoy-b*"}, "egress": ["b/*"],
                 "listeners": ["ingress-b"]},
            ]
        }
    )  # fmt: skip


def _listeners(dump: dict[str, Any]) -> set[str]:
    for config in dump["configs"]:
        if config["@type"].endswith(".ListenersConfigDump"):
            return {item["name"] for item in config.get("dynamic_listeners", [])}
    return set()


async def _get(port: int, host: str) -> tuple[int, str]:
    def fetch() -> tuple[int, str]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            connection.request("GET", "/", headers={"Host": host})
            response = connection.getresponse()
            return response.status, response.read().decode(errors="replace")
        finally:
            connection.close()

    try:
        return await anyio.to_thread.run_sync(fetch)
    except OSError:
        return 0, ""


async def test_two_scopes_and_a_scope_widened_and_narrowed_under_load(tmp_path: Path) -> None:
    with HttpBackend("A") as a, HttpBackend("B") as b, HttpBackend("S") as shared:
        ports = {"a": free_port(), "b": free_port()}
        backends = {"a/app": a.port, "b/app": b.port, "shared/app": shared.port}
        _directory(tmp_path, ports, backends)
        (tmp_path / "scopes.yaml").write_text(_scopes(["a/*"]))
        xds = free_port()
        envoy_a = Envoy(envoy_bootstrap(xds_port=xds, node_id="envoy-a", node_cluster="a"))
        envoy_b = Envoy(envoy_bootstrap(xds_port=xds, node_id="envoy-b", node_cluster="b"))
        async with serve(tmp_path, xds) as served, envoy_a, envoy_b:
            await wait_traffic(envoy_a, ports["a"], "A")
            await wait_traffic(envoy_b, ports["b"], "B")
            assert set(cluster_versions(await envoy_a.config_dump())) == {"a/app"}
            assert set(cluster_versions(await envoy_b.config_dump())) == {"b/app"}
            # Each sees its own listener only; the shared host is trimmed away.
            assert _listeners(await envoy_a.config_dump()) == {"ingress-a"}
            assert _listeners(await envoy_b.config_dump()) == {"ingress-b"}
            assert await _get(ports["a"], "shared") == (200, "A")

            async with traffic_running(ports["a"], workers=2) as traffic:
                await traffic.flowing(10)
                (tmp_path / "scopes.yaml").write_text(_scopes(["a/*", "shared/*"]))

                async def widened() -> bool:
                    return await _get(ports["a"], "shared") == (200, "S")

                await wait_until(widened, timeout=20, interval=0.1, what="the shared host")
                assert set(cluster_versions(await envoy_a.config_dump())) == {
                    "a/app",
                    "shared/app",
                }
                assert set(cluster_versions(await envoy_b.config_dump())) == {"b/app"}
                await traffic.flowing(10, since=anyio.current_time())
                (tmp_path / "scopes.yaml").write_text(_scopes(["a/*"]))

                async def narrowed() -> bool:
                    clusters = set(cluster_versions(await envoy_a.config_dump()))
                    return clusters == {"a/app"}

                await wait_until(narrowed, timeout=20, interval=0.1, what="shared/app removed")
                assert await _get(ports["a"], "shared") == (200, "A")
                await traffic.flowing(10, since=anyio.current_time())
            assert traffic.failures() == [], traffic.failures()[:5]
            assert traffic.bodies() == {"A"}
            assert served.count("applied 2 scope(s)") == 2, served.lines
