"""The grpclib adapter: :class:`GrpclibTransport` (grpclib's server, held to the same bounds
and request checks as xdscore's own), and the grpclib client the CLI uses."""

from .transport import GrpclibTransport

__all__ = ["GrpclibTransport"]
