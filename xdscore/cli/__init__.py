"""The xdscore command line: serve a directory of Envoy resources (or what etcd holds) over
xDS, write a directory to etcd, analyze it, ask a running control plane about its proxies,
and compare one proxy with it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import anyio

from . import _analyze, _apply, _diff, _serve, _status
from ._common import EXIT_USAGE, set_up_logging

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xdscore", description=__doc__)
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text lines, or one JSON object per line (default text)",
    )
    parser.add_argument(
        "--verbose-logger",
        action="append",
        default=[],
        metavar="NAME",
        help="let this library logger (grpclib, h2, hpack, uvicorn, ...) log at DEBUG; "
        "repeatable. They stay at WARNING otherwise",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _serve.add_parser(commands)
    _apply.add_parser(commands)
    _analyze.add_parser(commands)
    _status.add_parsers(commands)
    _diff.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script and of ``python -m xdscore``."""
    args = _parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for serve --workers
    set_up_logging(args.log_level, args.log_format, args.verbose_logger)
    if args.command == "serve":
        return anyio.run(_serve.run, args)
    if args.command == "apply":
        return anyio.run(_apply.run, args)
    if args.command == "analyze":
        return _analyze.run(args)
    if args.command in _status.COMMANDS:
        return anyio.run(_status.run, args)
    if args.command == "diff":
        return anyio.run(_diff.run, args)
    return EXIT_USAGE
