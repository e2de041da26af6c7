"""The server side of the xDS envelope codec, on the protobuf runtime (``xds-protos``).

Requests are decoded into the library's own records; responses are framed from bytes that
were encoded once (see `xdscore.wire._framing`), so building a response for one more
stream costs a few small concatenations. This is the only protobuf user on the
per-request path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, ParamSpec, TypeVar, cast

import attrs
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf.message import DecodeError

from .._errors import GrpcStatus, RemoteProtocolError, too_many_names
from .._memos import DELTA_ENTRIES, DELTA_REQUESTS, SOTW_REQUESTS, Memo, footprint
from ._framing import bytes_field, string_field, varint
from ._node import decode_node, read_node, same_node_bytes
from ._reader import WireError, count_field, leading_field
from ._records import (
    DeltaDiscoveryRequest,
    DiscoveryRequest,
    ErrorDetail,
    Node,
    ResourceError,
)
from ._resource import Resource

_P = ParamSpec("_P")

__all__ = [
    "decode_delta_request",
    "decode_request",
    "delta_response_parts",
    "encode_delta_response",
    "encode_sotw_response",
    "resource_errors",
    "sotw_response_parts",
]


def _error(
    message: discovery_pb2.DiscoveryRequest | discovery_pb2.DeltaDiscoveryRequest,
) -> ErrorDetail | None:
    if not message.HasField("error_detail"):
        return None
    return ErrorDetail(code=message.error_detail.code, message=message.error_detail.message)


_Request = TypeVar("_Request", discovery_pb2.DiscoveryRequest, discovery_pb2.DeltaDiscoveryRequest)


def _parse(cls: type[_Request], data: bytes, what: str) -> _Request:
    try:
        return cls.FromString(data)
    except DecodeError as exc:
        raise RemoteProtocolError(f"malformed {what}: {exc}", GrpcStatus.INVALID_ARGUMENT) from None


def _read(
    cls: type[_Request], data: bytes, node_field: int, known: Node | None
) -> tuple[_Request, Node | None]:
    """The request message, and its node: ``known`` when the request carries it again
    (Envoy sends its whole node, 61 KB, on every request), else the node it carries.

    The node is cut out of the bytes before the rest is parsed, where it comes first or
    after the fields numbered below it (every encoder writes fields in number order);
    anything else is parsed whole."""
    what = cls.DESCRIPTOR.name
    rest, raw = _cut_node(data, node_field)
    if raw is not None:
        message = _parse(cls, rest, what)
        if not message.HasField("node"):
            return message, _node(raw, known, what)
        # The node comes again later, to be merged with the first: as the runtime reads it.
    message = _parse(cls, data, what)
    return message, decode_node(message.node) if message.HasField("node") else None


def _node(raw: bytes, known: Node | None, what: str) -> Node:
    try:
        if known is not None and known.raw and same_node_bytes(raw, known.raw):
            return known
        return read_node(raw)
    except DecodeError as exc:
        raise RemoteProtocolError(f"malformed {what}: {exc}", GrpcStatus.INVALID_ARGUMENT) from None


def _cut(data: bytes, node_field: int, nonce_field: int) -> tuple[bytes, bytes | None, str] | None:
    """A request's bytes less its node and its nonce (where `leading_field` finds
    them), the node's bytes and the nonce; ``None`` for a nonce that is not UTF-8."""
    data, node = _cut_node(data, node_field)
    nonce = ""
    span = leading_field(data, nonce_field)
    if span is not None:
        tag, start, end = span
        try:
            nonce = data[start:end].decode()
        except UnicodeDecodeError:
            return None  # (the runtime's parse says what is wrong)
        data = data[:tag] + data[end:]
    return data, node, nonce


def _cut_node(data: bytes, node_field: int) -> tuple[bytes, bytes | None]:
    """A request's bytes less its node, and the node's bytes (where `leading_field`
    finds it; else the bytes as they are and ``None``)."""
    span = leading_field(data, node_field)
    if span is None:
        return data, None
    tag, start, end = span
    return data[:tag] + data[end:], data[start:end]


