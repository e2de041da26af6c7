"""The xdscore command line: serve a directory of Envoy resources over xDS, or analyze it."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from .analysis import Severity, analyze
from .cache import SnapshotCache, same_for_all
from .config import ConfigError, load_directory, read_directory, watch_directory
from .server import XdsServer
from .transport import GrpclibTransport

__all__ = ["main"]

log = logging.getLogger("xdscore")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xdscore", description=__doc__)
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve the Envoy resources in a directory of YAML/JSON files over xDS",
        description="Serve every resource in DIR to every client (ADS and the per-type "
        "services, State-of-the-World and Delta), reloading when files change or on SIGHUP. "
        "An invalid or inconsistent change is refused and the last good snapshot keeps "
        "being served.",
    )
    serve.add_argument("directory", type=Path, metavar="DIR")
    serve.add_argument(
        "--listen",
        type=_address,
        default=("127.0.0.1", 18000),
        metavar="HOST:PORT",
        help="address to serve xDS on (default 127.0.0.1:18000; port 0 picks a free one)",
    )
    serve.add_argument(
        "--debounce-ms",
        type=int,
        default=300,
        help="reload once the files have been quiet this long: a burst of edits becomes "
        "one snapshot (default 300)",
    )
    serve.add_argument(
        "--max-delay-ms",
        type=int,
        default=3000,
        help="under constant edits, reload at least this often (default 3000)",
    )
    serve.add_argument(
        "--control-plane-id", default="xdscore", help="sent as control_plane.identifier"
    )
    analyze_ = commands.add_parser(
        "analyze",
        help="check the Envoy resources in a directory without serving them",
        description="Report dangling references, duplicates, unused resources and the other "
        "findings of xdscore.analysis (see docs/analysis.md). Exits 0 when nothing of ERROR "
        "severity is found, 1 when something is, 2 when the directory cannot be read.",
    )
    analyze_.add_argument("directory", type=Path, metavar="DIR")
    analyze_.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: one 'where: SEVERITY CODE message' line per finding; json: one object "
        "{diagnostics, errors, warnings} (default text)",
    )
    analyze_.add_argument(
        "--min-severity",
        choices=[severity.value for severity in reversed(Severity)],
        default="info",
        help="report findings of this severity or worse (default info); "
        "the exit status and the JSON counts consider every finding",
    )
    return parser


def _analyze(args: argparse.Namespace) -> int:
    directory: Path = args.directory
    found, problems = read_directory(directory)
    if problems:
        print(f"xdscore: cannot analyze {directory}:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_USAGE
    report = analyze(found, complete=True)
    shown = report.at_least(Severity(args.min_severity))
    if args.format == "json":
        document = {
            "diagnostics": shown.to_json(),
            "errors": len(report.errors),
            "warnings": len(report.warnings),
        }
        print(json.dumps(document, indent=2))
    else:
        if shown:
            print(shown.to_text())
        print(
            f"{len(found)} resources: {len(report.errors)} error(s), "
            f"{len(report.warnings)} warning(s), {len(report.infos)} info",
            file=sys.stderr,
        )
    return EXIT_FAILED if report.has_errors else EXIT_OK


async def _serve(args: argparse.Namespace) -> int:
    directory: Path = args.directory
    try:
        snapshot = load_directory(directory)
    except ConfigError as exc:
        print(f"xdscore: cannot serve {directory}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, snapshot)
    server = XdsServer(cache, control_plane_id=args.control_plane_id)
    host, port = args.listen
    async with GrpclibTransport(server) as transport, anyio.create_task_group() as group:
        try:
            bound = await transport.start(host, port)
        except OSError as exc:
            print(f"xdscore: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
            return EXIT_FAILED
        print(f"xdscore: serving {directory} on {host}:{bound}: {snapshot}", flush=True)
        group.start_soon(
            lambda: watch_directory(
                directory, cache, quiet_ms=args.debounce_ms, max_delay_ms=args.max_delay_ms
            )
        )
        wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        with anyio.open_signal_receiver(*wanted) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    _reload(directory, cache)
                    continue
                log.info("received %s, shutting down", signal.Signals(signum).name)
                break
        group.cancel_scope.cancel()
    return EXIT_OK


def _reload(directory: Path, cache: SnapshotCache) -> None:
    """Reload now (SIGHUP): apply the directory if it loads, else keep the last good one."""
    try:
        snapshot = load_directory(directory)
    except ConfigError as exc:
        log.error("SIGHUP: refused %s; still serving the last good snapshot\n%s", directory, exc)
        return
    cache.set_snapshot(None, snapshot)
    log.info("SIGHUP: applied %s from %s", snapshot, directory)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script and of ``python -m xdscore``."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.command == "serve":
        return anyio.run(_serve, args)
    if args.command == "analyze":
        return _analyze(args)
    return EXIT_USAGE
