"""What the commands share: exit statuses, address parsing, logging set-up."""

from __future__ import annotations

import argparse
import logging
import math
import re
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pythonjsonlogger.json import JsonFormatter

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "LOG_LEVELS",
    "QUIET_LOGGERS",
    "add_client_tls",
    "address",
    "client_ssl_context",
    "connect_etcd",
    "directory_problem",
    "duration",
    "fraction",
    "non_negative",
    "positive",
    "readable",
    "set_up_logging",
    "ssl_problem",
]

EXIT_OK = 0
"""Done: served until told to stop, nothing of ERROR severity found, the answer printed."""
EXIT_FAILED = 1
"""The command ran and could not do its work: a configuration refused (it does not parse,
its references dangle, it holds nothing, ERROR findings), an address it cannot listen on, a
server it cannot reach."""
EXIT_USAGE = 2
"""The command line is wrong: an unknown flag, a bad value, flags that do not go together,
or a file or directory it names that does not exist or does not load (TLS files, DIR)."""

QUIET_LOGGERS = ("grpclib", "h2", "hpack", "uvicorn", "watchfiles", "asyncio")
"""Libraries whose debug output (frame dumps, each file event) stays off unless named."""


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def connect_etcd(url: str, cannot: str) -> Any:
    """An etcd client for ``url``, or, after saying why there is none (``cannot``: what the
    command cannot do), the exit status: a bad URL is a usage error."""
    from ..etcd import EtcdError, connect

    try:
        return connect(url)
    except ValueError as exc:
        print(f"xdscore: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except EtcdError as exc:
        print(f"xdscore: {cannot}: {exc}", file=sys.stderr)
        return EXIT_FAILED


def directory_problem(path: Path) -> str | None:
    """Why ``path`` is no directory a command can read (``None``: it is one)."""
    if path.is_dir():
        return None
    return "not a directory" if path.exists() else "no such directory"


def readable(flag: str, path: Path) -> None:
    """Raise :class:`ValueError` naming ``flag`` and ``path`` when the file cannot be read."""
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {path}: {exc.strerror or exc}") from None


def ssl_problem(error: ssl.SSLError) -> str:
    """What OpenSSL said, without the line of CPython's source it came from."""
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(error.strerror or error))


def add_client_tls(parser: argparse.ArgumentParser) -> None:
    """The flags of a command that asks a server over TLS: ``--tls-ca``, ``--tls-cert``,
    ``--tls-key`` (read by :func:`client_ssl_context`)."""
    tls = parser.add_argument_group(
        "TLS to the server",
        "A server with --client-ca needs a client certificate; CSDS tells it about its own "
        "node only, unless the server lists its SPIFFE ID with --operator-id.",
    )
    tls.add_argument(
        "--tls-ca", type=Path, metavar="FILE", help="CA bundle to check the server with"
    )
    tls.add_argument(
        "--tls-cert", type=Path, metavar="FILE", help="client certificate (mutual TLS)"
    )
    tls.add_argument("--tls-key", type=Path, metavar="FILE", help="its private key")


def client_ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context the flags of :func:`add_client_tls` ask for (``None``: plaintext);
    :class:`ValueError` names the flag at fault."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValueError("give both --tls-cert and --tls-key")
    if args.tls_ca is None:
        if args.tls_cert is not None:
            raise ValueError("--tls-cert and --tls-key need --tls-ca")
        return None
    readable("--tls-ca", args.tls_ca)
    try:
        context = ssl.create_default_context(cafile=str(args.tls_ca))
    except ssl.SSLError as exc:
        raise ValueError(
            f"--tls-ca {args.tls_ca} holds no PEM CA certificate: {ssl_problem(exc)}"
        ) from None
    context.set_alpn_protocols(["h2"])
    if args.tls_cert is not None:
        readable("--tls-cert", args.tls_cert)
        readable("--tls-key", args.tls_key)
        try:
            context.load_cert_chain(args.tls_cert, args.tls_key)
        except ssl.SSLError as exc:
            raise ValueError(
                f"--tls-cert {args.tls_cert} and --tls-key {args.tls_key} are not a PEM "
                f"certificate and its key: {ssl_problem(exc)}"
            ) from None
    return context


def address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` means every interface, ``[::1]:PORT`` is IPv6) as a pair;
    the port from 0 to 65535."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    if int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {text!r}")
    host = host.strip("[]")
    if any(c.isspace() for c in host):
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "0.0.0.0", int(port)


def duration(text: str) -> float:
    """``90s``, ``30m``, ``1h``, ``500ms`` or plain seconds, as seconds (0 or more)."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    number, unit = text, "s"
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix):
            number, unit = text[: -len(suffix)], suffix
            break
    try:
        value = float(number) * units[unit]
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90s, 30m or 1h, got {text!r}"
        )
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a duration of 0 or more, got {text!r}")
    return value


def _number(kind: type[int] | type[float], text: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        word = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {word}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` above 0."""

    def parse(text: str) -> float:
        value = _number(kind, text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    return parse


def non_negative(kind: type[int] | type[float]) -> Callable[[str], float]:
    """An argparse type: a number of ``kind``, 0 or more."""

    def parse(text: str) -> float:
        value = _number(kind, text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"expected a number of 0 or more, got {text!r}")
        return value

    return parse


def fraction(text: str) -> float:
    """An argparse type: a number above 0 and at most 1."""
    value = _number(float, text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction above 0 and at most 1, got {text!r}")
    return value


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
