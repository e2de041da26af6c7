"""The registry of xDS resource types: type URLs, short names and protocol properties.

Each property here is a protocol rule the state machines look up rather than hard-code:

* ``wildcard_capable``: an empty first subscription means "everything" (legacy wildcard).
  Only the types Envoy subscribes to without names have it (LDS, CDS, SRDS).
* ``sotw_full_state``: in State-of-the-World every response carries the complete set and
  absence means deletion (LDS, CDS, SRDS). Other types are answered per name.
* ``rank``: the make-before-break order for additions on ADS; lower ranks go first.
* ``delta_only``: the type exists only on the incremental protocol (VHDS, LEDS).
* ``warms_on``: a resource of this type, once sent, is not used until the resources of
  that type it refers to arrive, even unchanged ones (a cluster warms on its endpoints):
  on ADS the server answers them again after sending it.
* ``aliased``: resources may be subscribed to by one of their aliases (VHDS).

Type URLs that are not registered are still served: they behave like a named, per-resource
type (not wildcard-capable, not full state) ordered after every registered type.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs

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
    "TYPE_URL_PREFIX",
    "VIRTUAL_HOST",
    "TypeInfo",
    "all_types",
    "by_short_name",
    "type_info",
]

TYPE_URL_PREFIX = "type.googleapis.com/"
"""What every type URL of a protobuf message starts with."""

LISTENER = TYPE_URL_PREFIX + "envoy.config.listener.v3.Listener"
"""Listeners (LDS)."""
ROUTE = TYPE_URL_PREFIX + "envoy.config.route.v3.RouteConfiguration"
"""Route configurations (RDS)."""
SCOPED_ROUTE = TYPE_URL_PREFIX + "envoy.config.route.v3.ScopedRouteConfiguration"
"""Scoped route configurations (SRDS)."""
VIRTUAL_HOST = TYPE_URL_PREFIX + "envoy.config.route.v3.VirtualHost"
"""Virtual hosts (VHDS, Delta only)."""
CLUSTER = TYPE_URL_PREFIX + "envoy.config.cluster.v3.Cluster"
"""Clusters (CDS)."""
ENDPOINT = TYPE_URL_PREFIX + "envoy.config.endpoint.v3.ClusterLoadAssignment"
"""Cluster load assignments: endpoints (EDS)."""
LBENDPOINT = TYPE_URL_PREFIX + "envoy.config.endpoint.v3.LbEndpoint"
"""Single endpoints (LEDS, Delta only)."""
SECRET = TYPE_URL_PREFIX + "envoy.extensions.transport_sockets.tls.v3.Secret"
"""TLS secrets (SDS)."""
RUNTIME = TYPE_URL_PREFIX + "envoy.service.runtime.v3.Runtime"
"""Runtime layers (RTDS)."""
EXTENSION_CONFIG = TYPE_URL_PREFIX + "envoy.config.core.v3.TypedExtensionConfig"
"""Typed extension configurations (ECDS)."""


@attrs.frozen(kw_only=True)
class TypeInfo:
    """Protocol properties of one resource type."""

    type_url: str
    short_name: str
    wildcard_capable: bool = False
    sotw_full_state: bool = False
    delta_only: bool = False
    rank: int = 100
    warms_on: str | None = None
    aliased: bool = False
    service: str | None = None
    """Fully qualified per-type discovery service, when the type has one."""
    sotw_method: str | None = None
    delta_method: str | None = None
    fetch_method: str | None = None
    """The unary ``Fetch<stem>`` method of the service, when it defines one."""

    @property
    def message_name(self) -> str:
        """The protobuf full name of the resource message."""
        return self.type_url.removeprefix(TYPE_URL_PREFIX)


def _served(service: str, stem: str, **properties: Any) -> TypeInfo:
    """A type with the usual methods: ``Stream<stem>``, ``Delta<stem>`` and the unary
    ``Fetch<stem>``."""
    return TypeInfo(
        service=service,
        sotw_method=f"Stream{stem}",
        delta_method=f"Delta{stem}",
        fetch_method=f"Fetch{stem}",
        **properties,
    )


_REGISTRY: tuple[TypeInfo, ...] = (
    _served(
        "envoy.service.cluster.v3.ClusterDiscoveryService",
        "Clusters",
        type_url=CLUSTER,
        short_name="cds",
        wildcard_capable=True,
        sotw_full_state=True,
        rank=10,
        warms_on=ENDPOINT,
    ),
    _served(
        "envoy.service.endpoint.v3.EndpointDiscoveryService",
        "Endpoints",
        type_url=ENDPOINT,
        short_name="eds",
        rank=20,
    ),
    TypeInfo(
        type_url=LBENDPOINT,
        short_name="leds",
        delta_only=True,
        rank=25,
        service="envoy.service.endpoint.v3.LocalityEndpointDiscoveryService",
        delta_method="DeltaLocalityEndpoints",
    ),
    _served(
        "envoy.service.listener.v3.ListenerDiscoveryService",
        "Listeners",
        type_url=LISTENER,
        short_name="lds",
        wildcard_capable=True,
        sotw_full_state=True,
        rank=30,
    ),
    _served(
        "envoy.service.route.v3.RouteDiscoveryService",
        "Routes",
        type_url=ROUTE,
        short_name="rds",
        rank=40,
    ),
    _served(
        "envoy.service.route.v3.ScopedRoutesDiscoveryService",
        "ScopedRoutes",
        type_url=SCOPED_ROUTE,
        short_name="srds",
        wildcard_capable=True,
        sotw_full_state=True,
        rank=45,
    ),
    TypeInfo(
        type_url=VIRTUAL_HOST,
        short_name="vhds",
        delta_only=True,
        rank=50,
        aliased=True,
        service="envoy.service.route.v3.VirtualHostDiscoveryService",
        delta_method="DeltaVirtualHosts",
    ),
    _served(
        "envoy.service.secret.v3.SecretDiscoveryService",
        "Secrets",
        type_url=SECRET,
        short_name="sds",
        rank=5,
    ),
    _served(
        "envoy.service.runtime.v3.RuntimeDiscoveryService",
        "Runtime",
        type_url=RUNTIME,
        short_name="rtds",
        rank=60,
    ),
    _served(
        "envoy.service.extension.v3.ExtensionConfigDiscoveryService",
        "ExtensionConfigs",
        type_url=EXTENSION_CONFIG,
        short_name="ecds",
        rank=35,
    ),
)

_BY_URL = {info.type_url: info for info in _REGISTRY}
_BY_SHORT = {info.short_name: info for info in _REGISTRY}


def type_info(type_url: str) -> TypeInfo:
    """Properties of ``type_url``; unregistered URLs get the defaults of a named type."""
    info = _BY_URL.get(type_url)
    if info is None:
        short = type_url.rsplit(".", 1)[-1] if type_url else "?"
        info = TypeInfo(type_url=type_url, short_name=short, rank=1000)
    return info


def by_short_name(short_name: str) -> TypeInfo:
    """Look a registered type up by its short name (``cds``, ``eds``, ...)."""
    try:
        return _BY_SHORT[short_name]
    except KeyError:
        known = ", ".join(sorted(_BY_SHORT))
        raise KeyError(f"unknown xDS short name {short_name!r}; known: {known}") from None


def all_types() -> Iterator[TypeInfo]:
    """Every registered type, in make-before-break order."""
    return iter(sorted(_REGISTRY, key=lambda info: info.rank))
