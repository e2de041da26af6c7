"""``xdscore analyze DIR``: the findings of xdscore.analysis for a config directory."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..analysis import Severity, analyze
from ..config import ConfigError, read_directory, with_scopes
from . import _descriptors
from ._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, directory_problem

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``analyze`` and its flags."""
    analyze_ = commands.add_parser(
        "analyze",
        help="check the Envoy resources in a directory without serving them",
        description="Report dangling references, duplicates, unused resources and the other "
        "findings of xdscore.analysis (see docs/analysis.md). Exits 0 when nothing of ERROR "
        "severity is found; 1 when something is, a file or scopes.yaml does not parse, or "
        "the directory holds no resources (what serve refuses, with the same status); 2 for "
        "a usage error, a DIR that does not exist among them.",
    )
    analyze_.add_argument("directory", type=Path, metavar="DIR")
    _descriptors.add_argument(analyze_)
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


def run(args: argparse.Namespace) -> int:
    """Run ``analyze``; the exit status."""
    directory: Path = args.directory
    refused = _descriptors.register(args)
    if refused is not None:
        print(f"xdscore analyze: {refused}", file=sys.stderr)
        return EXIT_USAGE
    missing = directory_problem(directory)
    if missing is not None:
        print(f"xdscore: cannot analyze {directory}: {missing}", file=sys.stderr)
        return EXIT_USAGE
    found, problems = read_directory(directory)
    if problems:
        print(f"xdscore: cannot analyze {directory}:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_FAILED
    if not found:
        # As serve refuses it: serving nothing would tell every client to delete everything.
        print(
            f"xdscore: {directory} holds no resources; serve refuses to serve nothing",
            file=sys.stderr,
        )
        return EXIT_FAILED
    report = analyze(found, complete=True)
    try:
        report = with_scopes(report, directory, found)
    except ConfigError as exc:
        print(f"xdscore: cannot analyze {directory}: {exc}", file=sys.stderr)
        return EXIT_FAILED
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
