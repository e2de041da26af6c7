"""The server runtime: streams, callbacks and limits on anyio."""

from ._callbacks import ServerCallbacks, StreamInfo
from ._server import ActiveStream, XdsServer

__all__ = ["ActiveStream", "ServerCallbacks", "StreamInfo", "XdsServer"]