_Record = TypeVar("_Record", DiscoveryRequest, DeltaDiscoveryRequest)

SHARED_REQUEST_BYTES = 32 * 1024
"""Longer requests (less the node and the nonce) are not remembered."""


class _Decoder(Generic[_Request, _Record]):
    """Decodes one protocol's requests, each of a fleet's parsed once: its clients send the
    same bytes but for their nodes and nonces (every Envoy of one configuration asks for the
    same clusters, then the same endpoints, and ACKs each version with those same names).

    A request is remembered without its node and nonce, by its bytes less those two, in
    ``memo`` (see `xdscore._memos`)."""

    def __init__(
        self,
        message: type[_Request],
        kind: type[_Record],
        record: Callable[[_Request, Node | None], _Record],
        node_field: int,
        nonce_field: int,
        memo: Memo[bytes, object],
        lists: tuple[tuple[int, str], ...],
    ) -> None:
        self._message = message
        self._what = message.DESCRIPTOR.name
        self._record: Callable[[_Request, Node | None], _Record] = record
        self._node_field = node_field
        self._nonce_field = nonce_field
        self._records = memo
        self._nonce_tag = bytes(((nonce_field << 3) | 2,))
        """The nonce field's key (length-delimited): one byte for fields below 16."""
        self._lists = lists
        """The (field number, name) of the request's lists of names."""
        self._fields = tuple(
            f.name for f in attrs.fields(kind) if f.name not in ("node", "response_nonce")
        )

    def decode(self, data: bytes, known: Node | None, max_names: int, nonce: str = "") -> _Record:
        """The request ``data`` (``known``: the stream's node, see `_read`); a list of
        more than ``max_names`` names (0: any number) is refused before anything is built
        of it. ``nonce``: the nonce the stream sent last, which an ACK most likely ends
        with (see `_ending_in`)."""
        if max_names and len(data) > 2 * max_names:  # (a name takes two bytes at least)
            self._count_names(data, max_names)
        if nonce:
            acked = self._ending_in(data, known, nonce)
            if acked is not None:
                return acked
        cut = _cut(data, self._node_field, self._nonce_field)
        if cut is not None:
            key, node, nonce = cut
            try:
                record = self._remembered(key)
            except DecodeError as exc:
                raise RemoteProtocolError(
                    f"malformed {self._what}: {exc}", GrpcStatus.INVALID_ARGUMENT
                ) from None
            if record is not None:
                return self._completed(record, node, known, nonce)
        # A field repeated (the runtime merges the two), or a nonce that is not UTF-8.
        message, found = _read(self._message, data, self._node_field, known)
        return self._record(message, found)

    def _ending_in(self, data: bytes, known: Node | None, nonce: str) -> _Record | None:
        """The request, if its last field is ``nonce``: cut off without walking the fields
        before it (an ACK repeats every name it asks for, and `_cut` steps over each).

        What is left once the node is cut out too must be a whole message without node or
        nonce, remembered or parsed here: then the request is that message followed by the
        nonce field, and nothing else. ``None`` (the caller decodes it the usual way) when
        it does not end so, or what is left is not such a message."""
        raw = nonce.encode()
        if len(raw) >= 0x80:
            return None
        tail = self._nonce_tag + bytes((len(raw),)) + raw
        if not data.endswith(tail):
            return None
        key, node = _cut_node(data[: len(data) - len(tail)], self._node_field)
        try:
            record = self._remembered(key)
        except DecodeError:
            return None
        return None if record is None else self._completed(record, node, known, nonce)

    def _remembered(self, key: bytes) -> _Record | None:
        """The record of ``key``, a request's bytes less node and nonce: remembered, or
        parsed (the runtime's `DecodeError` if it cannot be) and remembered; ``None`` when
        the bytes hold a node or a nonce after all (a field sent twice)."""
        record = cast("_Record | None", self._records.get(key))
        if record is None:
            message = self._message.FromString(key)
            if message.HasField("node") or message.response_nonce:
                return None
            record = self._record(message, None)
            self._keep(key, record)
        return record

    def _count_names(self, data: bytes, limit: int) -> None:
        for number, what in self._lists:
            try:
                count = count_field(data, number)
            except WireError as exc:
                raise RemoteProtocolError(
                    f"malformed {self._what}: {exc}", GrpcStatus.INVALID_ARGUMENT
                ) from None
            if count > limit:
                raise too_many_names(what, count, limit)

    def _keep(self, key: bytes, record: _Record) -> None:
        if len(key) <= SHARED_REQUEST_BYTES:
            self._records.put(key, record, footprint(key, record))

    def _completed(
        self, record: _Record, raw_node: bytes | None, known: Node | None, nonce: str
    ) -> _Record:
        """``record`` with the node of ``raw_node`` (``known`` if the same) and ``nonce``,
        copied field by field (the constructor would check names already canonical once
        more)."""
        node = None if raw_node is None else _node(raw_node, known, self._what)
        if node is None and not nonce:
            return record
        copy = object.__new__(type(record))
        for name in self._fields:
            object.__setattr__(copy, name, getattr(record, name))
        object.__setattr__(copy, "node", node)
        object.__setattr__(copy, "response_nonce", nonce)
        return copy


