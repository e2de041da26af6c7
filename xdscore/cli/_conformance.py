"""``xdscore conformance``: run the xDS conformance suite against a control plane."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, address, positive

if TYPE_CHECKING:
    from ..testing.conformance import Case, Driver

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``conformance`` and its flags."""
    parser = commands.add_parser(
        "conformance",
        help="check an xDS control plane against the protocol, case by case",
        description="Run the xDS conformance suite against a control plane: each case checks "
        "one clause of the protocol over real ADS streams (State-of-the-World and Delta) and "
        "the per-type services, and prints a line: passed, failed with the evidence and the "
        "trace, or skipped with why. Give the server as HOST:PORT (read-only cases; the "
        "others are skipped), or have the suite start it: --server-cmd on a directory of "
        "Envoy resources the suite writes, or --bench-cmd for a server speaking the "
        "benchmark stdin protocol. Exit status 0 when no case failed, 1 otherwise. See "
        "docs/conformance.md.",
    )
    parser.add_argument(
        "target", nargs="?", type=address, metavar="HOST:PORT", help="a running server (passive)"
    )
    drivers = parser.add_argument_group("starting the server under test")
    drivers.add_argument(
        "--server-cmd",
        metavar="CMD",
        help="start the server with this command line; {dir} is replaced by a directory of "
        "Envoy resources (the format of 'xdscore serve') that the suite fills and edits, "
        "{addr} by the HOST:PORT to listen on",
    )
    drivers.add_argument(
        "--config-dir",
        type=Path,
        metavar="DIR",
        help="with --server-cmd, the directory to write (default: a new temporary one)",
    )
    drivers.add_argument(
        "--bench-cmd",
        metavar="CMD",
        help="start a server speaking the benchmark protocol (prints 'LISTENING addr=', takes "
        "'push R E' on stdin); {addr}, {clusters} and {endpoints} are filled in",
    )
    tls = parser.add_argument_group("TLS (with HOST:PORT)")
    tls.add_argument("--tls", action="store_true", help="connect with TLS")
    tls.add_argument("--tls-ca", metavar="FILE", help="CA bundle to check the server with")
    tls.add_argument("--tls-cert", metavar="FILE", help="client certificate (mutual TLS)")
    tls.add_argument("--tls-key", metavar="FILE", help="its private key")
    tls.add_argument("--tls-server-name", metavar="NAME", help="the name the certificate must hold")
    tls.add_argument(
        "--tls-insecure", action="store_true", help="do not check the server's certificate"
    )
    selection = parser.add_argument_group("cases")
    selection.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PATTERN",
        help="run only the cases whose id matches (a prefix such as sotw/ or delta/nack, or "
        "a shell pattern); repeatable",
    )
    selection.add_argument(
        "--list", action="store_true", help="list the cases (with --verbose, their clauses)"
    )
    selection.add_argument("--verbose", action="store_true", help="with --list: clauses too")
    selection.add_argument(
        "--property",
        action="store_true",
        help="also run the property mode: generated request sequences checked against the "
        "protocol model (needs hypothesis)",
    )
    selection.add_argument(
        "--property-examples",
        type=positive(int),
        default=15,
        metavar="N",
        help="sequences the property mode tries per protocol (default 15)",
    )
    selection.add_argument(
        "--property-seed", type=int, metavar="N", help="random seed (default: a fixed sequence)"
    )
    timing = parser.add_argument_group("timing and identity")
    timing.add_argument(
        "--timeout",
        type=positive(float),
        default=30.0,
        metavar="SECONDS",
        help="the most one case may take (default 30)",
    )
    timing.add_argument(
        "--quiet-period",
        type=positive(float),
        default=0.5,
        metavar="SECONDS",
        help="how long the server must stay silent for silence to count (default 0.5)",
    )
    timing.add_argument(
        "--response-timeout",
        type=positive(float),
        default=5.0,
        metavar="SECONDS",
        help="how long a response the protocol calls for may take (default 5)",
    )
    timing.add_argument(
        "--node-id",
        metavar="ID",
        help="the node id every stream presents (default: a new one per stream), for a "
        "server that serves known nodes only",
    )
    timing.add_argument("--node-cluster", default="", metavar="NAME", help="the node's cluster")
    parser.add_argument("--junit", type=Path, metavar="FILE", help="also write JUnit XML here")


def _driver(args: argparse.Namespace) -> Driver | str:
    """The driver the flags ask for, or what is wrong with them."""
    from ..testing import conformance

    given = [args.target is not None, args.server_cmd is not None, args.bench_cmd is not None]
    if sum(given) != 1:
        return "give exactly one of HOST:PORT, --server-cmd or --bench-cmd"
    if args.config_dir is not None and args.server_cmd is None:
        return "--config-dir goes with --server-cmd"
    tls_flags = (args.tls_ca, args.tls_cert, args.tls_server_name)
    tls = args.tls or args.tls_insecure or any(f is not None for f in tls_flags)
    if tls and args.target is None:
        return "the TLS flags go with HOST:PORT"
    if (args.tls_cert is None) != (args.tls_key is None):
        return "give both --tls-cert and --tls-key"
    if args.server_cmd is not None:
        try:
            return conformance.DirectoryDriver(args.server_cmd, directory=args.config_dir)
        except conformance.DriverError as exc:
            return str(exc)
    if args.bench_cmd is not None:
        return conformance.BenchmarkDriver(args.bench_cmd)
    host, port = args.target
    context = None
    if tls:
        try:
            context = conformance.client_ssl_context(
                ca_file=args.tls_ca,
                cert_file=args.tls_cert,
                key_file=args.tls_key,
                verify=not args.tls_insecure,
            )
        except OSError as exc:
            return f"cannot read the TLS files: {exc}"
    return conformance.PassiveDriver(
        host, port, ssl_context=context, server_name=args.tls_server_name
    )


def _cases(args: argparse.Namespace) -> list[Case]:
    from ..testing import conformance

    pool = [*conformance.CASES, *(conformance.PROPERTY_CASES if args.property else [])]
    return conformance.select(args.only, pool)


async def run(args: argparse.Namespace) -> int:
    """Run (or list) the cases; the exit status."""
    from ..testing import conformance

    try:
        cases = _cases(args)
    except ValueError as exc:
        print(f"xdscore conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.list:
        print(conformance.case_listing(cases, verbose=args.verbose))
        return EXIT_OK
    driver = _driver(args)
    if isinstance(driver, str):
        print(f"xdscore conformance: {driver}", file=sys.stderr)
        return EXIT_USAGE
    driver.node_id = args.node_id
    settings = conformance.Settings(
        quiet=args.quiet_period,
        response_timeout=args.response_timeout,
        case_timeout=args.timeout,
        node_id=args.node_id,
        node_cluster=args.node_cluster,
        property_examples=args.property_examples,
        property_seed=args.property_seed,
    )
    try:
        async with driver:
            print(f"xdscore conformance: {len(cases)} cases against the {driver.describe()}")
            report = await conformance.run_suite(
                driver,
                cases=cases,
                settings=settings,
                on_result=lambda result: print(conformance.result_lines(result), flush=True),
            )
    except conformance.DriverError as exc:
        print(f"xdscore conformance: the server under test failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print()
    print(conformance.summary(report))
    if args.junit is not None:
        try:
            args.junit.write_bytes(conformance.junit_xml(report))
        except OSError as exc:
            print(f"xdscore conformance: cannot write {args.junit}: {exc}", file=sys.stderr)
            return EXIT_FAILED
    return EXIT_OK if report.ok else EXIT_FAILED
