"""The server runtime on asyncio: the stream registry, each stream's session and driver,
the observer of what streams do, and callbacks."""

from ._admission import PushSlots, ServerLimits
from ._authorization import (
    Authorizer,
    OperatorCheck,
    PeerIdentity,
    ResourceAuthorizer,
    SpiffeNodePolicy,
    SpiffeOperators,
)
from ._callbacks import ServerCallbacks, StreamInfo
from ._catch_up import DEFAULT_CATCH_UP_TIMEOUT, CatchUp
from ._client_driver import ClientDriver, OnResponse
from ._collector import DEFAULT_YOUNG_THRESHOLD, tune_collector
from ._driver import ServerDriver
from ._loop import LOOPS, LoopChoice, loop_options
from ._metrics import Metrics
from ._pacer import Pacing
from ._rebalance import REBALANCE_MESSAGE, Rebalancing
from ._server import ActiveStream, XdsServer
from ._status import NackRecord, StreamStatus, SyncState, TypeStatus
from ._stream import ByteStream

__all__ = [
    "DEFAULT_CATCH_UP_TIMEOUT",
    "DEFAULT_YOUNG_THRESHOLD",
    "LOOPS",
    "REBALANCE_MESSAGE",
    "ActiveStream",
    "Authorizer",
    "ResourceAuthorizer",
    "ByteStream",
    "CatchUp",
    "ClientDriver",
    "LoopChoice",
    "Metrics",
    "NackRecord",
    "OnResponse",
    "OperatorCheck",
    "Pacing",
    "PeerIdentity",
    "PushSlots",
    "Rebalancing",
    "ServerCallbacks",
    "ServerDriver",
    "ServerLimits",
    "SpiffeNodePolicy",
    "SpiffeOperators",
    "StreamInfo",
    "StreamStatus",
    "SyncState",
    "TypeStatus",
    "XdsServer",
    "loop_options",
    "tune_collector",
]
