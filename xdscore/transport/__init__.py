"""Transports: thin adapters between a gRPC library and the server runtime."""

from ._grpclib import GrpclibTransport

__all__ = ["GrpclibTransport"]
