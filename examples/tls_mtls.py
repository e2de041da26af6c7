"""Serving xDS over mutual TLS: the transport takes a standard ``ssl.SSLContext``.

Run it with ``.venv/bin/python examples/tls_mtls.py`` (it needs the ``openssl`` command to
make a throw-away CA and certificates). The control plane asks every client for a
certificate signed by that CA; an Envoy that presents one gets its configuration, and a
client without one is turned away during the TLS handshake. It exits within a minute.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from xdscore import Http2Transport, Snapshot, SnapshotCache, XdsServer, same_for_all
from xdscore import builders as b
from xdscore.testing import Envoy, HttpBackend, envoy_bootstrap, free_port, http_get


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(directory: Path) -> None:
    """ca.crt, and server.crt/key (for 127.0.0.1) and client.crt/key signed by it."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
            "-subj", "/CN=xdscore example CA", cwd=directory)  # fmt: skip
    for role, extensions in (
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "subjectAltName=URI:spiffe://example/edge-1\nextendedKeyUsage=clientAuth\n"),
    ):
        (directory / f"{role}.ext").write_text(extensions)
        openssl("req", *ec, "-keyout", f"{role}.key", "-out", f"{role}.csr",
                "-subj", f"/CN={role}", cwd=directory)  # fmt: skip
        openssl("x509", "-req", "-in", f"{role}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "1", "-extfile", f"{role}.ext",
                "-out", f"{role}.crt", cwd=directory)  # fmt: skip


def server_context(directory: Path) -> ssl.SSLContext:
    """TLS for the control plane: its certificate, and client certificates required."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "server.crt", directory / "server.key")
    context.load_verify_locations(directory / "ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED  # mutual TLS; leave it out for server-only TLS
    context.set_alpn_protocols(["h2"])  # gRPC runs on HTTP/2
    return context


def with_client_certificate(bootstrap: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Make Envoy's ``xds_cluster`` speak mTLS to the control plane."""
    cluster = bootstrap["static_resources"]["clusters"][0]
    cluster["transport_socket"] = {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/"
            "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": {
                "alpn_protocols": ["h2"],
                "tls_certificates": [
                    {
                        "certificate_chain": {"filename": str(directory / "client.crt")},
                        "private_key": {"filename": str(directory / "client.key")},
                    }
                ],
                "validation_context": {"trusted_ca": {"filename": str(directory / "ca.crt")}},
            },
        },
    }
    return bootstrap


def handshake_without_certificate(port: int, ca: Path) -> str:
    """What a client that trusts the server but has no certificate of its own gets."""
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        # With TLS 1.3 the client's side of the handshake completes before the server has
        # checked the client's certificate; the server's verdict is what comes next.
        try:
            tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            answer = tls.recv(1)
        except (ssl.SSLError, ConnectionError) as exc:
            return f"refused: {exc}"
    return "refused: the server closed the connection" if not answer else "accepted (unexpected)"


async def main() -> None:
    listener_port = free_port()
    cache = SnapshotCache(group=same_for_all)
    with (
        tempfile.TemporaryDirectory(prefix="xdscore-mtls-") as tmp,
        HttpBackend("hello over mTLS-configured Envoy") as backend,
        anyio.fail_after(60),
    ):
        directory = Path(tmp)
        make_certificates(directory)
        cache.set_snapshot(
            None,
            Snapshot(
                [
                    b.http_listener("listener_0", listener_port, "route_0"),
                    b.route_configuration("route_0", [("/", "backend")]),
                    b.eds_cluster("backend"),
                    b.load_assignment("backend", [("127.0.0.1", backend.port)]),
                ]
            ),
        )
        async with Http2Transport(XdsServer(cache)) as transport:
            port = await transport.start("127.0.0.1", 0, ssl_context=server_context(directory))
            print(f"control plane on 127.0.0.1:{port}, mutual TLS")
            bootstrap = with_client_certificate(envoy_bootstrap(xds_port=port), directory)
            async with Envoy(bootstrap):
                status, _headers, body = await http_get("127.0.0.1", listener_port)
                print(f"Envoy with a client certificate got its config: {status} {body!r}")
            verdict = await anyio.to_thread.run_sync(
                handshake_without_certificate, port, directory / "ca.crt"
            )
            print(f"a client without a certificate: {verdict}")
            assert verdict.startswith("refused")
    print("done")


if __name__ == "__main__":
    anyio.run(main)
