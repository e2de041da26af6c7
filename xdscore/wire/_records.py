"""Decoded protocol messages as small immutable records.

The state machines work on these, never on protobuf objects; the codec builds them. Every
resource name a record carries is converted to canonical form (`xdscore.wire._names`)
when the record is made, so requests are compared with resources in one form.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ._names import canonical_name, canonical_names
from ._resource import Resource

__all__ = [
    "DeltaDiscoveryRequest",
    "DeltaDiscoveryResponse",
    "DiscoveryRequest",
    "DiscoveryResponse",
    "ErrorDetail",
    "Locality",
    "Node",
    "ResourceError",
]


def _canonical_keys(versions: Mapping[str, str]) -> Mapping[str, str]:
    """``versions`` with its names in canonical form (the same mapping if none changes)."""
    if not any(name.startswith("xdstp:") for name in versions):
        return versions
    return {canonical_name(name): version for name, version in versions.items()}


@attrs.frozen(kw_only=True)
class Locality:
    """Where a node runs."""

    region: str = ""
    zone: str = ""
    sub_zone: str = ""


@attrs.frozen(kw_only=True)
class Node:
    """The identity a client presents; ``raw`` is its encoding, used to detect a changed node."""

    id: str = ""
    cluster: str = ""
    user_agent_name: str = ""
    user_agent_version: str = ""
    client_features: tuple[str, ...] = ()
    locality: Locality | None = None
    metadata: Mapping[str, object] = attrs.field(factory=dict, eq=False, repr=False)
    raw: bytes = attrs.field(default=b"", repr=False)

    def supports(self, feature: str) -> bool:
        """Whether the client advertised ``feature`` in ``client_features``."""
        return feature in self.client_features


@attrs.frozen(kw_only=True)
class ErrorDetail:
    """The ``error_detail`` of a NACK: a gRPC status code and a message."""

    code: int
    message: str


@attrs.frozen(kw_only=True)
class ResourceError:
    """One entry of a response's ``resource_errors``: why the server sends no resource
    ``name`` (a gRPC status code and a message; xRFC TP3)."""

    name: str = attrs.field(converter=canonical_name)
    code: int
    message: str


@attrs.frozen(kw_only=True)
class DiscoveryRequest:
    """A State-of-the-World request."""

    type_url: str = ""
    version_info: str = ""
    resource_names: tuple[str, ...] = attrs.field(default=(), converter=canonical_names)
    response_nonce: str = ""
    error_detail: ErrorDetail | None = None
    node: Node | None = None


@attrs.frozen(kw_only=True)
class DeltaDiscoveryRequest:
    """An incremental (Delta) request."""

    type_url: str = ""
    resource_names_subscribe: tuple[str, ...] = attrs.field(default=(), converter=canonical_names)
    resource_names_unsubscribe: tuple[str, ...] = attrs.field(default=(), converter=canonical_names)
    initial_resource_versions: Mapping[str, str] = attrs.field(
        factory=dict, converter=_canonical_keys
    )
    response_nonce: str = ""
    error_detail: ErrorDetail | None = None
    node: Node | None = None


@attrs.frozen(kw_only=True)
class DiscoveryResponse:
    """A State-of-the-World response as a client sees it."""

    type_url: str = ""
    version_info: str = ""
    nonce: str = ""
    resources: tuple[Resource, ...] = ()
    control_plane: str = ""
    resource_errors: tuple[ResourceError, ...] = ()


@attrs.frozen(kw_only=True)
class DeltaDiscoveryResponse:
    """An incremental (Delta) response as a client sees it."""

    type_url: str = ""
    system_version_info: str = ""
    nonce: str = ""
    resources: tuple[Resource, ...] = ()
    removed_resources: tuple[str, ...] = attrs.field(default=(), converter=canonical_names)
    control_plane: str = ""
    resource_errors: tuple[ResourceError, ...] = ()
