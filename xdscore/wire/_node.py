"""The client's ``Node``: decoded once however many streams present it, and encoded.

A decoded node's ``raw`` is its encoding as the client sent it. Envoy sends its node, 61 KB
of it (Envoy 1.40, 516 extensions), on every request, and not always in the same bytes: it
writes the entries of its build version's metadata map in a new order each time. The codec
recognises a repeated node with :func:`same_node_bytes`: the fields from ``extensions`` on
compared as bytes, the few before them (where the maps are) by content, so a request costs
no decoding of the node.

Decoded nodes are kept by their bytes in :data:`xdscore._memos.NODES`, so a fleet of
proxies presenting the same node costs one decode; a node whose record holds more than the
memo's entry bound is never kept: the streams that present it hold it while they live, and
no longer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from envoy.config.core.v3 import base_pb2
from google.protobuf import json_format, struct_pb2

from .._memos import NODES, footprint
from ._reader import field_offset
from ._records import Locality, Node

__all__ = [
    "decode_node",
    "encode_node",
    "make_node",
    "read_node",
    "same_node",
    "same_node_bytes",
]


def read_node(raw: bytes) -> Node:
    """The record for a ``Node`` a client sent as ``raw`` (cached by those bytes); raises
    ``DecodeError`` for bytes that are no ``Node``."""
    node = _cached(raw)
    return node if node is not None else decode_node(base_pb2.Node.FromString(raw), raw)


def decode_node(message: base_pb2.Node, raw: bytes | None = None) -> Node:
    """The record for a decoded ``Node`` message, sent as ``raw`` (``None``: its
    deterministic encoding stands for it); cached by those bytes."""
    if raw is None:
        raw = message.SerializeToString(deterministic=True)
    node = _cached(raw)
    if node is not None:
        return node
    locality = None
    if message.HasField("locality"):
        loc = message.locality
        locality = Locality(region=loc.region, zone=loc.zone, sub_zone=loc.sub_zone)
    node = Node(
        id=message.id,
        cluster=message.cluster,
        user_agent_name=message.user_agent_name,
        user_agent_version=message.user_agent_version or _build_version(message),
        client_features=tuple(message.client_features),
        locality=locality,
        metadata=_struct(message.metadata),
        raw=raw,
    )
    if len(raw) <= NODES.max_entry_bytes:
        NODES.put(raw, node, footprint(raw, node))
    return node


def _cached(raw: bytes) -> Node | None:
    node = NODES.get(raw)
    assert node is None or isinstance(node, Node)
    return node


_PLAIN_FROM = 9
"""The ``Node`` fields from ``extensions`` (9) on hold no map in practice (only
``dynamic_parameters``, 12, does, which Envoy leaves empty); those before hold
``metadata`` and ``user_agent_build_version``, whose maps an encoder writes in any order."""


def same_node(one: Node, other: Node) -> bool:
    """Whether two nodes are the same, whatever bytes each was sent as."""
    if one.raw and other.raw:
        return same_node_bytes(one.raw, other.raw)
    return _canonical(_encoded(one)) == _canonical(_encoded(other))


def same_node_bytes(one: bytes, other: bytes) -> bool:
    """Whether two encodings are of the same ``Node``: equal bytes, or the same fields from
    ``extensions`` on (as bytes) and the same ones before them (by content), or else the
    same content; raises ``DecodeError`` for bytes that are no ``Node``."""
    if one == other:
        return True
    cut, cut_other = field_offset(one, _PLAIN_FROM), field_offset(other, _PLAIN_FROM)
    if cut is not None and cut_other is not None and one[cut:] == other[cut_other:]:
        return _canonical(one[:cut]) == _canonical(other[:cut_other])
    return _canonical(one) == _canonical(other)


def _encoded(node: Node) -> bytes:
    message = encode_node(node)
    assert message is not None
    encoded: bytes = message.SerializeToString()
    return encoded


def _canonical(data: bytes) -> bytes:
    """The deterministic encoding of the ``Node`` (or part of one) ``data``."""
    encoded: bytes = base_pb2.Node.FromString(data).SerializeToString(deterministic=True)
    return encoded


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


def _build_version(message: base_pb2.Node) -> str:
    """Envoy names its version in ``user_agent_build_version``, not ``user_agent_version``."""
    if not message.HasField("user_agent_build_version"):
        return ""
    version = message.user_agent_build_version.version
    return f"{version.major_number}.{version.minor_number}.{version.patch}"


def encode_node(node: Node | None) -> base_pb2.Node | None:
    """The ``Node`` message for ``node`` (its own bytes when it was decoded)."""
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
    message = encode_node(draft)
    assert message is not None
    return decode_node(message)
