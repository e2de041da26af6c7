"""Transports: thin adapters between the outside world and the server runtime.

:class:`GrpclibTransport` serves xDS and CSDS over gRPC; :class:`AdminApp` is the admin
HTTP endpoint as an ASGI app, which :func:`serve_admin` serves with uvicorn.
"""

from ._admin import AdminApp, serve_admin
from ._grpclib import GrpclibTransport

__all__ = ["AdminApp", "GrpclibTransport", "serve_admin"]
