"""`xdscore serve` over mutual TLS with nodes bound to SPIFFE IDs, against a real Envoy.

One control plane (a subprocess, as users run it) and one Envoy serve the whole module:
the Envoy presents a client certificate whose SPIFFE ID matches its node id, converges and
carries traffic. Then clients that must be refused try, one per test: no client
certificate, a certificate from another CA, an expired one, plaintext gRPC, and a valid
certificate claiming another node. After each, the healthy Envoy still gets a pushed
change (a route edit it shows in its traffic). Last, the server's certificate files are
replaced mid-run: a new connection gets the new certificate, while Envoy's established
stream goes on (same connection) and keeps receiving pushes.

Two tests stand on their own, with a server in this process: rotation through a
Kubernetes-style secret volume (every rotation is seen, not only the first), and gRPC's own
xDS client with the ``tls`` channel credentials docs/security.md shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs
import grpc
import pytest

from xdscore import CLUSTER, Http2Transport, Snapshot, SnapshotCache, XdsServer, same_for_all
from xdscore import builders as b
from xdscore.server import SpiffeNodePolicy
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get
from xdscore.transport import CertificateFiles, server_ssl_context
from xdscore.wire import DiscoveryRequest, encode_request, make_node

from ..factories import wait_until
from ..fault._clients import ADS, Failure, RawCall
from ..fault.test_bad_clients import _grpc_settled  # noqa: F401  (autouse)
from ..tls_support import CertificateAuthority, Issued, PemFiles, serial_of
from .test_config_server import Served, body, render, wait_for_body

pytestmark = [pytest.mark.anyio, pytest.mark.envoy, pytest.mark.timeout(60)]

SPIFFE_TEMPLATE = "spiffe://{trust_domain}/ns/{namespace}/sa/{account}"
NODE_TEMPLATE = "{account}.{namespace}"
TRUST_DOMAIN = "example.org"


def spiffe_id(account: str, namespace: str = "shop") -> str:
    return f"spiffe://{TRUST_DOMAIN}/ns/{namespace}/sa/{account}"


EDGE = spiffe_id("edge")
"""The healthy Envoy's identity; its node id is ``edge.shop``."""
DENIED = 'xdscore_refused_streams_total{reason="permission_denied"}'


@attrs.define
class Secured:
    """The control plane, its Envoy and what the tests need to reach them."""

    served: Served
    envoy: Envoy
    ca: CertificateAuthority
    certs: Path
    config: Path
    xds_port: int
    listener_port: int
    admin_port: int
    routed_to: str = "A"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.xds_port}"

    async def still_served(self) -> None:
        """Edit the route to the other backend; the healthy Envoy's traffic follows."""
        routes = self.config / "routes.yaml"
        text = routes.read_text()
        self.routed_to = "B" if self.routed_to == "A" else "A"
        old, new = (
            ("backend_a", "backend_b") if self.routed_to == "B" else ("backend_b", "backend_a")
        )
        routes.write_text(text.replace(old, new))
        await wait_for_body(self.listener_port, self.routed_to)

    async def admin(self, path: str) -> str:
        status, _headers, text = await http_get("127.0.0.1", self.admin_port, path)
        assert status == 200, (path, status, text)
        return text

    async def xds_stats(self) -> dict[str, int]:
        """Envoy's counters about its connection to the control plane."""
        stats = await self.envoy.stats()
        return {
            "connections": stats["cluster.xds_cluster.upstream_cx_total"],
            "connected": stats["control_plane.connected_state"],
        }


def with_client_certificate(bootstrap: dict[str, Any], ca: Path, client: PemFiles) -> None:
    """Give Envoy's ``xds_cluster`` mutual TLS: its certificate, and the server's checked
    against the CA and the address it connects to."""
    bootstrap["static_resources"]["clusters"][0]["transport_socket"] = {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/"
            "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": {
                "alpn_protocols": ["h2"],
                "tls_certificates": [
                    {
                        "certificate_chain": {"filename": str(client.cert)},
                        "private_key": {"filename": str(client.key)},
                    }
                ],
                "validation_context": {
                    "trusted_ca": {"filename": str(ca)},
                    "match_typed_subject_alt_names": [
                        {"san_type": "IP_ADDRESS", "matcher": {"exact": "127.0.0.1"}}
                    ],
                },
            },
        },
    }


