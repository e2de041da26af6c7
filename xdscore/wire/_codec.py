"""The codec for the xDS envelope messages, on the protobuf runtime (``xds-protos``).

Requests are decoded into the library's own records; responses are framed from bytes that
were encoded once (see :mod:`xdscore.wire._framing`), so building a response for one more
stream costs a few small concatenations.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping

from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import DecodeError

from .._errors import GrpcStatus, RemoteProtocolError
from .._records import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    ErrorDetail,
    Locality,
    Node,
)
from .._resource import Resource
from ._framing import bytes_field, string_field
from ._reader import WireError, name_field

__all__ = [
    "decode_delta_request",
    "decode_delta_response",
    "decode_request",
    "decode_response",
    "encode_delta_request",
    "encode_delta_response",
    "encode_request",
    "encode_sotw_response",
    "make_node",
]

_NODE_CACHE_SIZE = 4096
_node_cache: OrderedDict[bytes, Node] = OrderedDict()


def _node(message: base_pb2.Node) -> Node:
    raw = message.SerializeToString(deterministic=True)
    node = _node_cache.get(raw)
    if node is not None:
        _node_cache.move_to_end(raw)
        return node
    locality = None
    if message.HasField("locality"):
        loc = message.locality
        locality = Locality(region=loc.region, zone=loc.zone, sub_zone=loc.sub_zone)
    node = Node(
        id=message.id,
        cluster=message.cluster,
        user_agent_name=message.user_agent_name,
        user_agent_version=message.user_agent_version,
        client_features=tuple(message.client_features),
        locality=locality,
        metadata=_struct(message.metadata),
        raw=raw,
    )
    _node_cache[raw] = node
    if len(_node_cache) > _NODE_CACHE_SIZE:
        _node_cache.popitem(last=False)
    return node


def _struct(struct: struct_pb2.Struct) -> dict[str, object]:
    """A ``google.protobuf.Struct`` as a dict (NaN and infinities kept, unlike JSON)."""
    return {key: _value(value) for key, value in struct.fields.items()}


def _value(value: struct_pb2.Value) -> object:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return _struct(value.struct_value)
    if kind == "list_value":
        return [_value(item) for item in value.list_value.values]
    if kind is None or kind == "null_value":
        return None
    return getattr(value, kind)


def _error(
    message: discovery_pb2.DiscoveryRequest | discovery_pb2.DeltaDiscoveryRequest,
) -> ErrorDetail | None:
    if not message.HasField("error_detail"):
        return None
    return ErrorDetail(code=message.error_detail.code, message=message.error_detail.message)


def _parse(cls: type[discovery_pb2.DiscoveryRequest], data: bytes, what: str) -> object:
    try:
        return cls.FromString(data)
    except DecodeError as exc:
        raise RemoteProtocolError(f"malformed {what}: {exc}", GrpcStatus.INVALID_ARGUMENT) from None


def decode_request(data: bytes) -> DiscoveryRequest:
    """Decode a serialised ``DiscoveryRequest``; malformed input is a remote error."""
    message = _parse(discovery_pb2.DiscoveryRequest, data, "DiscoveryRequest")
    assert isinstance(message, discovery_pb2.DiscoveryRequest)
    return DiscoveryRequest(
        type_url=message.type_url,
        version_info=message.version_info,
        resource_names=tuple(message.resource_names),
        response_nonce=message.response_nonce,
        error_detail=_error(message),
        node=_node(message.node) if message.HasField("node") else None,
    )


def decode_delta_request(data: bytes) -> DeltaDiscoveryRequest:
    """Decode a serialised ``DeltaDiscoveryRequest``; malformed input is a remote error."""
    message = _parse(discovery_pb2.DeltaDiscoveryRequest, data, "DeltaDiscoveryRequest")
    assert isinstance(message, discovery_pb2.DeltaDiscoveryRequest)
    return DeltaDiscoveryRequest(
        type_url=message.type_url,
        resource_names_subscribe=tuple(message.resource_names_subscribe),
        resource_names_unsubscribe=tuple(message.resource_names_unsubscribe),
        initial_resource_versions=dict(message.initial_resource_versions),
        response_nonce=message.response_nonce,
        error_detail=_error(message),
        node=_node(message.node) if message.HasField("node") else None,
    )


def _control_plane(identifier: str, number: int) -> bytes:
    return bytes_field(number, string_field(1, identifier)) if identifier else b""


def encode_sotw_response(
    *, version_info: str, nonce: str, body: bytes, control_plane: str = ""
) -> bytes:
    """A ``DiscoveryResponse`` around ``body`` (the shared ``resources`` + ``type_url``)."""
    return (
        string_field(1, version_info)
        + body
        + string_field(5, nonce)
        + _control_plane(control_plane, 6)
    )


def encode_delta_response(
    *,
    type_url: str,
    nonce: str,
    system_version_info: str,
    resources: Iterable[Resource],
    removed: Iterable[str],
    control_plane: str = "",
) -> bytes:
    """A ``DeltaDiscoveryResponse`` with ``resources`` (encoded once each) and removals."""
    return b"".join(
        (
            string_field(1, system_version_info),
            b"".join(resource.delta_entry for resource in resources),
            string_field(4, type_url),
            string_field(5, nonce),
            b"".join(string_field(6, name) for name in removed),
            _control_plane(control_plane, 7),
        )
    )


def _node_message(node: Node | None) -> base_pb2.Node | None:
    if node is None:
        return None
    if node.raw:
        return base_pb2.Node.FromString(node.raw)
    message = base_pb2.Node(
        id=node.id,
        cluster=node.cluster,
        user_agent_name=node.user_agent_name,
        user_agent_version=node.user_agent_version,
        client_features=list(node.client_features),
    )
    if node.locality is not None:
        message.locality.region = node.locality.region
        message.locality.zone = node.locality.zone
        message.locality.sub_zone = node.locality.sub_zone
    if node.metadata:
        json_format.ParseDict(dict(node.metadata), message.metadata)
    return message


def encode_request(request: DiscoveryRequest) -> bytes:
    """Serialise a SotW request (the client side of the codec)."""
    message = discovery_pb2.DiscoveryRequest(
        type_url=request.type_url,
        version_info=request.version_info,
        resource_names=list(request.resource_names),
        response_nonce=request.response_nonce,
    )
    node = _node_message(request.node)
    if node is not None:
        message.node.CopyFrom(node)
    if request.error_detail is not None:
        message.error_detail.code = request.error_detail.code
        message.error_detail.message = request.error_detail.message
    data: bytes = message.SerializeToString()
    return data


def encode_delta_request(request: DeltaDiscoveryRequest) -> bytes:
    """Serialise a Delta request (the client side of the codec)."""
    message = discovery_pb2.DeltaDiscoveryRequest(
        type_url=request.type_url,
        resource_names_subscribe=list(request.resource_names_subscribe),
        resource_names_unsubscribe=list(request.resource_names_unsubscribe),
        initial_resource_versions=dict(request.initial_resource_versions),
        response_nonce=request.response_nonce,
    )
    node = _node_message(request.node)
    if node is not None:
        message.node.CopyFrom(node)
    if request.error_detail is not None:
        message.error_detail.code = request.error_detail.code
        message.error_detail.message = request.error_detail.message
    data: bytes = message.SerializeToString()
    return data


def make_node(
    *,
    id: str,
    cluster: str = "",
    user_agent_name: str = "",
    client_features: Iterable[str] = (),
    locality: Locality | None = None,
    metadata: Mapping[str, object] | None = None,
) -> Node:
    """A :class:`Node` whose ``raw`` encoding is filled in, as a decoded one would have."""
    draft = Node(
        id=id,
        cluster=cluster,
        user_agent_name=user_agent_name,
        client_features=tuple(client_features),
        locality=locality,
        metadata=dict(metadata or {}),
    )
    message = _node_message(draft)
    assert message is not None
    return _node(message)


def decode_response(data: bytes) -> DiscoveryResponse:
    """Decode a ``DiscoveryResponse`` (the client side); names are read from field 1."""
    try:
        message = discovery_pb2.DiscoveryResponse.FromString(data)
        resources = tuple(
            Resource(type_url=item.type_url, name=name_field(item.value), body=item.value)
            for item in message.resources
        )
    except (DecodeError, WireError, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(f"malformed DiscoveryResponse: {exc}") from None
    return DiscoveryResponse(
        type_url=message.type_url,
        version_info=message.version_info,
        nonce=message.nonce,
        resources=resources,
        control_plane=message.control_plane.identifier,
    )


def decode_delta_response(data: bytes) -> DeltaDiscoveryResponse:
    """Decode a ``DeltaDiscoveryResponse`` (the client side)."""
    try:
        message = discovery_pb2.DeltaDiscoveryResponse.FromString(data)
    except DecodeError as exc:
        raise RemoteProtocolError(f"malformed DeltaDiscoveryResponse: {exc}") from None
    resources = tuple(
        Resource(
            type_url=item.resource.type_url or message.type_url,
            name=item.name,
            body=item.resource.value,
            version=item.version,
            aliases=tuple(item.aliases),
        )
        for item in message.resources
    )
    return DeltaDiscoveryResponse(
        type_url=message.type_url,
        system_version_info=message.system_version_info,
        nonce=message.nonce,
        resources=resources,
        removed_resources=tuple(message.removed_resources),
        control_plane=message.control_plane.identifier,
    )
