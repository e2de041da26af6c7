"""The server runtime on anyio: the stream registry, the stream driver and callbacks."""

from ._authorization import Authorizer, PeerIdentity, SpiffeNodePolicy
from ._callbacks import ServerCallbacks, StreamInfo
from ._driver import ByteStream, ClientDriver, OnResponse, ServerDriver
from ._metrics import Metrics
from ._server import ActiveStream, XdsServer
from ._status import NackRecord, StreamStatus, SyncState, TypeStatus

__all__ = [
    "ActiveStream",
    "Authorizer",
    "ByteStream",
    "ClientDriver",
    "Metrics",
    "NackRecord",
    "OnResponse",
    "PeerIdentity",
    "ServerCallbacks",
    "ServerDriver",
    "SpiffeNodePolicy",
    "StreamInfo",
    "StreamStatus",
    "SyncState",
    "TypeStatus",
    "XdsServer",
]
