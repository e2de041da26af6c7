"""xdscore: build xDS control planes for Envoy and proxyless gRPC, in asyncio Python.

This package holds what an embedder needs: resources, snapshots and caches, the server and
its transport, callbacks, errors and the type URL constants. The machines are in
:mod:`xdscore.protocol`, the cache protocols in :mod:`xdscore.cache`, the codec in
:mod:`xdscore.wire`, test helpers in :mod:`xdscore.testing`. Names are imported on first
use, so ``import xdscore.protocol`` alone loads no I/O library.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import TYPE_CHECKING, Any

from ._build import load_sources_only, pure_requested

if pure_requested():  # XDSCORE_PURE=1: the sources, even where compiled modules are present
    load_sources_only()

if TYPE_CHECKING:
    from ._errors import GrpcStatus, LocalProtocolError, ProtocolError, RemoteProtocolError
    from .cache import (
        Cache,
        LinearCache,
        MuxCache,
        ScopedCache,
        Snapshot,
        SnapshotCache,
        SnapshotError,
        by_node_id,
        same_for_all,
    )
    from .protocol import ResponseAcked, ResponseNacked, StreamLimits
    from .server import ServerCallbacks, StreamInfo, XdsServer
    from .transport import GrpclibTransport, Http2Transport
    from .wire import (
        CLUSTER,
        ENDPOINT,
        EXTENSION_CONFIG,
        LBENDPOINT,
        LISTENER,
        ROUTE,
        RUNTIME,
        SCOPED_ROUTE,
        SECRET,
        VIRTUAL_HOST,
        Node,
        Resource,
        make_resource,
    )

__all__ = [
    "CLUSTER",
    "ENDPOINT",
    "EXTENSION_CONFIG",
    "LBENDPOINT",
    "LISTENER",
    "ROUTE",
    "RUNTIME",
    "SCOPED_ROUTE",
    "SECRET",
    "VIRTUAL_HOST",
    "Cache",
    "GrpcStatus",
    "GrpclibTransport",
    "Http2Transport",
    "LinearCache",
    "LocalProtocolError",
    "MuxCache",
    "Node",
    "ProtocolError",
    "RemoteProtocolError",
    "Resource",
    "ResponseAcked",
    "ResponseNacked",
    "ScopedCache",
    "ServerCallbacks",
    "Snapshot",
    "SnapshotCache",
    "SnapshotError",
    "StreamInfo",
    "StreamLimits",
    "XdsServer",
    "__version__",
    "by_node_id",
    "make_resource",
    "same_for_all",
]

_HOMES = {
    **dict.fromkeys(
        ["GrpcStatus", "LocalProtocolError", "ProtocolError", "RemoteProtocolError"],
        "._errors",
    ),
    **dict.fromkeys(
        [
            "Cache",
            "LinearCache",
            "MuxCache",
            "ScopedCache",
            "Snapshot",
            "SnapshotCache",
            "SnapshotError",
        ],
        ".cache",
    ),
    **dict.fromkeys(["by_node_id", "same_for_all"], ".cache"),
    **dict.fromkeys(["ResponseAcked", "ResponseNacked", "StreamLimits"], ".protocol"),
    **dict.fromkeys(["ServerCallbacks", "StreamInfo", "XdsServer"], ".server"),
    "GrpclibTransport": ".transport",
    "Http2Transport": ".transport",
    **dict.fromkeys(
        [
            "CLUSTER",
            "ENDPOINT",
            "EXTENSION_CONFIG",
            "LBENDPOINT",
            "LISTENER",
            "ROUTE",
            "RUNTIME",
            "SCOPED_ROUTE",
            "SECRET",
            "VIRTUAL_HOST",
            "Node",
            "Resource",
            "make_resource",
        ],
        ".wire",
    ),
}

try:
    __version__ = importlib.metadata.version("xdscore")
except importlib.metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'xdscore' has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
