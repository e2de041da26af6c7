"""The xdscore command line: serve a directory of Envoy resources (or what etcd holds) over
xDS, write a directory to etcd, analyze it, ask a running control plane about its proxies,
compare one proxy with it, and check any control plane's conformance to the protocol."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import anyio

from ..server import loop_options
from . import _analyze, _apply, _bootstrap, _conformance, _diff, _serve, _status, _wait
from ._common import EXIT_USAGE, LOG_LEVELS, set_up_logging

__all__ = ["console", "main"]

EXAMPLES = {
    "xdscore": """\
  xdscore serve ./config --listen 127.0.0.1:18000
  xdscore analyze ./config
  xdscore status --server 127.0.0.1:18000
  xdscore serve --help""",
    "serve": """\
  xdscore serve ./config --listen 127.0.0.1:18000 --admin 127.0.0.1:9100
  xdscore serve --etcd http://127.0.0.1:2379 --prefix /xds --listen :18000
  xdscore serve ./config --tls-cert server.pem --tls-key server-key.pem --client-ca ca.pem""",
    "apply": """\
  xdscore apply ./config --etcd http://127.0.0.1:2379 --dry-run
  xdscore apply ./config --etcd http://127.0.0.1:2379 --prefix /xds
  xdscore apply ./config --etcd http://127.0.0.1:2379 --wait \\
      --admin 10.0.0.5:9000 --admin 10.0.0.6:9000 --timeout 2m""",
    "wait": """\
  xdscore wait --admin 127.0.0.1:9000
  xdscore wait --admin 10.0.0.5:9000 --admin 10.0.0.6:9000 --revision 1a2b3c4d5e6f7a8b""",
    "analyze": """\
  xdscore analyze ./config
  xdscore analyze ./config --format json --min-severity warning""",
    "status": """\
  xdscore status --server 127.0.0.1:18000
  xdscore status --server 127.0.0.1:18000 --node edge- --format json
  xdscore status --etcd http://127.0.0.1:2379 --prefix /xds
  xdscore status --server 10.0.0.5:18000 --server 10.0.0.6:18000""",
    "dump": """\
  xdscore dump --server 127.0.0.1:18000 --node envoy-1 --type cds
  xdscore dump --etcd http://127.0.0.1:2379 --prefix /xds --node envoy-1""",
    "diff": """\
  xdscore diff --server 127.0.0.1:18000 --envoy-admin 127.0.0.1:9901
  xdscore diff --server 127.0.0.1:18000 --admin 127.0.0.1:9100 --envoy-admin 127.0.0.1:9901
  xdscore diff --etcd http://127.0.0.1:2379 --prefix /xds --envoy-admin 127.0.0.1:9901""",
    "bootstrap": """\
  xdscore bootstrap envoy --server 127.0.0.1:18000 --node edge-1 > envoy.yaml
  envoy -c envoy.yaml
  xdscore bootstrap grpc --server xds.internal:18000 --node checkout > xds-bootstrap.json
  GRPC_XDS_BOOTSTRAP=xds-bootstrap.json python client.py  # then dial xds:///LISTENER""",
    "conformance": """\
  xdscore conformance 127.0.0.1:18000
  xdscore conformance xds.internal:443 --tls --tls-ca ca.pem --junit conformance.xml
  xdscore conformance --server-cmd 'xdscore serve {dir} --listen {addr} --debounce-ms 20'
  xdscore conformance --bench-cmd './gocp-bench-server -addr {addr} -clusters {clusters} \\
      -endpoints {endpoints} -versions single' --only delta/ --property
  xdscore conformance --list --verbose""",
    "envoy": """\
  xdscore bootstrap envoy --server 127.0.0.1:18000 --node edge-1 --cluster edge > envoy.yaml
  xdscore bootstrap envoy --server xds.internal:18000 --node edge-1 --delta --format json
  xdscore bootstrap envoy --server xds.internal:18000 --node edge-1 \\
      --tls-ca ca.pem --tls-cert edge-1.pem --tls-key edge-1-key.pem""",
    "grpc": """\
  xdscore bootstrap grpc --server 127.0.0.1:18000 --node checkout > xds-bootstrap.json
  export GRPC_XDS_BOOTSTRAP=$PWD/xds-bootstrap.json
  xdscore bootstrap grpc --server xds.internal:18000 --node checkout --tls-ca ca.pem""",
}
"""What each command's --help ends with."""

