"""What a client can read beyond the plain protocol, decided once per stream.

The optional encodings a server may use are each gated on a client feature: TTLs
(``xds.config.supports-resource-ttl``), SotW entries wrapped in
``envoy.service.discovery.v3.Resource`` (``xds.config.resource-in-sotw``, spelt so by Envoy
and gRPC alike) and per-resource errors (``resource_errors``, for which no client advertises
a feature: gRPC reads the field whenever it is present, per gRFC A88; `RESOURCE_ERRORS`
is this library's own key for it). A client that does not read ``ttl`` or ``resource_errors``
skips the field (proto3); a wrapped SotW entry, though, is another type to a client that
does not expect one, and it rejects the response.

Clients do not always advertise what they support: Envoy 1.40 sends no ``client_features``
at all, yet reads TTLs and wrapped SotW entries. So the features a stream gets are those its
node advertises plus those the server assumes for the node's ``user_agent_name``
(`ASSUMED_FEATURES` by default; an [`XdsServer`][xdscore.XdsServer] option). The runtime works
this out from the first request's node and hands the result to the machine
([`use_features`][xdscore.protocol.SotwServer.use_features]): the machines never look at the node
for it themselves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import attrs

from ..wire._records import Node

__all__ = [
    "ASSUMED_FEATURES",
    "NO_FEATURES",
    "RESOURCE_ERRORS",
    "RESOURCE_IN_SOTW",
    "SUPPORTS_TTL",
    "ClientFeatures",
]

SUPPORTS_TTL = "xds.config.supports-resource-ttl"
"""The client honours ``Resource.ttl`` and heartbeats."""
RESOURCE_IN_SOTW = "xds.config.resource-in-sotw"
"""The client reads SotW entries wrapped in ``envoy.service.discovery.v3.Resource``."""
RESOURCE_ERRORS = "xdscore.resource-errors"
"""The client reads ``resource_errors``. Not a wire string: no client advertises one."""

ASSUMED_FEATURES: Mapping[str, frozenset[str]] = {
    "envoy": frozenset({SUPPORTS_TTL, RESOURCE_IN_SOTW}),
    "gRPC C-core": frozenset({RESOURCE_ERRORS}),
}
"""Features taken as supported by user agent, beyond what a client advertises: Envoy
(``user_agent_name`` ``envoy``) reads TTLs and wrapped SotW entries but advertises neither;
gRPC's C core (grpcio and the other wrapped languages, ``gRPC C-core …``) advertises only
``xds.config.resource-in-sotw`` and reads ``resource_errors`` (grpcio 1.85: with its
``GRPC_EXPERIMENTAL_XDS_DATA_ERROR_HANDLING`` switch on; off, it ignores the field)."""


@attrs.frozen
class ClientFeatures:
    """The optional encodings one stream's client can read."""

    ttl: bool = False
    """TTLs on resources, and heartbeats (Delta: ``Resource.ttl``; SotW: only together with
    `resource_in_sotw`, since the TTL travels in the wrapper)."""
    resource_in_sotw: bool = False
    resource_errors: bool = False

    @property
    def sotw_ttl(self) -> bool:
        """Whether SotW responses may wrap resources to carry their TTLs."""
        return self.ttl and self.resource_in_sotw

    @classmethod
    def of(
        cls, node: Node, assumed: Mapping[str, Collection[str]] = ASSUMED_FEATURES
    ) -> ClientFeatures:
        """What ``node`` advertises, plus what ``assumed`` gives its user agent: a key
        matches a ``user_agent_name`` equal to it or starting with it and a space."""
        features = set(node.client_features)
        agent = node.user_agent_name
        for prefix, extra in assumed.items():
            if agent == prefix or agent.startswith(prefix + " "):
                features.update(extra)
        return cls(
            ttl=SUPPORTS_TTL in features,
            resource_in_sotw=RESOURCE_IN_SOTW in features,
            resource_errors=RESOURCE_ERRORS in features,
        )


NO_FEATURES = ClientFeatures()
"""A client that reads nothing optional: what a machine assumes until told otherwise."""
