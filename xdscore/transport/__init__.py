"""Transports: thin adapters between the outside world and the server runtime.

:class:`Http2Transport` (xdscore's own HTTP/2 server) and :class:`GrpclibTransport`
(grpclib's) serve xDS and CSDS over gRPC (TLS with
:func:`server_ssl_context`, reloaded on change by :class:`CertificateFiles`);
:class:`AdminApp` is the admin HTTP endpoint as an ASGI app, which :func:`serve_admin`
serves with uvicorn.
"""

from ._admin import AdminApp, serve_admin
from ._grpclib import GrpclibTransport
from ._h2_transport import Http2Transport
from ._http2 import ConnectionLimits
from ._tls import CertificateFiles, server_ssl_context

__all__ = [
    "AdminApp",
    "CertificateFiles",
    "ConnectionLimits",
    "GrpclibTransport",
    "Http2Transport",
    "serve_admin",
    "server_ssl_context",
]
