"""What the commands share: exit statuses, address parsing, logging set-up."""

from __future__ import annotations

import argparse
import logging
import sys

from pythonjsonlogger.json import JsonFormatter

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "QUIET_LOGGERS", "address", "set_up_logging"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

QUIET_LOGGERS = ("grpclib", "h2", "hpack", "uvicorn", "watchfiles", "asyncio")
"""Libraries whose debug output (frame dumps, each file event) stays off unless named."""


def address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` means every interface) as a pair."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def set_up_logging(level: str, log_format: str, verbose: list[str]) -> None:
    """Log to stderr at ``level``, as text or JSON lines; libraries stay at WARNING
    unless named in ``verbose``."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(
            JsonFormatter(
                "%(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp="time",
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        if name not in verbose:
            logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    for name in verbose:
        logging.getLogger(name).setLevel(logging.DEBUG)
