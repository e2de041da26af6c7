"""The Client Status Discovery Service messages: requests decoded, responses encoded.

CSDS (``envoy.service.status.v3``) lets standard tools ask a control plane what each of its
clients holds. This module turns a ``ClientStatusRequest`` into a `StatusQuery` (the
node matchers the server supports: the node id compared exactly, by prefix, by suffix or by
substring, optionally ignoring case) and builds a ``ClientStatusResponse`` from plain
records, one `ClientReport` per client. Both directions are also here for clients
(`encode_status_query`, `decode_status_response`), which the CLI uses.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
from envoy.admin.v3 import config_dump_shared_pb2
from envoy.service.status.v3 import csds_pb2
from google.protobuf import any_pb2, timestamp_pb2
from google.protobuf.message import DecodeError

from .._errors import GrpcStatus, RemoteProtocolError
from ._node import decode_node, encode_node
from ._records import Node
from ._resource import Resource

__all__ = [
    "CONFIG_STATUSES",
    "RESOURCE_STATUSES",
    "ClientReport",
    "IdMatcher",
    "ResourceReport",
    "StatusQuery",
    "decode_status_query",
    "decode_status_response",
    "encode_status_query",
    "encode_status_response",
]

CONFIG_STATUSES = ("UNKNOWN", "SYNCED", "NOT_SENT", "STALE", "ERROR")
"""``envoy.service.status.v3.ConfigStatus`` names, in enum order."""
RESOURCE_STATUSES = ("UNKNOWN", "REQUESTED", "DOES_NOT_EXIST", "ACKED", "NACKED")
"""The ``ClientResourceStatus`` names a server reports."""

_MATCH_KINDS = ("exact", "prefix", "suffix", "contains")


@attrs.frozen
class IdMatcher:
    """One node-id matcher: ``kind`` is exact, prefix, suffix or contains."""

    kind: str
    value: str
    ignore_case: bool = False

    def matches(self, node_id: str) -> bool:
        """Whether ``node_id`` matches."""
        value, subject = self.value, node_id
        if self.ignore_case:
            value, subject = value.lower(), subject.lower()
        if self.kind == "exact":
            return subject == value
        if self.kind == "prefix":
            return subject.startswith(value)
        if self.kind == "suffix":
            return subject.endswith(value)
        return value in subject


@attrs.frozen
class StatusQuery:
    """What a CSDS request asks: clients whose id any matcher accepts (all, if none)."""

    matchers: tuple[IdMatcher, ...] = ()
    exclude_resource_contents: bool = False

    def selects(self, node_id: str) -> bool:
        """Whether the client with ``node_id`` is asked about."""
        return not self.matchers or any(m.matches(node_id) for m in self.matchers)


@attrs.frozen(kw_only=True)
class ResourceReport:
    """One resource of one client, as ``GenericXdsConfig``."""

    type_url: str
    name: str
    version: str
    config_status: str
    client_status: str
    resource: Resource | None = None
    last_updated: float = 0.0
    """Wall-clock seconds; 0 for never."""
    error: str = ""
    error_version: str = ""
    error_at: float = 0.0


@attrs.frozen(kw_only=True)
class ClientReport:
    """One client: its node and its resources."""

    node: Node
    resources: tuple[ResourceReport, ...] = ()


def decode_status_query(data: bytes) -> StatusQuery:
    """Decode a ``ClientStatusRequest``; what the server cannot honour is INVALID_ARGUMENT."""
    try:
        message = csds_pb2.ClientStatusRequest.FromString(data)
    except DecodeError as exc:
        raise RemoteProtocolError(f"malformed ClientStatusRequest: {exc}") from None
    matchers = []
    for index, matcher in enumerate(message.node_matchers):
        if matcher.node_metadatas:
            raise RemoteProtocolError(
                f"node_matchers[{index}]: node_metadatas matchers are not supported",
                GrpcStatus.INVALID_ARGUMENT,
            )
        if not matcher.HasField("node_id"):
            raise RemoteProtocolError(f"node_matchers[{index}] has no node_id matcher")
        kind = matcher.node_id.WhichOneof("match_pattern")
        if kind not in _MATCH_KINDS:
            raise RemoteProtocolError(
                f"node_matchers[{index}].node_id: {kind or 'an empty'} matcher is not "
                f"supported; use one of {', '.join(_MATCH_KINDS)}"
            )
        matchers.append(
            IdMatcher(kind, getattr(matcher.node_id, kind), matcher.node_id.ignore_case)
        )
    return StatusQuery(tuple(matchers), message.exclude_resource_contents)


def _timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def _any(resource: Resource) -> any_pb2.Any:
    return any_pb2.Any(type_url=resource.type_url, value=resource.body)


def encode_status_response(clients: Iterable[ClientReport], *, contents: bool = True) -> bytes:
    """A ``ClientStatusResponse`` with one ``ClientConfig`` per client."""
    response = csds_pb2.ClientStatusResponse()
    for client in clients:
        config = response.config.add()
        node = encode_node(client.node)
        if node is not None:
            config.node.CopyFrom(node)
        for report in client.resources:
            entry = config.generic_xds_configs.add(
                type_url=report.type_url,
                name=report.name,
                version_info=report.version,
                config_status=csds_pb2.ConfigStatus.Value(report.config_status),
                client_status=config_dump_shared_pb2.ClientResourceStatus.Value(
                    report.client_status
                ),
            )
            if contents and report.resource is not None:
                entry.xds_config.CopyFrom(_any(report.resource))
            if report.last_updated:
                entry.last_updated.CopyFrom(_timestamp(report.last_updated))
            if report.error:
                entry.error_state.details = report.error
                entry.error_state.version_info = report.error_version
                if report.error_at:
                    entry.error_state.last_update_attempt.CopyFrom(_timestamp(report.error_at))
    data: bytes = response.SerializeToString()
    return data


def encode_status_query(
    matchers: Iterable[IdMatcher] = (), *, exclude_resource_contents: bool = False
) -> bytes:
    """A ``ClientStatusRequest`` (the client side)."""
    message = csds_pb2.ClientStatusRequest(exclude_resource_contents=exclude_resource_contents)
    for matcher in matchers:
        entry = message.node_matchers.add()
        setattr(entry.node_id, matcher.kind, matcher.value)
        entry.node_id.ignore_case = matcher.ignore_case
    data: bytes = message.SerializeToString()
    return data


def decode_status_response(data: bytes) -> list[ClientReport]:
    """Decode a ``ClientStatusResponse`` (the client side)."""
    try:
        message = csds_pb2.ClientStatusResponse.FromString(data)
    except DecodeError as exc:
        raise RemoteProtocolError(f"malformed ClientStatusResponse: {exc}") from None
    clients = []
    for config in message.config:
        reports = []
        for entry in config.generic_xds_configs:
            resource = None
            if entry.HasField("xds_config"):
                resource = Resource(
                    type_url=entry.xds_config.type_url or entry.type_url,
                    name=entry.name,
                    body=entry.xds_config.value,
                )
            reports.append(
                ResourceReport(
                    type_url=entry.type_url,
                    name=entry.name,
                    version=entry.version_info,
                    config_status=csds_pb2.ConfigStatus.Name(entry.config_status),
                    client_status=config_dump_shared_pb2.ClientResourceStatus.Name(
                        entry.client_status
                    ),
                    resource=resource,
                    last_updated=entry.last_updated.ToNanoseconds() / 1e9,
                    error=entry.error_state.details,
                    error_version=entry.error_state.version_info,
                    error_at=entry.error_state.last_update_attempt.ToNanoseconds() / 1e9,
                )
            )
        clients.append(ClientReport(node=decode_node(config.node), resources=tuple(reports)))
    return clients
