"""The client side of the xDS envelope codec: encoding requests, decoding responses.

Used by the client machines' driver, the load generator, the CLI and the tests; never by
the server.
"""

from __future__ import annotations

from typing import Any

from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf.message import DecodeError

from .._errors import RemoteProtocolError
from .._memos import CLIENT_NAME_FIELDS, footprint
from ._framing import bytes_field, string_field, varint
from ._node import encode_node
from ._reader import WireError, name_field
from ._records import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    Node,
    ResourceError,
)
from ._resource import RESOURCE_WRAPPER, Resource

__all__ = [
    "decode_delta_response",
    "decode_response",
    "encode_delta_request",
    "encode_request",
]


def encode_request(request: DiscoveryRequest) -> bytes:
    """Serialise a SotW request (the client side of the codec), its fields in the order the
    protobuf runtime writes them; a list of names is encoded once for all the requests
    (and clients) that send it."""
    node = request.node
    error = request.error_detail
    return b"".join(
        (
            string_field(1, request.version_info),
            b"" if node is None else bytes_field(2, node.raw or _node_bytes(node)),
            _names_field(request.resource_names),
            string_field(4, request.type_url),
            string_field(5, request.response_nonce),
            b"" if error is None else bytes_field(6, _status(error.code, error.message)),
        )
    )


def _names_field(names: tuple[str, ...], number: int = 3) -> bytes:
    """A list of names as the repeated field ``number``, an empty name included, as repeated
    fields are."""
    key = (number, names)
    found = CLIENT_NAME_FIELDS.get(key)
    if found is not None:
        return found
    field = b"".join([bytes_field(number, name.encode()) for name in names])
    return CLIENT_NAME_FIELDS.put(key, field, footprint(names, field))


def _node_bytes(node: Node) -> bytes:
    """A node built without its bytes, encoded."""
    message = encode_node(node)
    assert message is not None
    data: bytes = message.SerializeToString(deterministic=True)
    return data


def _status(code: int, message: str) -> bytes:
    """A ``google.rpc.Status``: ``code`` an int32 (negative ones take ten bytes, as in
    protobuf), then ``message``."""
    number = b"" if not code else b"\x08" + varint(code & 0xFFFFFFFFFFFFFFFF)
    return number + string_field(2, message)


def encode_delta_request(request: DeltaDiscoveryRequest) -> bytes:
    """Serialise a Delta request (the client side of the codec), its node first as its own
    bytes (the server recognises them unparsed), the rest in the order of the fields."""
    node = request.node
    error = request.error_detail
    versions = request.initial_resource_versions
    return b"".join(
        (
            b"" if node is None else bytes_field(1, node.raw or _node_bytes(node)),
            string_field(2, request.type_url),
            _names_field(request.resource_names_subscribe, 3),
            _names_field(request.resource_names_unsubscribe, 4),
            b"".join(
                bytes_field(5, string_field(1, name) + string_field(2, version))
                for name, version in versions.items()
            )
            if versions
            else b"",
            string_field(6, request.response_nonce),
            b"" if error is None else bytes_field(7, _status(error.code, error.message)),
        )
    )


def decode_response(data: bytes) -> DiscoveryResponse:
    """Decode a ``DiscoveryResponse`` (the client side); names are read from field 1."""
    try:
        message = discovery_pb2.DiscoveryResponse.FromString(data)
        resources = tuple(_sotw_resource(item) for item in message.resources)
    except (DecodeError, WireError, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(f"malformed DiscoveryResponse: {exc}") from None
    return DiscoveryResponse(
        type_url=message.type_url,
        version_info=message.version_info,
        nonce=message.nonce,
        resources=resources,
        control_plane=message.control_plane.identifier,
        resource_errors=_errors(message),
    )


def _errors(message: Any) -> tuple[ResourceError, ...]:
    return tuple(
        ResourceError(
            name=item.resource_name.name,
            code=item.error_detail.code,
            message=item.error_detail.message,
        )
        for item in message.resource_errors
    )


def _sotw_resource(item: Any) -> Resource:
    """One SotW ``resources`` entry: a plain ``Any``, or one wrapped in
    ``envoy.service.discovery.v3.Resource`` (which may carry a TTL)."""
    if item.type_url != RESOURCE_WRAPPER:
        return Resource(type_url=item.type_url, name=name_field(item.value), body=item.value)
    wrapper = discovery_pb2.Resource.FromString(item.value)
    body = wrapper.resource.value
    return Resource(
        type_url=wrapper.resource.type_url,
        name=wrapper.name or name_field(body),
        body=body,
        ttl=_ttl(wrapper),
        name_only=not wrapper.HasField("resource"),
    )


def _ttl(wrapper: Any) -> float | None:
    if not wrapper.HasField("ttl"):
        return None
    return float(wrapper.ttl.seconds + wrapper.ttl.nanos / 1e9)


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
            ttl=_ttl(item),
            name_only=not item.HasField("resource"),
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
        resource_errors=_errors(message),
    )