EXIT_STATUSES = """\
  0  done: serve stopped by a signal, analyze found nothing of ERROR severity, status
     and dump answered, diff found Envoy in sync, wait (and apply --wait) saw every
     proxy hold the revision
  1  the command ran and could not do its work: a configuration serve refuses (analyze
     exits 1 for the same directories), an address it cannot listen on, a server status
     or dump cannot reach (or that has no such node); with --etcd or a repeated
     --server, a replica status, dump or diff cannot ask, or none registered; for diff,
     Envoy differs; for wait, a proxy rejected the revision or did not answer in time,
     or a replica could not be asked or never adopted it
  2  the command line is wrong: an unknown flag, a bad value, flags that do not go
     together (scopes.yaml selecting on a node field the identity flags leave free among
     them), a DIR or TLS file that does not exist or does not load; for diff, Envoy or
     the one control plane given cannot be asked"""
"""What ``xdscore --help`` says of the exit statuses (docs/operations.md says it too)."""


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (exit status 2), and help with examples."""

    examples: str = ""
    statuses: str = ""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(EXIT_USAGE, f"{self.prog}: {text} (see '{self.prog} --help')\n")

    def format_help(self) -> str:
        text = super().format_help()
        if self.examples:
            text += f"\nexamples:\n{self.examples}\n"
        if self.statuses:
            text += f"\nexit status:\n{self.statuses}\n"
        return text


def _global_flags(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The flags every command takes, before or after its name. On the commands' parsers
    they default to nothing, so that a flag given before the command is not overwritten."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=LOG_LEVELS,
        default=default("info"),
        help="debug, info (default), warning, error or critical; logs go to stderr",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=default("text"),
        help="text lines, or one JSON object per line (default text)",
    )
    parser.add_argument(
        "--verbose-logger",
        action="append",
        default=default([]),
        metavar="NAME",
        help="let this library logger (grpclib, h2, hpack, uvicorn, ...) log at DEBUG; "
        "repeatable. They stay at WARNING otherwise",
    )


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command's parser below ``parser`` (nested ones included), with its name."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((name, sub))
                found.extend(_subparsers(sub))
    return found


class _Version(argparse.Action):
    """``--version``: the version and which build is loaded (compiled, pure, or partly),
    worked out only when asked for (it imports every module the build lists)."""

    def __init__(self, option_strings: Sequence[str], dest: str) -> None:
        super().__init__(
            option_strings, dest, nargs=0, help="print the version and the build loaded, and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        from .. import __version__
        from .._build import describe, loaded_build

        print(f"xdscore {__version__} ({describe(loaded_build())})")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="xdscore", description=__doc__)
    parser.examples = EXAMPLES["xdscore"]
    parser.statuses = EXIT_STATUSES
    parser.add_argument("--version", action=_Version)
    _global_flags(parser, defaults=True)
    commands: argparse._SubParsersAction[argparse.ArgumentParser] = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    _serve.add_parser(commands)
    _apply.add_parser(commands)
    _analyze.add_parser(commands)
    _status.add_parsers(commands)
    _diff.add_parser(commands)
    _wait.add_parser(commands)
    _bootstrap.add_parser(commands)
    _conformance.add_parser(commands)
    for name, sub in _subparsers(parser):
        assert isinstance(sub, _Parser)
        sub.examples = sub.examples or EXAMPLES.get(name, "")
        _global_flags(sub, defaults=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status (usage errors raise ``SystemExit(2)``)."""
    args = _parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for serve --workers
    set_up_logging(args.log_level, args.log_format, args.verbose_logger)
    if args.command == "serve":
        try:
            options = loop_options(args.loop)
        except RuntimeError as exc:
            print(f"xdscore serve: {exc}", file=sys.stderr)
            return EXIT_USAGE
        return anyio.run(_serve.run, args, backend_options=options)
    if args.command == "apply":
        return anyio.run(_apply.run, args)
    if args.command == "analyze":
        return _analyze.run(args)
    if args.command in _status.COMMANDS:
        return anyio.run(_status.run, args)
    if args.command == "diff":
        return anyio.run(_diff.run, args)
    if args.command == "wait":
        return anyio.run(_wait.run, args)
    if args.command == "bootstrap":
        return _bootstrap.run(args)
    if args.command == "conformance":
        return anyio.run(_conformance.run, args)
    return EXIT_USAGE


def console() -> NoReturn:
    """Entry point of the ``xdscore`` console script and of ``python -m xdscore``.

    Once the command is done, the process exits without tearing the interpreter down: with
    every xDS message module imported that takes about a quarter of a second, which would
    double the time ``xdscore serve`` takes to stop on SIGTERM. Output is flushed first.
    """
    try:
        code = main()
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            code = code or 1
    os._exit(code)