def _sotw_record(message: discovery_pb2.DiscoveryRequest, node: Node | None) -> DiscoveryRequest:
    return DiscoveryRequest(
        type_url=message.type_url,
        version_info=message.version_info,
        resource_names=tuple(message.resource_names),
        response_nonce=message.response_nonce,
        error_detail=_error(message),
        node=node,
    )


def _delta_record(
    message: discovery_pb2.DeltaDiscoveryRequest, node: Node | None
) -> DeltaDiscoveryRequest:
    return DeltaDiscoveryRequest(
        type_url=message.type_url,
        resource_names_subscribe=tuple(message.resource_names_subscribe),
        resource_names_unsubscribe=tuple(message.resource_names_unsubscribe),
        initial_resource_versions=dict(message.initial_resource_versions),
        response_nonce=message.response_nonce,
        error_detail=_error(message),
        node=node,
    )


_sotw = _Decoder(
    discovery_pb2.DiscoveryRequest,
    DiscoveryRequest,
    _sotw_record,
    2,
    5,
    SOTW_REQUESTS,
    ((3, "resource_names"),),
)
_delta = _Decoder(
    discovery_pb2.DeltaDiscoveryRequest,
    DeltaDiscoveryRequest,
    _delta_record,
    1,
    6,
    DELTA_REQUESTS,
    (
        (3, "resource_names_subscribe"),
        (4, "resource_names_unsubscribe"),
        (5, "initial_resource_versions"),
    ),
)


def decode_request(
    data: bytes, known: Node | None = None, max_names: int = 0, nonce: str = ""
) -> DiscoveryRequest:
    """Decode a serialised ``DiscoveryRequest``; malformed input is a remote error.
    ``known``: the stream's node, taken as it is when the request repeats its bytes;
    ``max_names``: the most names a list may hold (RESOURCE_EXHAUSTED past it; 0: any);
    ``nonce``: the nonce the stream sent last (an ACK ending with it decodes faster)."""
    return _sotw.decode(data, known, max_names, nonce)


def decode_delta_request(
    data: bytes, known: Node | None = None, max_names: int = 0, nonce: str = ""
) -> DeltaDiscoveryRequest:
    """Decode a serialised ``DeltaDiscoveryRequest``; malformed input is a remote error.
    ``known``: the stream's node, taken as it is when the request repeats its bytes;
    ``max_names``: the most names a list may hold (RESOURCE_EXHAUSTED past it; 0: any);
    ``nonce``: the nonce the stream sent last (an ACK ending with it decodes faster)."""
    return _delta.decode(data, known, max_names, nonce)


def _control_plane(identifier: str, number: int) -> bytes:
    return bytes_field(number, string_field(1, identifier)) if identifier else b""


