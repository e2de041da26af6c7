"""xdscore: build xDS control planes for Envoy and proxyless gRPC, in asyncio Python."""

from ._delta import DeltaResponse, DeltaServerStream, DeltaTypeStatus
from ._errors import GrpcStatus, LocalProtocolError, ProtocolError, RemoteProtocolError
from ._events import (
    Event,
    NodeIdentified,
    ResponseAcked,
    ResponseNacked,
    StaleNonceSeen,
    SubscriptionChanged,
)
from ._limits import StreamLimits
from ._records import DeltaDiscoveryRequest, DiscoveryRequest, ErrorDetail, Locality, Node
from ._resource import Resource, Selection
from ._sotw import SotwResponse, SotwServerStream, TypeStatus
from ._state import StreamState
from ._subscription import WILDCARD, Subscription
from ._typeurls import (
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
    TypeInfo,
    all_types,
    by_short_name,
    type_info,
)
from ._view import ResourceView
from .cache import (
    Cache,
    LinearCache,
    MuxCache,
    Snapshot,
    SnapshotCache,
    SnapshotError,
    by_node_id,
    same_for_all,
)
from .server import ServerCallbacks, StreamInfo, XdsServer
from .transport import GrpclibTransport
from .wire._codec import make_node
from .wire._messages import make_resource

__version__ = "0.1.0"

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
    "WILDCARD",
    "Cache",
    "DeltaDiscoveryRequest",
    "DeltaResponse",
    "DeltaServerStream",
    "DeltaTypeStatus",
    "DiscoveryRequest",
    "ErrorDetail",
    "Event",
    "GrpcStatus",
    "GrpclibTransport",
    "LinearCache",
    "Locality",
    "LocalProtocolError",
    "MuxCache",
    "Node",
    "NodeIdentified",
    "ProtocolError",
    "RemoteProtocolError",
    "Resource",
    "ResourceView",
    "ResponseAcked",
    "ResponseNacked",
    "Selection",
    "ServerCallbacks",
    "Snapshot",
    "SnapshotCache",
    "SnapshotError",
    "SotwResponse",
    "SotwServerStream",
    "StaleNonceSeen",
    "StreamInfo",
    "StreamLimits",
    "StreamState",
    "Subscription",
    "SubscriptionChanged",
    "TypeInfo",
    "TypeStatus",
    "XdsServer",
    "__version__",
    "all_types",
    "by_node_id",
    "by_short_name",
    "make_node",
    "make_resource",
    "same_for_all",
    "type_info",
]