@asynccontextmanager
async def serve_tls(
    config: Path, certs: Path, xds_port: int, admin_port: int
) -> AsyncIterator[Served]:
    """``xdscore serve`` with mutual TLS and SPIFFE node binding, stopped on exit."""
    command = [
        sys.executable, "-m", "xdscore", "--log-level", "info", "serve", str(config),
        "--listen", f"127.0.0.1:{xds_port}", "--admin", f"127.0.0.1:{admin_port}",
        "--debounce-ms", "100",
        "--tls-cert", str(certs / "server.crt"), "--tls-key", str(certs / "server.key"),
        "--client-ca", str(certs / "ca.crt"),
        "--node-from-spiffe", SPIFFE_TEMPLATE, NODE_TEMPLATE,
    ]  # fmt: skip
    process = await anyio.open_process(command)
    served = Served(process)
    reader = asyncio.create_task(served.read_log())
    try:
        assert process.stdout is not None
        banner = ""
        with anyio.fail_after(30):
            while "admin endpoint on" not in banner:
                banner += (await process.stdout.receive()).decode()
        assert f"on 127.0.0.1:{xds_port}" in banner, banner
        yield served
    finally:
        process.terminate()
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await process.aclose()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """One event loop for the module: its tests share the control plane and the Envoy."""
    return "asyncio"


@pytest.fixture(scope="module")
async def secured(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Secured]:
    certs, config = tmp_path_factory.mktemp("certs"), tmp_path_factory.mktemp("config")
    ca = CertificateAuthority()
    ca_file = ca.write(certs)
    ca.server().write(certs, "server")
    edge = ca.client(EDGE).write(certs, "edge")
    with HttpBackend("A") as backend_a, HttpBackend("B") as backend_b:
        listener, xds, admin = free_port(), free_port(), free_port()
        render(
            config,
            {"LISTENER_PORT": listener, "BACKEND_A_PORT": backend_a.port,
             "BACKEND_B_PORT": backend_b.port},
        )  # fmt: skip
        bootstrap = envoy_bootstrap(xds_port=xds, node_id="edge.shop", node_cluster="shop")
        with_client_certificate(bootstrap, ca_file, edge)
        async with serve_tls(config, certs, xds, admin) as served, Envoy(bootstrap) as envoy:
            secured = Secured(served, envoy, ca, certs, config, xds, listener, admin)
            yield secured
            # Whatever the tests did, the Envoy kept its one stream (the impostor's, which
            # claimed its node id, has no cluster), and nothing was logged as an error.
            assert served.count("opened: node=edge.shop cluster=shop ") == 1, served.lines
            assert not [line for line in served.lines if " ERROR " in line or "Traceback" in line]


# -- a client's view of the xDS port ------------------------------------------------------


def credentials(ca: CertificateAuthority, client: Issued | None) -> grpc.ChannelCredentials:
    if client is None:
        return grpc.ssl_channel_credentials(root_certificates=ca.pem)
    return grpc.ssl_channel_credentials(
        root_certificates=ca.pem, private_key=client.key_pem, certificate_chain=client.cert_pem
    )


