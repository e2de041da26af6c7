"""``xdscore bootstrap envoy|grpc``: a real Envoy and gRPC's own xDS client, each started from
exactly what the command prints, take their configuration from xdscore and serve traffic."""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from xdscore import Http2Transport, Snapshot, SnapshotCache, XdsServer, same_for_all
from xdscore import builders as b
from xdscore.testing import Envoy, HttpBackend, free_port, http_get
from xdscore.transport import CertificateFiles

from ..factories import wait_until
from ..tls_support import CertificateAuthority
from .test_grpc_xds_client import (
    HELPER,
    METHOD,
    NODE_ID,
    TARGET,
    Recorder,
    XdsClient,
    grpc_backend,
    snapshot,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def xdscore(*args: str) -> str:
    """Run ``python -m xdscore ARGS``; its stdout (it must succeed)."""
    done = await anyio.run_process([sys.executable, "-m", "xdscore", *args], check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def mutual_tls(directory: Path, client: str) -> tuple[ssl.SSLContext, list[str]]:
    """A server context requiring client certificates of a new CA, and the bootstrap
    flags that give the client that CA, a certificate and its key."""
    ca = CertificateAuthority()
    ca_file = ca.write(directory)
    server = ca.server("127.0.0.1").write(directory, "server")
    issued = ca.client(f"spiffe://test/{client}").write(directory, "client")
    context = CertificateFiles(server.cert, server.key, client_ca=ca_file).context
    flags = ["--tls-ca", str(ca_file), "--tls-cert", str(issued.cert)]
    return context, [*flags, "--tls-key", str(issued.key)]


def web_snapshot(listener_port: int, backend_port: int) -> Snapshot:
    return Snapshot(
        [
            b.eds_cluster("backend"),
            b.load_assignment("backend", [("127.0.0.1", backend_port)]),
            b.http_listener("listener_0", listener_port, "route_0"),
            b.route_configuration("route_0", [("/", "backend")]),
        ]
    )


async def served_through(envoy: Envoy, port: int, body: str) -> None:
    async def answers() -> bool:
        try:
            return (await http_get("127.0.0.1", port))[2] == body
        except OSError:
            return False

    try:
        await wait_until(answers, timeout=20, interval=0.1, what=f"{body!r} through Envoy")
    except TimeoutError:
        raise AssertionError(f"Envoy never served {body!r}:\n{envoy.log[-3000:]}") from None


@pytest.mark.envoy
@pytest.mark.parametrize(
    ("flags", "parse"),
    [
        pytest.param([], yaml.safe_load, id="sotw-yaml-no-cluster"),
        pytest.param(["--cluster", "edge"], yaml.safe_load, id="sotw-yaml"),
        pytest.param(
            ["--cluster", "edge", "--delta", "--format", "json"], json.loads, id="delta-json"
        ),
        pytest.param(["--cluster", "edge", "--tls"], yaml.safe_load, id="mtls-yaml"),
    ],
)
async def test_envoy_runs_from_the_printed_bootstrap(
    flags: list[str], parse: Any, tmp_path: Path
) -> None:
    tls = "--tls" in flags
    flags = [flag for flag in flags if flag != "--tls"]
    context, tls_flags = mutual_tls(tmp_path, "envoy") if tls else (None, [])
    flags += tls_flags
    with HttpBackend("through envoy") as backend:
        listener = free_port()
        cache = SnapshotCache(group=same_for_all)
        cache.set_snapshot(None, web_snapshot(listener, backend.port))
        server = XdsServer(cache)
        async with Http2Transport(server) as transport:
            port = await transport.start("127.0.0.1", 0, ssl_context=context)
            printed = await xdscore(
                "bootstrap", "envoy", "--server", f"127.0.0.1:{port}", "--node", "edge-1",
                "--admin", "127.0.0.1:0", *flags,
            )  # fmt: skip
            bootstrap = parse(printed)
            async with Envoy(bootstrap) as envoy:
                await served_through(envoy, listener, "through envoy")
                (status,) = server.status()
                assert status.node_id == "edge-1"
                assert status.protocol == ("delta" if "--delta" in flags else "sotw")
                if tls:
                    assert status.identity is not None
                info = json.loads(await envoy.admin("/server_info"))
                assert info["node"]["id"] == "edge-1"
                # Without --cluster, the node id: Envoy does not start over ADS without one.
                assert info["node"]["cluster"] == ("edge" if "--cluster" in flags else "edge-1")


@pytest.mark.grpc_client
@pytest.mark.parametrize("tls", [False, True], ids=["insecure", "mtls"])
async def test_grpc_client_runs_from_the_printed_bootstrap(tls: bool, tmp_path: Path) -> None:
    context, flags = mutual_tls(tmp_path, "grpc") if tls else (None, [])
    with grpc_backend("backend-a") as backend_port:
        cache = SnapshotCache(group=same_for_all)
        cache.set_snapshot(None, snapshot("cluster-a", {"cluster-a": backend_port}))
        recorder = Recorder()
        server = XdsServer(cache, callbacks=recorder)
        async with Http2Transport(server) as transport:
            port = await transport.start("127.0.0.1", 0, ssl_context=context)
            printed = await xdscore(
                "bootstrap", "grpc", "--server", f"127.0.0.1:{port}", "--node", NODE_ID, *flags
            )
            bootstrap_file = tmp_path / "xds-bootstrap.json"
            bootstrap_file.write_text(printed)
            stderr_path = tmp_path / "grpc_client.stderr"
            with stderr_path.open("wb") as stderr:
                process = await asyncio.create_subprocess_exec(
                    sys.executable, str(HELPER), "0", TARGET, METHOD, str(bootstrap_file),
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=stderr,
                )  # fmt: skip
            client = XdsClient(process, stderr_path)
            try:
                assert await client.read_line(timeout=20) == "READY"
                await client.call_until("backend-a", within=20, recorder=recorder)
                nodes = {s.node.id for s in recorder.streams if s.node is not None}
                assert nodes == {NODE_ID}
                if tls:
                    assert all(s.identity is not None for s in recorder.streams)
            finally:
                if process.returncode is None:
                    process.kill()
                await process.wait()
