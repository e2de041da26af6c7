"""The etcd client: ``aetcd``, imported on first use, and the errors of talking to etcd."""

from __future__ import annotations

import urllib.parse
from typing import Any

__all__ = [
    "EXTRA_HINT",
    "EtcdClient",
    "EtcdError",
    "aetcd",
    "client_errors",
    "connect",
    "describe",
    "parse_url",
]

EXTRA_HINT = "install the etcd extra: pip install 'xdscore[etcd]'"

EtcdClient = Any
"""An ``aetcd.Client`` (aetcd ships no type information)."""

CHANNEL_OPTIONS = {
    # A whole prefix is read in one range response: allow more than grpc's 4 MiB default
    # (the directory loader's limit for a whole config is 64 MiB).
    "grpc.max_receive_message_length": 64 * 1024 * 1024,
    # Notice an etcd that vanished without closing the connection (a partition, a host that
    # died): ping every 10 s, give up after 5 s without an answer. etcd allows pings every
    # 5 s by default (--grpc-keepalive-min-time).
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.keepalive_permit_without_calls": 1,
    # grpc's own reconnection backoff grows to 2 minutes by default, during which calls fail
    # without trying: keep it short, so a restarted etcd is seen within seconds.
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 2_000,
}


class EtcdError(Exception):
    """etcd could not be reached, or refused a request; the message says which and why."""


def aetcd() -> Any:
    """The ``aetcd`` module; [`EtcdError`][xdscore.etcd.EtcdError] naming the extra when it is not
    installed."""
    try:
        import aetcd as module
    except ImportError as exc:
        raise EtcdError(f"etcd support needs the aetcd package ({exc}): {EXTRA_HINT}") from None
    return module


def parse_url(url: str) -> tuple[str, int]:
    """``(host, port)`` of ``http://HOST:PORT`` (or ``HOST:PORT``); ``ValueError`` otherwise."""
    text = url if "//" in url else f"http://{url}"
    parts = urllib.parse.urlsplit(text)
    if parts.scheme == "https":
        raise ValueError(f"{url!r}: TLS to etcd is not supported (aetcd 1.0 has no TLS); use http")
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"expected an etcd URL such as http://127.0.0.1:2379, got {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r}: the port is not a number") from None
    return parts.hostname, port or 2379


def connect(url: str, *, timeout: float = 10.0) -> EtcdClient:
    """An ``aetcd.Client`` for one etcd endpoint (it connects on first use, and its channel
    reconnects by itself). ``timeout`` bounds each request other than a watch."""
    host, port = parse_url(url)
    return aetcd().Client(host=host, port=port, timeout=timeout, options=dict(CHANNEL_OPTIONS))


def describe(exc: BaseException) -> str:
    """A one-line reason for an etcd client error."""
    details = getattr(exc, "details", None)
    code = getattr(exc, "code", None)
    if callable(details) and callable(code):  # a grpc error straight from a stub
        text = f"{code().name}: {details()}"
    else:
        text = str(exc).strip() or type(exc).__name__
    if "too many operations in txn request" in text:
        text += " (raise etcd's --max-txn-ops, default 128: one apply is one transaction)"
    elif "request is too large" in text:
        text += " (raise etcd's --max-request-bytes, default 1.5 MiB: one apply is one request)"
    return text


def client_errors() -> tuple[type[BaseException], ...]:
    """What the client raises when etcd is unreachable or refuses a request."""
    module = aetcd()
    return (module.ClientError, module.rpc.AioRpcError, TimeoutError)
