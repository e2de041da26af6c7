"""``xdscore status`` and ``xdscore dump``: a control plane's proxies, as CSDS tells them.

Both speak only the Client Status Discovery Service, so they work against any CSDS server;
with ``--etcd`` or ``--server`` repeated they ask every replica, each answer labelled with
its replica (`xdscore.cli._replicas`).
``status`` prints one line per proxy with each type's state, as ``istioctl proxy-status``
does; ``dump`` prints what one proxy holds, resource by resource, as the server sees it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..wire._csds import ClientReport, IdMatcher, ResourceReport
from ..wire._messages import resource_json
from ..wire._typeurls import type_info
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_client_tls,
    client_ssl_context,
    positive,
)
from ._replicas import Answers, Replica, add_server_flags, ask_replicas, find_replicas, many

__all__ = ["COMMANDS", "add_parsers", "run", "type_states"]

COMMANDS = ("status", "dump")
_WORST = ("ERROR", "STALE", "NOT_SENT", "UNKNOWN", "SYNCED")
_WORDS = {"ERROR": "NACKED", "STALE": "STALE", "NOT_SENT": "NOT SENT", "SYNCED": "SYNCED"}


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``status`` and ``dump`` and their flags."""
    status = commands.add_parser(
        "status",
        help="list a control plane's proxies and whether each type is in sync (CSDS)",
        description="Ask the server's Client Status Discovery Service about its proxies "
        "and print one line per proxy: its node id and each type's state (SYNCED, STALE, "
        "NACKED, NOT SENT) with its resource count and version. With --etcd or several "
        "--server, every replica is asked and each proxy is shown with its replica (a "
        "REPLICA column).",
    )
    add_server_flags(status, "each proxy")
    status.add_argument("--node", default="", metavar="PREFIX", help="only node ids so starting")
    status.add_argument("--format", choices=("table", "json"), default="table")
    _add_timeout(status)
    add_client_tls(status)
    dump = commands.add_parser(
        "dump",
        help="print what one proxy holds, as the control plane sees it (CSDS)",
        description="Print each resource the server believes the proxy holds, is being sent "
        "or asked for, with its version and state, and the resource itself in the proto3 "
        "JSON mapping. With --etcd or several --server, every replica is asked, and the "
        "proxy is shown once for each replica it is connected to: "
        '{"node", "replicas": [{"replica", "types"}], "unanswered"}.',
    )
    add_server_flags(dump, "what each replica reports")
    dump.add_argument("--node", required=True, metavar="ID", help="the proxy's node id")
    dump.add_argument("--type", default="", metavar="SHORT", help="only this type (cds, ...)")
    _add_timeout(dump)
    add_client_tls(dump)


def _add_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=positive(float),
        default=10.0,
        metavar="SECONDS",
        help="how long each control plane may take to answer (default 10); one that does "
        "not is named and the exit status is 1",
    )


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


def _table(clients: list[ClientReport], replicas: list[str] | None = None) -> str:
    types = sorted(
        {r.type_url for c in clients for r in c.resources}, key=lambda t: type_info(t).rank
    )
    header = [
        "NODE",
        *(["REPLICA"] if replicas else []),
        *(type_info(t).short_name.upper() for t in types),
    ]
    rows = [header]
    for index, client in enumerate(clients):
        states = type_states(client)
        row = [client.node.id, *([replicas[index]] if replicas else [])]
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


def _status(args: argparse.Namespace, replicas: list[Replica], answers: Answers) -> int:
    """Print ``status``; the exit status."""
    rows = answers.rows()
    if many(args):
        if args.format == "json":
            document = [
                {
                    "replica": r,
                    "node": c.node.id,
                    "cluster": c.node.cluster,
                    "types": type_states(c),
                }
                for r, c in rows
            ]
            print(
                json.dumps({"proxies": document, "unanswered": list(answers.unanswered)}, indent=2)
            )
        elif rows:
            print(_table([c for _, c in rows], [r for r, _ in rows]))
        elif not answers.unanswered:
            where = f"under {args.prefix}" if args.etcd is not None else "given"
            print(f"no proxy is connected to the {len(replicas)} replica(s) {where}")
        answers.say_unanswered()
        return EXIT_FAILED if answers.unanswered else EXIT_OK
    if answers.unanswered:
        answers.say_unanswered()
        return EXIT_FAILED
    clients = [c for _, c in rows]
    if args.format == "json":
        document = [
            {"node": c.node.id, "cluster": c.node.cluster, "types": type_states(c)} for c in clients
        ]
        print(json.dumps(document, indent=2))
    elif clients:
        print(_table(clients))
    else:
        which = f" whose node id starts with {args.node!r}" if args.node else ""
        print(f"no proxy{which}{_hidden(args)} is connected to {replicas[0].xds}")
    return EXIT_OK


def _hidden(args: argparse.Namespace) -> str:
    # With a client certificate, CSDS answers about the certificate's own nodes only.
    return " that this certificate may see" if args.tls_cert is not None else ""


def _types(reports: list[ResourceReport], wanted: str) -> dict[str, list[dict[str, Any]]]:
    """``dump``'s resources by type URL (only ``wanted``'s, when given)."""
    types: dict[str, list[dict[str, Any]]] = {}
    for report in reports:
        info = type_info(report.type_url)
        if wanted and wanted not in (info.short_name, report.type_url):
            continue
        types.setdefault(report.type_url, []).append(_report_json(report, True))
    return types


def _dump(args: argparse.Namespace, replicas: list[Replica], answers: Answers) -> int:
    """Print ``dump``; the exit status."""
    node = args.node
    found = answers.of_node(node)
    if many(args):
        if found:
            document = {
                "node": node,
                "replicas": [
                    {"replica": replica.label, "types": _types(reports, args.type)}
                    for replica, reports in found
                ],
                "unanswered": list(answers.unanswered),
            }
            print(json.dumps(document, indent=2))
        answers.say_unanswered()
        if not found:
            print(
                f"xdscore: {answers.without()} has a client with node id {node!r}{_hidden(args)}",
                file=sys.stderr,
            )
        return EXIT_FAILED if answers.unanswered or not found else EXIT_OK
    if answers.unanswered:
        answers.say_unanswered()
        return EXIT_FAILED
    if not found:
        print(
            f"xdscore: {replicas[0].xds} has no client with node id {node!r}{_hidden(args)}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    ((_, reports),) = found
    print(json.dumps({"node": node, "types": _types(reports, args.type)}, indent=2))
    return EXIT_OK


async def run(args: argparse.Namespace) -> int:
    """Run ``status`` or ``dump``; the exit status."""
    try:
        context = client_ssl_context(args)
    except ValueError as exc:
        print(f"xdscore {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    replicas = await find_replicas(args)
    if isinstance(replicas, int):
        return replicas
    if args.command == "status":
        matchers = [IdMatcher("prefix", args.node)] if args.node else []
    else:
        matchers = [IdMatcher("exact", args.node)]
    answers = await ask_replicas(replicas, matchers, context, timeout=args.timeout)
    if args.command == "status":
        return _status(args, replicas, answers)
    return _dump(args, replicas, answers)