async def first_answer(
    target: str, creds: grpc.ChannelCredentials | None, node_id: str
) -> bytes | Failure:
    """Open an ADS stream as ``node_id`` (plaintext when ``creds`` is None), send one
    request for every cluster, and return what comes back first: a response (raw bytes),
    or how the stream ended."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    channel = (
        grpc.aio.insecure_channel(target, options=options)
        if creds is None
        else grpc.aio.secure_channel(target, creds, options=options)
    )
    call = RawCall(channel, ADS)
    try:
        await call.send(
            encode_request(DiscoveryRequest(type_url=CLUSTER, node=make_node(id=node_id)))
        )
        return await call.next(timeout=10)
    finally:
        await channel.close()
        with anyio.fail_after(5):
            await call.finished()


def presented_certificate(port: int, ca: Path, client: PemFiles) -> int:
    """The serial number of the certificate the server presents to a new TLS connection
    (a full mutual-TLS handshake, then the connection is closed)."""
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(client.cert, client.key)
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return serial_of(der)


def metric(text: str, sample: str) -> float:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no sample {sample} in /metrics")


# -- the tests ----------------------------------------------------------------------------


async def test_envoy_with_its_certificate_is_served(secured: Secured) -> None:
    await wait_for_body(secured.listener_port, "A")
    status = json.loads(await secured.admin("/status"))
    [proxy] = status["proxies"]
    assert proxy["node"] == "edge.shop"
    assert proxy["identity"]["uri_sans"] == [EDGE]
    assert proxy["synced"] is True
    await secured.still_served()


REFUSED_AT_TLS: dict[str, Callable[[CertificateAuthority], grpc.ChannelCredentials | None]] = {
    "no-client-certificate": lambda ca: credentials(ca, None),
    "another-ca": lambda ca: credentials(ca, CertificateAuthority("another CA").client(EDGE)),
    "expired": lambda ca: credentials(ca, ca.client(EDGE, expired=True)),
    "plaintext": lambda ca: None,
}


@pytest.mark.parametrize("case", list(REFUSED_AT_TLS))
async def test_refused_during_the_handshake(secured: Secured, case: str) -> None:
    before = await secured.xds_stats()
    answer = await first_answer(secured.target, REFUSED_AT_TLS[case](secured.ca), "edge.shop")
    assert isinstance(answer, Failure), f"{case}: a response arrived: {answer!r:.200}"
    print(f"{case}: {answer}")
    assert answer.code == grpc.StatusCode.UNAVAILABLE, answer
    # The server never saw a stream: no second stream for the node, nothing refused by the
    # authorizer, and Envoy's stream is the one it had.
    metrics = await secured.admin("/metrics")
    assert metric(metrics, 'xdscore_streams{mode="ads",protocol="sotw"}') == 1
    assert metric(metrics, DENIED) == 0
    assert [p["node"] for p in json.loads(await secured.admin("/status"))["proxies"]] == [
        "edge.shop"
    ]
    await secured.still_served()
    assert await secured.xds_stats() == before


async def test_a_certificate_claiming_another_node_is_permission_denied(secured: Secured) -> None:
    assert metric(await secured.admin("/metrics"), DENIED) == 0
    # cart.shop's valid certificate, claiming to be the healthy Envoy's node.
    cart = secured.ca.client(spiffe_id("cart"))
    answer = await first_answer(secured.target, credentials(secured.ca, cart), "edge.shop")
    assert isinstance(answer, Failure), f"a response arrived before the refusal: {answer!r:.200}"
    print(f"node mismatch: {answer}")
    assert answer.code == grpc.StatusCode.PERMISSION_DENIED, answer
    assert answer.details == (
        f"node id 'edge.shop' does not match the certificate: {spiffe_id('cart')} allows "
        "'cart.shop'"
    )
    assert metric(await secured.admin("/metrics"), DENIED) == 1
    await secured.served.logged("closed: node=edge.shop peer=127.0.0.1:")
    [closed] = [line for line in secured.served.lines if "closed: node=edge.shop" in line]
    assert answer.details in closed
    # The impostor never became a stream of edge.shop; the real one is still served.
    [proxy] = json.loads(await secured.admin("/status"))["proxies"]
    assert proxy["identity"]["uri_sans"] == [EDGE]
    await secured.still_served()

    # The same certificate claiming its own node is served.
    answer = await first_answer(secured.target, credentials(secured.ca, cart), "cart.shop")
    assert isinstance(answer, bytes), answer


async def test_rotating_the_server_certificate(secured: Secured) -> None:
    ca_file, probe = secured.certs / "ca.crt", secured.ca.client(spiffe_id("probe"))
    probe_files = probe.write(secured.certs, "probe")
    old_serial = serial_of((secured.certs / "server.crt").read_bytes())
    assert (
        await anyio.to_thread.run_sync(
            presented_certificate, secured.xds_port, ca_file, probe_files
        )
        == old_serial
    )
    before = await secured.xds_stats()
    assert before == {"connections": 1, "connected": 1}

    # As a certificate manager does it: new files under temporary names, renamed over the old.
    rotated = secured.ca.server()
    staged = rotated.write(secured.certs, ".staged-server")
    os.replace(staged.cert, secured.certs / "server.crt")
    os.replace(staged.key, secured.certs / "server.key")
    await secured.served.logged("loaded new TLS certificate")

    presented = await anyio.to_thread.run_sync(
        presented_certificate, secured.xds_port, ca_file, probe_files
    )
    print(f"serial before {old_serial:x}, after {presented:x}")
    assert presented == rotated.serial != old_serial
    assert secured.served.count("refused new TLS files") == 0
    # New gRPC connections are served under the new certificate...
    answer = await first_answer(secured.target, credentials(secured.ca, probe), "probe.shop")
    assert isinstance(answer, bytes), answer
    # ...and Envoy's stream, on its one connection from before, keeps getting pushes.
    await secured.still_served()
    await secured.still_served()
    assert await secured.xds_stats() == before
    assert await body(secured.listener_port) == secured.routed_to


def publish_volume(volume: Path, generation: int, files: dict[str, bytes]) -> None:
    """Update ``volume`` as Kubernetes updates a secret volume: the files go into a new
    directory, the ``..data`` link is swapped to it with a rename, the old one is deleted;
    the names the server reads (``tls.crt`` -> ``..data/tls.crt``) never change."""
    directory = volume / f"..generation_{generation}"
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)
    (volume / "..data_tmp").symlink_to(directory.name)
    os.replace(volume / "..data_tmp", volume / "..data")
    for name in files:
        if not (volume / name).is_symlink():
            (volume / name).symlink_to(f"..data/{name}")
    previous = volume / f"..generation_{generation - 1}"
    if previous.exists():
        shutil.rmtree(previous)


async def test_rotating_through_a_kubernetes_secret_volume(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    probe = ca.client(spiffe_id("probe")).write(tmp_path, "probe")
    volume = tmp_path / "volume"
    volume.mkdir()

    def rotate(generation: int) -> int:
        server = ca.server()
        secret = {"ca.crt": ca.pem, "tls.crt": server.cert_pem, "tls.key": server.key_pem}
        publish_volume(volume, generation, secret)
        return server.serial

    rotate(0)
    ca_file = volume / "ca.crt"
    files = CertificateFiles(volume / "tls.crt", volume / "tls.key", client_ca=ca_file)
    stop = anyio.Event()
    async with (
        Http2Transport(XdsServer(SnapshotCache())) as transport,
        anyio.create_task_group() as group,
    ):
        port = await transport.start("127.0.0.1", 0, ssl_context=files.context)
        group.start_soon(lambda: files.watch(quiet_ms=50, stop=stop))
        await anyio.sleep(0.2)  # for the watch to start: nothing tells when it has
        # Every rotation is seen, not only the first (whose old directory is then gone).
        for generation in range(1, 4):
            serial = rotate(generation)

            async def presented(serial: int = serial) -> bool:
                found = await anyio.to_thread.run_sync(presented_certificate, port, ca_file, probe)
                return found == serial

            await wait_until(presented, timeout=10, interval=0.05, what=f"rotation {generation}")
        assert files.reloads == 3
        stop.set()


GRPC_CLIENT = """
import grpc
with grpc.insecure_channel("xds:///backend") as channel:
    try:
        channel.unary_unary("/test.Service/Method")(b"", timeout=5)
    except grpc.RpcError as exc:
        print(exc.code().name, exc.details())
