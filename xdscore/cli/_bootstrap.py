"""``xdscore bootstrap envoy|grpc``: the bootstrap a proxy or a gRPC client needs to take its
configuration from this server.

Both point the client at one xDS server over ADS (one stream for every type). The Envoy
bootstrap takes listeners and clusters from it (``ads: {}`` config sources, so routes,
endpoints and secrets come over the same stream when the resources say ``ads: {}``), with
the admin endpoint on loopback; the gRPC one is what ``GRPC_XDS_BOOTSTRAP`` (a file) or
``GRPC_XDS_BOOTSTRAP_CONFIG`` (the JSON itself) hand to grpc's xDS resolver.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from ._common import EXIT_OK, EXIT_USAGE, address

__all__ = ["add_parser", "envoy_bootstrap", "grpc_bootstrap", "run"]

_TYPE = "type.googleapis.com/"
XDS_CLUSTER = "xds_cluster"
"""The name of the static cluster through which Envoy reaches the xDS server."""


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _tls_files(ca: Path | None, cert: Path | None, key: Path | None) -> None:
    if (cert is None) != (key is None):
        raise ValueError("give both --tls-cert and --tls-key")
    if cert is not None and ca is None:
        raise ValueError(
            "--tls-cert and --tls-key need --tls-ca (the CA to check the server's certificate with)"
        )


def envoy_bootstrap(
    server: tuple[str, int],
    node: str,
    *,
    cluster: str = "",
    delta: bool = False,
    admin: tuple[str, int] = ("127.0.0.1", 9901),
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> dict[str, Any]:
    """An Envoy bootstrap taking listeners and clusters over ADS from ``server``
    (``DELTA_GRPC`` with ``delta``), the admin endpoint at ``admin``, for the node ``node``
    in ``cluster`` (default: the node id; Envoy needs one). With ``tls_ca`` the
    connection to the server is TLS, its certificate checked against that CA and its
    address (an IP SAN for an IP, a DNS SAN and SNI for a name); ``tls_cert`` and
    ``tls_key`` add a client certificate (mutual TLS)."""
    _tls_files(tls_ca, tls_cert, tls_key)
    host, port = server
    xds_cluster: dict[str, Any] = {
        "name": XDS_CLUSTER,
        "type": "STATIC" if _is_ip(host) else "LOGICAL_DNS",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": _TYPE + "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "load_assignment": {
            "cluster_name": XDS_CLUSTER,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {"socket_address": {"address": host, "port_value": port}}
                            }
                        }
                    ]
                }
            ],
        },
    }
    if tls_ca is not None:
        common: dict[str, Any] = {
            "alpn_protocols": ["h2"],
            "validation_context": {
                "trusted_ca": {"filename": str(tls_ca)},
                "match_typed_subject_alt_names": [
                    {
                        "san_type": "IP_ADDRESS" if _is_ip(host) else "DNS",
                        "matcher": {"exact": host},
                    }
                ],
            },
        }
        if tls_cert is not None and tls_key is not None:
            common["tls_certificates"] = [
                {
                    "certificate_chain": {"filename": str(tls_cert)},
                    "private_key": {"filename": str(tls_key)},
                }
            ]
        tls: dict[str, Any] = {
            "@type": _TYPE + "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": common,
        }
        if not _is_ip(host):
            tls["sni"] = host
        xds_cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": tls,
        }
    # Envoy refuses to start over ADS with a node that has no cluster.
    node_document = {"id": node, "cluster": cluster or node}
    admin_host, admin_port = admin
    return {
        "node": node_document,
        "admin": {"address": {"socket_address": {"address": admin_host, "port_value": admin_port}}},
        "dynamic_resources": {
            "ads_config": {
                "api_type": "DELTA_GRPC" if delta else "GRPC",
                "transport_api_version": "V3",
                "grpc_services": [{"envoy_grpc": {"cluster_name": XDS_CLUSTER}}],
                "set_node_on_first_message_only": True,
            },
            "cds_config": {"ads": {}, "resource_api_version": "V3"},
            "lds_config": {"ads": {}, "resource_api_version": "V3"},
        },
        "static_resources": {"clusters": [xds_cluster]},
    }


def grpc_bootstrap(
    server: tuple[str, int],
    node: str,
    *,
    cluster: str = "",
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> dict[str, Any]:
    """A gRPC xDS bootstrap (gRFC A27) for one xDS server, the ``xds_v3`` protocol, and the
    node ``node``. With ``tls_ca`` the channel to the server is TLS (the ``tls`` channel
    credentials of gRFC A65; ``tls_cert`` and ``tls_key`` add a client certificate),
    otherwise plaintext (``insecure``)."""
    _tls_files(tls_ca, tls_cert, tls_key)
    host, port = server
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    creds: dict[str, Any] = {"type": "insecure"}
    if tls_ca is not None:
        config = {"ca_certificate_file": str(tls_ca)}
        if tls_cert is not None and tls_key is not None:
            config |= {"certificate_file": str(tls_cert), "private_key_file": str(tls_key)}
        creds = {"type": "tls", "config": config}
    node_document = {"id": node}
    if cluster:
        node_document["cluster"] = cluster
    return {
        "xds_servers": [
            {"server_uri": where, "channel_creds": [creds], "server_features": ["xds_v3"]}
        ],
        "node": node_document,
    }


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``bootstrap envoy`` and ``bootstrap grpc`` and their flags."""
    bootstrap = commands.add_parser(
        "bootstrap",
        help="print the bootstrap that points Envoy or a gRPC client at this server",
        description="Print a bootstrap for Envoy (YAML or JSON, for envoy -c) or for a "
        "proxyless gRPC client (JSON, for GRPC_XDS_BOOTSTRAP) that takes its configuration "
        "from the xDS server at --server over ADS.",
    )
    kinds = bootstrap.add_subparsers(dest="kind", required=True, metavar="KIND")
    envoy = kinds.add_parser(
        "envoy",
        help="an Envoy bootstrap (listeners and clusters over ADS, admin on loopback)",
        description="An Envoy bootstrap: node id and cluster, the admin endpoint on "
        "loopback, listeners and clusters over ADS (State of the World, or Delta with "
        "--delta) from a static cluster reaching --server over HTTP/2, TLS with --tls-ca.",
    )
    grpc = kinds.add_parser(
        "grpc",
        help="a gRPC xDS bootstrap (JSON) for GRPC_XDS_BOOTSTRAP",
        description="A gRPC xDS bootstrap: the xDS server, its channel credentials "
        "(insecure, or tls with --tls-ca) and the node. Save it to a file and point "
        "GRPC_XDS_BOOTSTRAP at it (or put the JSON itself in GRPC_XDS_BOOTSTRAP_CONFIG), "
        "then dial xds:///NAME, NAME being a listener the server serves.",
    )
    for kind in (envoy, grpc):
        kind.add_argument(
            "--server",
            type=address,
            required=True,
            metavar="HOST:PORT",
            help="where the xDS server listens, as the client reaches it",
        )
        kind.add_argument("--node", required=True, metavar="ID", help="the node id to present")
        kind.add_argument(
            "--cluster",
            default="",
            metavar="C",
            help="the node's cluster (default: for Envoy, which needs one, the node id; "
            "for gRPC, none)",
        )
        tls = kind.add_argument_group("TLS to the xDS server")
        tls.add_argument(
            "--tls-ca", type=Path, metavar="FILE", help="CA bundle to check the server with"
        )
        tls.add_argument(
            "--tls-cert", type=Path, metavar="FILE", help="client certificate (mutual TLS)"
        )
        tls.add_argument("--tls-key", type=Path, metavar="FILE", help="its private key")
    envoy.add_argument("--delta", action="store_true", help="use Delta (incremental) xDS")
    envoy.add_argument(
        "--admin",
        type=address,
        default=("127.0.0.1", 9901),
        metavar="HOST:PORT",
        help="Envoy's admin endpoint (default 127.0.0.1:9901; port 0 lets Envoy pick one)",
    )
    envoy.add_argument("--format", choices=("yaml", "json"), default="yaml")


def run(args: argparse.Namespace) -> int:
    """Print the bootstrap ``args`` ask for; the exit status."""
    tls = {"tls_ca": args.tls_ca, "tls_cert": args.tls_cert, "tls_key": args.tls_key}
    try:
        if args.kind == "envoy":
            document = envoy_bootstrap(
                args.server,
                args.node,
                cluster=args.cluster,
                delta=args.delta,
                admin=args.admin,
                **tls,
            )
        else:
            document = grpc_bootstrap(args.server, args.node, cluster=args.cluster, **tls)
    except ValueError as exc:
        print(f"xdscore bootstrap {args.kind}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.kind == "envoy" and args.format == "yaml":
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    else:
        print(json.dumps(document, indent=2))
    return EXIT_OK
