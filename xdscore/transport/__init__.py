"""Transports: thin adapters between the outside world and the server runtime.

[`Http2Transport`][xdscore.transport.Http2Transport] (xdscore's own HTTP/2 server,
`xdscore.transport.h2`) and [`GrpclibTransport`][xdscore.transport.GrpclibTransport] (grpclib's,
`xdscore.transport.grpclib`) serve xDS and CSDS over gRPC (TLS with
[`server_ssl_context`][xdscore.transport.server_ssl_context], reloaded on change by
[`CertificateFiles`][xdscore.transport.CertificateFiles]); [`AdminApp`][xdscore.transport.AdminApp]
is the admin HTTP endpoint as an ASGI app, which [`serve_admin`][xdscore.transport.serve_admin]
serves with uvicorn. Names are imported on first use, so that ``Http2Transport`` loads neither
grpclib nor h2.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._admin import AdminApp, serve_admin
    from ._limits import ConnectionLimits
    from ._tls import CertificateFiles, server_ssl_context
    from .grpclib import GrpclibTransport
    from .h2 import Http2Transport

__all__ = [
    "AdminApp",
    "CertificateFiles",
    "ConnectionLimits",
    "GrpclibTransport",
    "Http2Transport",
    "serve_admin",
    "server_ssl_context",
]

_HOMES = {
    "AdminApp": "._admin",
    "CertificateFiles": "._tls",
    "ConnectionLimits": "._limits",
    "GrpclibTransport": ".grpclib",
    "Http2Transport": ".h2",
    "serve_admin": "._admin",
    "server_ssl_context": "._tls",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
