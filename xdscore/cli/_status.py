"""``xdscore status`` and ``xdscore dump``: a control plane's proxies, as CSDS tells them.

Both speak only the Client Status Discovery Service, so they work against any CSDS server.
``status`` prints one line per proxy with each type's state, as ``istioctl proxy-status``
does; ``dump`` prints what one proxy holds, resource by resource, as the server sees it.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
from collections.abc import Iterable
from typing import Any

from .._errors import ProtocolError, StreamClosed
from ..wire._csds import (
    ClientReport,
    IdMatcher,
    ResourceReport,
    decode_status_response,
    encode_status_query,
)
from ..wire._messages import resource_json
from ..wire._typeurls import type_info
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_client_tls,
    address,
    client_ssl_context,
)

__all__ = ["COMMANDS", "add_parsers", "fetch_reports", "run", "type_states"]

COMMANDS = ("status", "dump")
_CSDS = "/envoy.service.status.v3.ClientStatusDiscoveryService/StreamClientStatus"
_WORST = ("ERROR", "STALE", "NOT_SENT", "UNKNOWN", "SYNCED")
_WORDS = {"ERROR": "NACKED", "STALE": "STALE", "NOT_SENT": "NOT SENT", "SYNCED": "SYNCED"}


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``status`` and ``dump`` and their flags."""
    status = commands.add_parser(
        "status",
        help="list a control plane's proxies and whether each type is in sync (CSDS)",
        description="Ask the server's Client Status Discovery Service about its proxies "
        "and print one line per proxy: its node id and each type's state (SYNCED, STALE, "
        "NACKED, NOT SENT) with its resource count and version.",
    )
    status.add_argument("--server", type=address, required=True, metavar="HOST:PORT")
    status.add_argument("--node", default="", metavar="PREFIX", help="only node ids so starting")
    status.add_argument("--format", choices=("table", "json"), default="table")
    add_client_tls(status)
    dump = commands.add_parser(
        "dump",
        help="print what one proxy holds, as the control plane sees it (CSDS)",
        description="Print each resource the server believes the proxy holds, is being sent "
        "or asked for, with its version and state, and the resource itself in the proto3 "
        "JSON mapping.",
    )
    dump.add_argument("--server", type=address, required=True, metavar="HOST:PORT")
    dump.add_argument("--node", required=True, metavar="ID", help="the proxy's node id")
    dump.add_argument("--type", default="", metavar="SHORT", help="only this type (cds, ...)")
    add_client_tls(dump)


async def fetch_reports(
    host: str,
    port: int,
    matchers: Iterable[IdMatcher],
    ssl_context: ssl.SSLContext | None = None,
) -> list[ClientReport]:
    """Ask the CSDS server at ``host:port`` about the clients ``matchers`` select (over TLS
    with ``ssl_context``)."""
    from ..transport.grpclib.client import open_channel

    async with (
        open_channel(host, port, ssl_context=ssl_context) as channel,
        channel.stream(_CSDS) as stream,
    ):
        await stream.send(encode_status_query(matchers))
        data = await stream.receive()
    if data is None:
        raise StreamClosed("the server closed the stream without answering")
    return decode_status_response(data)


def type_states(client: ClientReport) -> dict[str, dict[str, Any]]:
    """Per type URL: the worst state of its resources, their count and versions."""
    out: dict[str, dict[str, Any]] = {}
    for report in client.resources:
        entry = out.setdefault(
            report.type_url, {"state": "SYNCED", "resources": 0, "versions": set(), "error": ""}
        )
        entry["resources"] += report.client_status != "DOES_NOT_EXIST"
        if report.version:
            entry["versions"].add(report.version)
        if _WORST.index(report.config_status) < _WORST.index(entry["state"]):
            entry["state"] = report.config_status
        if report.error:
            entry["error"] = report.error.strip()
    for entry in out.values():
        entry["state"] = _WORDS.get(entry["state"], entry["state"])
        entry["versions"] = sorted(entry["versions"])
    return out


def _table(clients: list[ClientReport]) -> str:
    types = sorted(
        {r.type_url for c in clients for r in c.resources}, key=lambda t: type_info(t).rank
    )
    header = ["NODE", *(type_info(t).short_name.upper() for t in types)]
    rows = [header]
    for client in clients:
        states = type_states(client)
        row = [client.node.id]
        for type_url in types:
            entry = states.get(type_url)
            if entry is None:
                row.append("-")
                continue
            versions = entry["versions"]
            version = versions[0][:8] if len(versions) == 1 else f"{len(versions)} versions"
            row.append(f"{entry['state']} ({entry['resources']}, {version})")
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def _report_json(report: ResourceReport, with_content: bool) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": report.name,
        "version": report.version,
        "config_status": report.config_status,
        "client_status": report.client_status,
    }
    if report.error:
        document["error"] = {"details": report.error, "version": report.error_version}
    if with_content and report.resource is not None and report.resource.body:
        try:
            document["resource"] = resource_json(report.resource)
        except (KeyError, ValueError) as exc:
            document["resource_error"] = str(exc)
    return document


async def run(args: argparse.Namespace) -> int:
    """Run ``status`` or ``dump``; the exit status."""
    host, port = args.server
    node = args.node
    matcher = IdMatcher("prefix" if args.command == "status" else "exact", node)
    try:
        context = client_ssl_context(args)
    except ValueError as exc:
        print(f"xdscore {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        clients = await fetch_reports(host, port, [matcher] if node else [], context)
    except (ProtocolError, StreamClosed) as exc:
        print(f"xdscore: {host}:{port}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    # With a client certificate, CSDS answers about the certificate's own nodes only.
    hidden = " that this certificate may see" if args.tls_cert is not None else ""
    if args.command == "status":
        if args.format == "json":
            document = [
                {"node": c.node.id, "cluster": c.node.cluster, "types": type_states(c)}
                for c in clients
            ]
            print(json.dumps(document, indent=2))
        elif clients:
            print(_table(clients))
        else:
            which = f" whose node id starts with {node!r}" if node else ""
            print(f"no proxy{which}{hidden} is connected to {host}:{port}")
        return EXIT_OK
    if not clients:
        print(
            f"xdscore: {host}:{port} has no client with node id {node!r}{hidden}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    wanted = args.type
    types: dict[str, list[dict[str, Any]]] = {}
    for client in clients:
        for report in client.resources:
            info = type_info(report.type_url)
            if wanted and wanted not in (info.short_name, report.type_url):
                continue
            types.setdefault(report.type_url, []).append(_report_json(report, True))
    print(json.dumps({"node": node, "types": types}, indent=2))
    return EXIT_OK
