"""The xDS protocol as pure state machines, for those who drive them themselves.

Four machines, one per side and protocol: [`SotwServer`][xdscore.protocol.SotwServer],
[`DeltaServer`][xdscore.protocol.DeltaServer], [`SotwClient`][xdscore.protocol.SotwClient],
[`DeltaClient`][xdscore.protocol.DeltaClient]. None of them does I/O, awaits, reads a clock or draws
a random number; time and nonces come from the caller. A server machine takes decoded requests
(``receive``, which returns [`Event`][xdscore.protocol.Event] values) and says what to send against
a [`ResourceView`][xdscore.protocol.ResourceView] (``poll``); a client machine turns what it wants
into requests and responses into ACKs and NACKs. The per-type rules are in one table
(`xdscore.protocol._state`). Importing this package loads neither anyio nor grpclib.
"""

from .._errors import GrpcStatus, LocalProtocolError, ProtocolError, RemoteProtocolError
from ..wire._records import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    ErrorDetail,
    Locality,
    Node,
    ResourceError,
)
from ..wire._resource import Resource
from ._delta_client import DeltaClient, DeltaClientTypeState
from ._delta_server import DeltaResponse, DeltaServer, DeltaTypeState
from ._events import (
    Event,
    NodeIdentified,
    ResponseAcked,
    ResponseNacked,
    StaleNonceSeen,
    SubscriptionChanged,
)
from ._features import (
    ASSUMED_FEATURES,
    NO_FEATURES,
    RESOURCE_ERRORS,
    RESOURCE_IN_SOTW,
    SUPPORTS_TTL,
    ClientFeatures,
)
from ._limits import StreamLimits
from ._sotw_client import SotwClient, SotwClientTypeState, Validator
from ._sotw_server import SotwResponse, SotwServer, SotwTypeState
from ._state import StreamState
from ._subscription import EVERYTHING, WILDCARD, Subscription
from ._view import ResourceView, Selection

__all__ = [
    "ASSUMED_FEATURES",
    "EVERYTHING",
    "NO_FEATURES",
    "RESOURCE_ERRORS",
    "RESOURCE_IN_SOTW",
    "SUPPORTS_TTL",
    "WILDCARD",
    "ClientFeatures",
    "DeltaClient",
    "DeltaClientTypeState",
    "DeltaDiscoveryRequest",
    "DeltaDiscoveryResponse",
    "DeltaResponse",
    "DeltaServer",
    "DeltaTypeState",
    "DiscoveryRequest",
    "DiscoveryResponse",
    "ErrorDetail",
    "ResourceError",
    "Event",
    "GrpcStatus",
    "Locality",
    "LocalProtocolError",
    "Node",
    "NodeIdentified",
    "ProtocolError",
    "RemoteProtocolError",
    "Resource",
    "ResourceView",
    "ResponseAcked",
    "ResponseNacked",
    "Selection",
    "SotwClient",
    "SotwClientTypeState",
    "SotwResponse",
    "SotwServer",
    "SotwTypeState",
    "StaleNonceSeen",
    "StreamLimits",
    "StreamState",
    "Subscription",
    "SubscriptionChanged",
    "Validator",
]
