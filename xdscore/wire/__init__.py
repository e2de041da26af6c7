"""The wire layer: type URLs, decoded records, resources and the envelope codec.

Everything that knows protobuf lives here. A transport of your own needs the codec
([`decode_request`][xdscore.wire.decode_request], `encode_sotw_response`, ...); a client needs its
twin ([`encode_request`][xdscore.wire.encode_request],
[`decode_response`][xdscore.wire.decode_response], ...).
"""

from ._client_codec import (
    decode_delta_response,
    decode_response,
    encode_delta_request,
    encode_request,
)
from ._codec import (
    decode_delta_request,
    decode_request,
    encode_delta_response,
    encode_sotw_response,
)
from ._messages import make_resource
from ._names import canonical_name
from ._node import make_node
from ._records import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    ErrorDetail,
    Locality,
    Node,
    ResourceError,
)
from ._references import Reference
from ._resource import RESOURCE_WRAPPER, Resource, content_version
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
    TYPE_URL_PREFIX,
    VIRTUAL_HOST,
    TypeInfo,
    all_types,
    by_short_name,
    type_info,
)

__all__ = [
    "RESOURCE_WRAPPER",
    "CLUSTER",
    "ENDPOINT",
    "EXTENSION_CONFIG",
    "LBENDPOINT",
    "LISTENER",
    "ROUTE",
    "RUNTIME",
    "SCOPED_ROUTE",
    "SECRET",
    "TYPE_URL_PREFIX",
    "VIRTUAL_HOST",
    "DeltaDiscoveryRequest",
    "DeltaDiscoveryResponse",
    "DiscoveryRequest",
    "DiscoveryResponse",
    "ErrorDetail",
    "ResourceError",
    "Locality",
    "Node",
    "Reference",
    "Resource",
    "TypeInfo",
    "all_types",
    "by_short_name",
    "canonical_name",
    "content_version",
    "decode_delta_request",
    "decode_delta_response",
    "decode_request",
    "decode_response",
    "encode_delta_request",
    "encode_delta_response",
    "encode_request",
    "encode_sotw_response",
    "make_node",
    "make_resource",
    "type_info",
]
