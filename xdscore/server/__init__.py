"""The server runtime on anyio: the stream registry, the stream driver and callbacks."""

from ._authorization import Authorizer, PeerIdentity, SpiffeNodePolicy
from ._callbacks import ServerCallbacks, StreamInfo
from ._driver import ByteStream, ClientDriver, OnResponse, ServerDriver
from ._server import ActiveStream, XdsServer

__all__ = [
    "ActiveStream",
    "Authorizer",
    "ByteStream",
    "ClientDriver",
    "OnResponse",
    "PeerIdentity",
    "ServerCallbacks",
    "ServerDriver",
    "SpiffeNodePolicy",
    "StreamInfo",
    "XdsServer",
]
