"""Transports: thin adapters between the outside world and the server runtime.

:class:`Http2Transport` (xdscore's own HTTP/2 server, :mod:`xdscore.transport.h2`) and
:class:`GrpclibTransport` (grpclib's, :mod:`xdscore.transport.grpclib`) serve xDS and CSDS
over gRPC (TLS with :func:`server_ssl_context`, reloaded on change by
:class:`CertificateFiles`); :class:`AdminApp` is the admin HTTP endpoint as an ASGI app,
which :func:`serve_admin` serves with uvicorn. Names are imported on first use, so that
``Http2Transport`` loads neither grpclib nor h2.
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