def resource_errors(errors: Iterable[ResourceError], number: int) -> bytes:
    """``errors`` as the ``resource_errors`` field numbered ``number`` (7 in a
    ``DiscoveryResponse``, 9 in a ``DeltaDiscoveryResponse``)."""
    out = b""
    for error in errors:
        status = (b"\x08" + varint(error.code) if error.code else b"") + string_field(
            2, error.message
        )
        entry = bytes_field(1, string_field(1, error.name)) + bytes_field(2, status)
        out += bytes_field(number, entry)
    return out


def sotw_response_parts(
    *,
    version_info: str,
    nonce: str,
    body: bytes,
    control_plane: str = "",
    errors: Iterable[ResourceError] = (),
) -> tuple[bytes, ...]:
    """A ``DiscoveryResponse`` around ``body`` (the shared ``resources`` + ``type_url``), with
    ``errors`` in ``resource_errors``, as the buffers it is the concatenation of: a transport
    writes them without joining them."""
    return (
        string_field(1, version_info),
        body,
        string_field(5, nonce) + _control_plane(control_plane, 6) + resource_errors(errors, 7),
    )


def delta_response_parts(
    *,
    type_url: str,
    nonce: str,
    system_version_info: str,
    resources: Iterable[Resource],
    removed: Iterable[str],
    control_plane: str = "",
    ttl: bool = True,
    heartbeat: bool = False,
    errors: Iterable[ResourceError] = (),
) -> tuple[bytes, ...]:
    """A ``DeltaDiscoveryResponse`` with ``resources`` (each encoded once, shared by every
    stream), removals and ``errors`` (``resource_errors``), as the buffers it is the
    concatenation of.

    ``ttl`` keeps each resource's TTL (for clients that support TTLs); ``heartbeat`` sends
    the resources as heartbeats (name, version and TTL, no body).
    """
    return (
        string_field(1, system_version_info),
        *_delta_entries(resources, ttl=ttl, heartbeat=heartbeat),
        string_field(4, type_url)
        + string_field(5, nonce)
        + b"".join(string_field(6, name) for name in removed)
        + _control_plane(control_plane, 7)
        + resource_errors(errors, 9),
    )


_SHARED_ENTRIES = 16
"""Responses with at least this many resources have their entries joined once and shared."""


def _delta_entries(
    resources: Iterable[Resource], *, ttl: bool, heartbeat: bool
) -> list[bytes] | tuple[bytes]:
    """The encoded entries of ``resources``: a list, or one shared buffer of them all."""
    if isinstance(resources, tuple) and len(resources) >= _SHARED_ENTRIES:
        # Streams in the same state are answered with the same tuple (the machines share
        # that work), and each would otherwise build and join the same entries.
        key = (id(resources), ttl, heartbeat)
        found = DELTA_ENTRIES.get(key)
        if found is None or found[0] is not resources:
            joined = b"".join(_entries(resources, ttl, heartbeat))
            # The memo holds the tuple, and so its resources: counted as their encodings.
            size = footprint(resources, joined, skip=(Resource,)) + sum(
                map(_encoded_size, resources)
            )
            found = DELTA_ENTRIES.put(key, (resources, joined), size)
        return (found[1],)
    return _entries(resources, ttl, heartbeat)


def _encoded_size(resource: Resource) -> int:
    return len(resource.sotw_entry) + len(resource.delta_entry)


def _entries(resources: Iterable[Resource], ttl: bool, heartbeat: bool) -> list[bytes]:
    if heartbeat:
        return [resource.delta_heartbeat for resource in resources]
    if ttl:
        return [resource.delta_entry for resource in resources]
    return [resource.delta_entry_without_ttl for resource in resources]


def _joined(parts: Callable[_P, tuple[bytes, ...]], what: str) -> Callable[_P, bytes]:
    def encode(*args: _P.args, **kwargs: _P.kwargs) -> bytes:
        return b"".join(parts(*args, **kwargs))

    encode.__doc__ = f"{what}, as one buffer (see `{parts.__name__}`)."
    return encode


encode_sotw_response = _joined(sotw_response_parts, "A ``DiscoveryResponse``")
encode_delta_response = _joined(delta_response_parts, "A ``DeltaDiscoveryResponse``")
