"""What the transports share: the gRPC methods they serve (ADS, every per-type discovery
service, CSDS) and how they listen."""

from __future__ import annotations

import asyncio
import socket
from typing import Literal

import attrs

from ..wire._typeurls import all_types

__all__ = ["Method", "let_go", "listening_socket", "served_methods"]

_ADS = "envoy.service.discovery.v3.AggregatedDiscoveryService"
_CSDS = "envoy.service.status.v3.ClientStatusDiscoveryService"

Kind = Literal["stream", "fetch", "status_stream", "status_fetch"]


@attrs.frozen
class Method:
    """One method: its path, what serves it, the type it is for (``None``: ADS, CSDS)."""

    path: str
    kind: Kind
    type_url: str | None = None
    delta: bool = False

    @property
    def unary(self) -> bool:
        return self.kind in ("fetch", "status_fetch")


def served_methods() -> list[Method]:
    """Every method, from the type registry's service and method names."""
    methods = [
        Method(f"/{_ADS}/StreamAggregatedResources", "stream"),
        Method(f"/{_ADS}/DeltaAggregatedResources", "stream", delta=True),
    ]
    for info in all_types():
        if info.service is None:
            continue
        if info.sotw_method is not None:
            methods.append(Method(f"/{info.service}/{info.sotw_method}", "stream", info.type_url))
        if info.delta_method is not None:
            path = f"/{info.service}/{info.delta_method}"
            methods.append(Method(path, "stream", info.type_url, delta=True))
        if info.fetch_method is not None:
            methods.append(Method(f"/{info.service}/{info.fetch_method}", "fetch", info.type_url))
    methods.append(Method(f"/{_CSDS}/StreamClientStatus", "status_stream"))
    methods.append(Method(f"/{_CSDS}/FetchClientStatus", "status_fetch"))
    return methods


ACCEPT_BACKLOG = 65_535
"""Asked of ``listen()``; the kernel caps it at ``net.core.somaxconn``."""


def listening_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    """A non-blocking socket listening on ``host:port`` (IPv6 for a host with a colon);
    ``reuse_port`` sets SO_REUSEPORT, so that several processes listen on one port.

    The accept queue is as long as the kernel allows (``net.core.somaxconn``): when
    thousands of proxies reconnect at once, connections the queue cannot hold are dropped
    or reset by the kernel before the server sees them, and each costs its client a
    reconnect backoff.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server(
        (host, port), family=family, backlog=ACCEPT_BACKLOG, reuse_port=reuse_port
    )
    sock.setblocking(False)
    return sock


def let_go(transport: asyncio.BaseTransport | None) -> None:
    """Break the one reference cycle asyncio's own socket transport keeps once its
    connection is lost (it holds its read callback, a bound method of itself), so that the
    transport and its socket go by reference counting, not at a full collection, which a
    busy server runs rarely. uvloop's transports keep none."""
    state = getattr(transport, "__dict__", None)
    if state is not None and "_read_ready_cb" in state:
        state["_read_ready_cb"] = None