"""


@pytest.mark.grpc_client
async def test_grpc_xds_client_over_mutual_tls(tmp_path: Path) -> None:
    """gRPC's own xDS client with ``channel_creds`` of type ``tls`` (the bootstrap in
    docs/security.md): served as the node its certificate names, denied as another."""
    ca = CertificateAuthority()
    ca_file = ca.write(tmp_path)
    server_files = ca.server().write(tmp_path, "server")
    client = ca.client(spiffe_id("frontend")).write(tmp_path, "frontend")
    closed_port = free_port()  # the endpoint: reaching it means xDS resolved all the way
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(
        None,
        Snapshot(
            [
                b.api_listener("backend", "route_0"),
                b.route_configuration("route_0", [("/", "backend")]),
                b.eds_cluster("backend"),
                b.load_assignment("backend", [("127.0.0.1", closed_port)]),
            ]
        ),
    )
    server = XdsServer(cache, authorize=SpiffeNodePolicy(SPIFFE_TEMPLATE, NODE_TEMPLATE))
    context = server_ssl_context(server_files.cert, server_files.key, client_ca=ca_file)
    async with Http2Transport(server) as transport:
        port = await transport.start("127.0.0.1", 0, ssl_context=context)

        async def rpc_as(node_id: str) -> str:
            bootstrap = {
                "xds_servers": [
                    {
                        "server_uri": f"127.0.0.1:{port}",
                        "channel_creds": [
                            {
                                "type": "tls",
                                "config": {
                                    "ca_certificate_file": str(ca_file),
                                    "certificate_file": str(client.cert),
                                    "private_key_file": str(client.key),
                                },
                            }
                        ],
                        "server_features": ["xds_v3"],
                    }
                ],
                "node": {"id": node_id},
            }
            env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_XDS_BOOTSTRAP")}
            env["GRPC_XDS_BOOTSTRAP_CONFIG"] = json.dumps(bootstrap)
            result = await anyio.run_process([sys.executable, "-c", GRPC_CLIENT], env=env)
            return result.stdout.decode().strip()

        served = await rpc_as("frontend.shop")
        print(f"as frontend.shop: {served}")
        assert served.startswith("UNAVAILABLE"), served
        assert f"127.0.0.1:{closed_port}" in served, served  # it got the endpoints
        denied = await rpc_as("checkout.shop")
        print(f"as checkout.shop: {denied}")
        assert (
            "PERMISSION_DENIED: node id 'checkout.shop' does not match the certificate: "
            f"{spiffe_id('frontend')} allows 'frontend.shop'"
        ) in denied
    assert server.metrics is not None
    refused = server.metrics.registry.get_sample_value(
        "xdscore_refused_streams_total", {"reason": "permission_denied"}
    )
    assert refused == 1
