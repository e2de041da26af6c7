"""The server runtime: streams, callbacks and limits on anyio."""

from ._callbacks import ServerCallbacks, StreamInfo
from ._server import ActiveStream, ClientGone, XdsServer

__all__ = ["ActiveStream", "ClientGone", "ServerCallbacks", "StreamInfo", "XdsServer"]
