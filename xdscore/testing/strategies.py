"""Hypothesis strategies for xDS: type URLs, names, consistent configurations, their changes
and client actions.

Configurations are modelled by `EnvoyConfig`, a small immutable description of a
consistent Envoy setup (every EDS cluster has a ClusterLoadAssignment, every listener's route
configuration exists, every route names an existing cluster), built into real resources with
[`xdscore.builders`][xdscore.builders]. `ConfigChange` edits one resource and keeps the
configuration consistent. Any resource can be *marked*: its content then carries `NACK_MARKER`, and
`reject_marked` is a client ``validate`` hook that NACKs responses containing one.

This module needs ``hypothesis`` (the ``test`` extra); [`xdscore.testing`][xdscore.testing] does not
import it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

import attrs
from hypothesis import strategies as st

from .. import builders
from ..cache import Snapshot
from ..protocol._subscription import WILDCARD
from ..wire._framing import string_field
from ..wire._messages import make_resource
from ..wire._records import ErrorDetail
from ..wire._resource import Resource
from ..wire._typeurls import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    TYPE_URL_PREFIX,
    all_types,
    type_info,
)

__all__ = [
    "CONFIG_TYPES",
    "NACK_MARKER",
    "THING",
    "ClientAction",
    "ClusterSpec",
    "ConfigChange",
    "Disconnect",
    "EndpointSpec",
    "EnvoyConfig",
    "ListenerSpec",
    "NackNext",
    "RouteSpec",
    "Spec",
    "Subscribe",
    "ThingSpec",
    "Unsubscribe",
    "Watch",
    "config_changes",
    "configs",
    "delta_client_actions",
    "error_details",
    "reject_marked",
    "resource_names",
    "resources",
    "snapshot_changes",
    "snapshots",
    "sotw_client_actions",
    "type_urls",
    "unregistered_type_urls",
]

THING = TYPE_URL_PREFIX + "xdscore.testing.v1.Thing"
"""An unregistered type URL, served like any named type; its resources name themselves in
field 1, as every xDS resource does."""

CONFIG_TYPES: tuple[str, ...] = (CLUSTER, ENDPOINT, LISTENER, ROUTE, THING)
"""The types an `EnvoyConfig` is authoritative for, in make-before-break order."""

NACK_MARKER = "xdscore-nack-me"
"""A string that `reject_marked` refuses to find in a resource's content."""

_MARKER_BYTES = NACK_MARKER.encode()


# --- type URLs and names -------------------------------------------------------------------


def unregistered_type_urls() -> st.SearchStrategy[str]:
    """Type URLs no registry entry knows (served as named, per-resource types)."""
    segment = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
    return st.builds(
        lambda parts, last: TYPE_URL_PREFIX + ".".join([*parts, last]),
        st.lists(segment, min_size=1, max_size=3),
        st.from_regex(r"[A-Z][A-Za-z0-9]{0,10}", fullmatch=True),
    ).filter(lambda url: type_info(url).rank == 1000)


def type_urls(
    *,
    registered: bool = True,
    unregistered: bool = False,
    wildcard_capable: bool | None = None,
    delta_only: bool | None = False,
) -> st.SearchStrategy[str]:
    """Type URLs: registered ones (filtered by ``wildcard_capable`` / ``delta_only`` when not
    ``None``) and, with ``unregistered``, URLs nobody registered (never wildcard-capable)."""
    options: list[st.SearchStrategy[str]] = []
    if registered:
        known = [
            info.type_url
            for info in all_types()
            if (wildcard_capable is None or info.wildcard_capable == wildcard_capable)
            and (delta_only is None or info.delta_only == delta_only)
        ]
        if known:
            options.append(st.sampled_from(known))
    if unregistered and not wildcard_capable and delta_only is not True:
        options.append(unregistered_type_urls())
    if not options:
        raise ValueError("no type URL satisfies these filters")
    return st.one_of(options)


_PLAIN_NAME = st.from_regex(r"[a-z][a-z0-9_.-]{0,15}", fullmatch=True)


def resource_names(*, awkward: bool = True, max_size: int = 40) -> st.SearchStrategy[str]:
    """Non-empty resource names without ``*``: plain ones and, with ``awkward``, unicode
    (valid UTF-8, any plane), names with spaces, slashes or control characters, and long ones."""
    if not awkward:
        return _PLAIN_NAME
    unicode_text = st.text(
        alphabet=st.characters(codec="utf-8", exclude_characters="*"),
        min_size=1,
        max_size=max_size,
    )
    long_name = st.builds(
        lambda stem, size: (stem * (size // len(stem) + 1))[:size],
        _PLAIN_NAME,
        st.integers(min_value=200, max_value=1024),
    )
    uri_like = st.builds(
        lambda authority, path: f"xdstp://{authority}/envoy.config.cluster.v3.Cluster/{path}",
        _PLAIN_NAME,
        _PLAIN_NAME,
    )
    return st.one_of(_PLAIN_NAME, unicode_text, uri_like, long_name)


def error_details() -> st.SearchStrategy[ErrorDetail]:
    """The ``error_detail`` of a NACK: any code (not only valid ones) and message."""
    return st.builds(ErrorDetail, code=st.integers(-(2**31), 2**31 - 1), message=st.text())


# --- configurations --------------------------------------------------------------------------


@attrs.frozen
class ClusterSpec:
    """An EDS cluster; its endpoints are the ClusterLoadAssignment named `eds_name`."""

    service_name: str = ""
    timeout: int = 1
    """Connect timeout in seconds: a knob that changes the cluster's content."""

    def eds_name(self, name: str) -> str:
        """The ClusterLoadAssignment the cluster ``name`` refers to."""
        return self.service_name or name


@attrs.frozen
class EndpointSpec:
    """A ClusterLoadAssignment: (host, port) pairs in one locality."""

    addresses: tuple[tuple[str, int], ...] = ()


@attrs.frozen
class RouteSpec:
    """A route configuration: one virtual host with (prefix, cluster) routes."""

    routes: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class ThingSpec:
    """A resource of the unregistered type `THING`."""

    variant: int = 0


@attrs.frozen
class ListenerSpec:
    """An HTTP listener on ``port`` whose routes come from RDS ``route``."""

    port: int
    route: str


@attrs.frozen(kw_only=True)
class EnvoyConfig:
    """A consistent Envoy configuration, by type and name (see the module docstring).

    Build one with `configs`; edit it with `ConfigChange`. `resources`
    and `snapshot` build the real resources, memoised per (type, name, content).
    """

    clusters: Mapping[str, ClusterSpec] = attrs.field(factory=dict)
    endpoints: Mapping[str, EndpointSpec] = attrs.field(factory=dict)
    routes: Mapping[str, RouteSpec] = attrs.field(factory=dict)
    listeners: Mapping[str, ListenerSpec] = attrs.field(factory=dict)
    things: Mapping[str, ThingSpec] = attrs.field(factory=dict)
    """Resources of the unregistered type `THING`."""
    marked: frozenset[tuple[str, str]] = frozenset()
    """(type URL, name) of the resources whose content carries `NACK_MARKER`."""

    def names(self, type_url: str) -> list[str]:
        """The names of every resource of ``type_url``, sorted."""
        return sorted(self._table(type_url))

    def _table(self, type_url: str) -> Mapping[str, Spec]:
        tables: dict[str, Mapping[str, Spec]] = {
            CLUSTER: self.clusters,
            ENDPOINT: self.endpoints,
            ROUTE: self.routes,
            LISTENER: self.listeners,
            THING: self.things,
        }
        return tables[type_url]

    def resources(self) -> dict[str, dict[str, Resource]]:
        """Every resource, by type URL (all of `CONFIG_TYPES`) and name."""
        out: dict[str, dict[str, Resource]] = {}
        for type_url in CONFIG_TYPES:
            table = self._table(type_url)
            out[type_url] = {
                name: _build(type_url, name, spec, (type_url, name) in self.marked)
                for name, spec in table.items()
            }
        return out

    def snapshot(self) -> Snapshot:
        """The configuration as a [`Snapshot`][xdscore.Snapshot] declaring every config type."""
        everything = self.resources()
        return Snapshot(
            [resource for names in everything.values() for resource in names.values()],
            types=CONFIG_TYPES,
        )

    def unmarked(self) -> EnvoyConfig:
        """The same configuration with no marked resource."""
        return attrs.evolve(self, marked=frozenset())


Spec: TypeAlias = ClusterSpec | EndpointSpec | RouteSpec | ListenerSpec | ThingSpec


@functools.lru_cache(maxsize=8192)
def _build(type_url: str, name: str, spec: Spec, marked: bool) -> Resource:
    if isinstance(spec, ClusterSpec):
        cluster = builders.eds_cluster(
            name, connect_timeout=float(spec.timeout), service_name=spec.service_name
        )
        if marked:
            cluster.alt_stat_name = NACK_MARKER
        return make_resource(cluster)
    if isinstance(spec, EndpointSpec):
        assignment = builders.load_assignment(name, spec.addresses)
        if marked:
            assignment.endpoints[0].locality.sub_zone = NACK_MARKER
        return make_resource(assignment)
    if isinstance(spec, RouteSpec):
        headers = {"x-nack": NACK_MARKER} if marked else None
        return make_resource(
            builders.route_configuration(name, spec.routes, response_headers=headers)
        )
    if isinstance(spec, ListenerSpec):
        listener = builders.http_listener(name, spec.port, spec.route)
        if marked:
            listener.stat_prefix = NACK_MARKER
        return make_resource(listener)
    body = string_field(1, name) + string_field(2, f"variant-{spec.variant}")
    if marked:
        body += string_field(3, NACK_MARKER)
    return make_resource(body, type_url=type_url, name=name)


def reject_marked(type_url: str, resources: Sequence[Resource]) -> str | None:
    """A client ``validate`` hook: NACK any response holding a marked resource."""
    for resource in resources:
        if _MARKER_BYTES in resource.body:
            return f"{type_info(type_url).short_name} {resource.name!r} carries the NACK marker"
    return None


@attrs.frozen(kw_only=True)
class ConfigChange:
    """One edit of an `EnvoyConfig`: ``put`` (add or update), ``delete``, or
    ``mark``/``unmark``. `apply` keeps the configuration consistent: deleting a
    cluster drops the routes to it, deleting a route configuration drops its listeners."""

    op: str
    type_url: str
    name: str
    spec: Spec | None = None

    def apply(self, config: EnvoyConfig) -> EnvoyConfig:
        """The configuration after this change."""
        key = (self.type_url, self.name)
        if self.op == "mark":
            return attrs.evolve(config, marked=config.marked | {key})
        if self.op == "unmark":
            return attrs.evolve(config, marked=config.marked - {key})
        if self.op == "put":
            return _put(config, self.type_url, self.name, self.spec)
        if self.op == "delete":
            return _delete(config, self.type_url, self.name)
        raise ValueError(f"unknown change {self.op!r}")

    def __str__(self) -> str:
        spec = "" if self.spec is None else f" {self.spec!r}"
        return f"{self.op} {type_info(self.type_url).short_name} {self.name!r}{spec}"


def _put(config: EnvoyConfig, type_url: str, name: str, spec: Spec | None) -> EnvoyConfig:
    if type_url == CLUSTER and isinstance(spec, ClusterSpec):
        endpoints = dict(config.endpoints)
        endpoints.setdefault(spec.eds_name(name), EndpointSpec())
        return attrs.evolve(config, clusters={**config.clusters, name: spec}, endpoints=endpoints)
    if type_url == ENDPOINT and isinstance(spec, EndpointSpec):
        return attrs.evolve(config, endpoints={**config.endpoints, name: spec})
    if type_url == ROUTE and isinstance(spec, RouteSpec):
        kept = RouteSpec(tuple(entry for entry in spec.routes if entry[1] in config.clusters))
        return attrs.evolve(config, routes={**config.routes, name: kept})
    if type_url == LISTENER and isinstance(spec, ListenerSpec):
        routes = dict(config.routes)
        routes.setdefault(spec.route, RouteSpec())
        return attrs.evolve(config, listeners={**config.listeners, name: spec}, routes=routes)
    if type_url == THING and isinstance(spec, ThingSpec):
        return attrs.evolve(config, things={**config.things, name: spec})
    raise TypeError(f"cannot put {spec!r} as a {type_info(type_url).short_name} resource")


def _delete(config: EnvoyConfig, type_url: str, name: str) -> EnvoyConfig:
    marked = config.marked - {(type_url, name)}
    if type_url == CLUSTER:
        clusters = {n: s for n, s in config.clusters.items() if n != name}
        routes = {
            route: RouteSpec(tuple(entry for entry in spec.routes if entry[1] != name))
            for route, spec in config.routes.items()
        }
        return attrs.evolve(config, clusters=clusters, routes=routes, marked=marked)
    if type_url == ENDPOINT:
        if any(spec.eds_name(n) == name for n, spec in config.clusters.items()):
            return config  # a cluster still needs it
        endpoints = {n: e for n, e in config.endpoints.items() if n != name}
        return attrs.evolve(config, endpoints=endpoints, marked=marked)
    if type_url == ROUTE:
        routes = {n: r for n, r in config.routes.items() if n != name}
        listeners = {n: s for n, s in config.listeners.items() if s.route != name}
        return attrs.evolve(config, routes=routes, listeners=listeners, marked=marked)
    if type_url == LISTENER:
        listeners = {n: s for n, s in config.listeners.items() if n != name}
        return attrs.evolve(config, listeners=listeners, marked=marked)
    things = {n: v for n, v in config.things.items() if n != name}
    return attrs.evolve(config, things=things, marked=marked)


def _endpoints() -> st.SearchStrategy[EndpointSpec]:
    address = st.tuples(
        st.integers(1, 254).map(lambda last: f"10.0.0.{last}"), st.integers(1, 65535)
    )
    return st.lists(address, max_size=3, unique=True).map(lambda found: EndpointSpec(tuple(found)))


def _cluster_spec(name: str) -> st.SearchStrategy[ClusterSpec]:
    return st.builds(
        ClusterSpec,
        service_name=st.sampled_from(["", f"{name}-svc"]),
        timeout=st.integers(1, 4),
    )


def _route_spec(clusters: Sequence[str]) -> st.SearchStrategy[RouteSpec]:
    if not clusters:
        return st.just(RouteSpec())
    entry = st.tuples(st.sampled_from(["/", "/api", "/static"]), st.sampled_from(list(clusters)))
    return st.lists(entry, max_size=3).map(lambda found: RouteSpec(tuple(found)))


_NAME_POOL = st.lists(resource_names(awkward=False), min_size=1, max_size=6, unique=True)


@st.composite
def configs(
    draw: st.DrawFn,
    names: Sequence[str] | None = None,
    *,
    max_size: int = 4,
    marked: bool = False,
) -> EnvoyConfig:
    """Consistent configurations of up to ``max_size`` resources per type, named from
    ``names`` (drawn when not given); with ``marked``, some resources carry the NACK marker."""
    pool = list(names) if names is not None else draw(_NAME_POOL)
    subset = st.lists(st.sampled_from(pool), max_size=max_size, unique=True)
    config = EnvoyConfig()
    for name in draw(subset):
        config = _put(config, CLUSTER, name, draw(_cluster_spec(name)))
    endpoints = dict(config.endpoints)
    for name in list(endpoints):
        endpoints[name] = draw(_endpoints())
    config = attrs.evolve(config, endpoints=endpoints)
    for name in draw(subset):
        config = _put(config, ROUTE, name, draw(_route_spec(list(config.clusters))))
    for port, name in enumerate(draw(subset), start=10000):
        route = draw(st.sampled_from(pool))
        config = _put(config, LISTENER, name, ListenerSpec(port=port, route=route))
    for name in draw(subset):
        config = _put(config, THING, name, ThingSpec(draw(st.integers(0, 3))))
    if marked:
        every = [(t, n) for t in CONFIG_TYPES for n in config.names(t)]
        if every:
            chosen = draw(st.lists(st.sampled_from(every), max_size=2, unique=True))
            config = attrs.evolve(config, marked=frozenset(chosen))
    return config


def snapshots(
    names: Sequence[str] | None = None, *, max_size: int = 4
) -> st.SearchStrategy[Snapshot]:
    """Snapshots of consistent Envoy configurations (see `configs`)."""
    return configs(names, max_size=max_size).map(EnvoyConfig.snapshot)


@st.composite
def config_changes(
    draw: st.DrawFn,
    config: EnvoyConfig,
    names: Sequence[str] | None = None,
    *,
    marks: bool = True,
) -> ConfigChange:
    """One add, update or delete of a resource of ``config`` (names from ``names`` or the
    config's own), or with ``marks`` a mark/unmark; applying it keeps the config consistent."""
    pool = list(names) if names else sorted({n for t in CONFIG_TYPES for n in config.names(t)})
    pool = pool or ["a"]
    type_url = draw(st.sampled_from(CONFIG_TYPES))
    existing = config.names(type_url)
    ops = ["put", "put"]
    if existing:
        ops.append("delete")
        if marks:
            ops += ["mark", "unmark"]
    op = draw(st.sampled_from(ops))
    if op != "put":
        name = draw(st.sampled_from(existing))
        return ConfigChange(op=op, type_url=type_url, name=name)
    if type_url == ENDPOINT:
        eds_names = sorted(set(existing) | {s.eds_name(n) for n, s in config.clusters.items()})
        name = draw(st.sampled_from(eds_names or pool))
        return ConfigChange(op=op, type_url=type_url, name=name, spec=draw(_endpoints()))
    name = draw(st.sampled_from(pool))
    spec: Spec
    if type_url == CLUSTER:
        spec = draw(_cluster_spec(name))
    elif type_url == ROUTE:
        spec = draw(_route_spec(list(config.clusters)))
    elif type_url == LISTENER:
        spec = ListenerSpec(port=draw(st.integers(10000, 10010)), route=draw(st.sampled_from(pool)))
    else:
        spec = ThingSpec(draw(st.integers(0, 3)))
    return ConfigChange(op=op, type_url=type_url, name=name, spec=spec)


# --- resources and snapshot edits for any cache ----------------------------------------------


def resources(
    type_url: str = ENDPOINT, names: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy[Resource]:
    """Single resources of ``type_url``: real Envoy messages for CDS, EDS, LDS and RDS,
    minimal named bodies for any other type."""
    names = names if names is not None else resource_names()

    def build(name: str, variant: int) -> Resource:
        spec: Spec
        if type_url == CLUSTER:
            spec = ClusterSpec(timeout=variant + 1)
        elif type_url == ENDPOINT:
            spec = EndpointSpec(((f"10.0.0.{variant + 1}", 80),))
        elif type_url == ROUTE:
            spec = RouteSpec((("/", f"cluster-{variant}"),))
        elif type_url == LISTENER:
            spec = ListenerSpec(port=10000 + variant, route=f"route-{variant}")
        else:
            spec = ThingSpec(variant)
        return _build(type_url, name, spec, False)

    return st.builds(build, names, st.integers(0, 5))


@st.composite
def snapshot_changes(
    draw: st.DrawFn,
    snapshot: Snapshot,
    names: st.SearchStrategy[str] | None = None,
    type_urls: Iterable[str] = (CLUSTER, ENDPOINT, LISTENER, ROUTE),
) -> Snapshot:
    """``snapshot`` with resources added, updated or deleted (consistency is not kept: use
    `config_changes` for that). The declared types stay declared."""
    kinds = list(type_urls)
    by_type = {t: dict(snapshot.resources(t) or {}) for t in snapshot.type_urls}
    for _ in range(draw(st.integers(1, 3))):
        type_url = draw(st.sampled_from(kinds))
        table = by_type.setdefault(type_url, {})
        if len(table) > 0 and draw(st.booleans()):
            del table[draw(st.sampled_from(sorted(table)))]
        else:
            resource = draw(resources(type_url, names))
            table[resource.name] = resource
    return Snapshot(
        [resource for table in by_type.values() for resource in table.values()],
        types=by_type,
    )


# --- client actions --------------------------------------------------------------------------


@attrs.frozen
class Watch:
    """SotW: watch exactly ``names`` of ``type_url`` (``None``: legacy wildcard)."""

    type_url: str
    names: tuple[str, ...] | None


@attrs.frozen
class Subscribe:
    """Delta: subscribe to ``names`` (``*`` for the wildcard; none on a first request is
    legacy wildcard)."""

    type_url: str
    names: tuple[str, ...]


@attrs.frozen
class Unsubscribe:
    """Delta: unsubscribe from ``names`` (``*`` leaves the wildcard)."""

    type_url: str
    names: tuple[str, ...]


@attrs.frozen
class NackNext:
    """Make the client NACK the next response of ``type_url`` (``enabled=False`` disarms)."""

    type_url: str
    enabled: bool = True


@attrs.frozen
class Disconnect:
    """Drop the stream; the client reconnects on a new one."""


ClientAction: TypeAlias = Watch | Subscribe | Unsubscribe | NackNext | Disconnect


def _name_lists(
    names: st.SearchStrategy[str], wildcard: bool
) -> st.SearchStrategy[tuple[str, ...]]:
    element = st.one_of(names, st.just(WILDCARD)) if wildcard else names
    return st.lists(element, max_size=4).map(lambda listed: tuple(sorted(set(listed))))


def sotw_client_actions(
    type_urls: Sequence[str] = CONFIG_TYPES,
    names: st.SearchStrategy[str] | None = None,
    *,
    disconnect: bool = True,
) -> st.SearchStrategy[ClientAction]:
    """SotW client actions, mostly watches (``*`` included; legacy wildcard only for
    wildcard-capable types), else NACK-next toggles and, with ``disconnect``, disconnects."""
    names = names if names is not None else resource_names()

    def watch(type_url: str) -> st.SearchStrategy[ClientAction]:
        listed: st.SearchStrategy[tuple[str, ...] | None] = _name_lists(names, wildcard=True)
        if type_info(type_url).wildcard_capable:
            listed = st.one_of(st.none(), listed)
        return st.builds(Watch, st.just(type_url), listed)

    watches = st.one_of([watch(type_url) for type_url in type_urls])
    options: list[st.SearchStrategy[ClientAction]] = [
        watches,
        watches,
        watches,
        st.builds(NackNext, st.sampled_from(list(type_urls)), st.booleans()),
    ]
    if disconnect:
        options.append(st.just(Disconnect()))
    return st.one_of(options)


def delta_client_actions(
    type_urls: Sequence[str] = CONFIG_TYPES,
    names: st.SearchStrategy[str] | None = None,
    *,
    disconnect: bool = True,
) -> st.SearchStrategy[ClientAction]:
    """Delta client actions, mostly subscribe and unsubscribe (``*`` included), else
    NACK-next toggles and, with ``disconnect``, disconnects."""
    names = names if names is not None else resource_names()
    urls = st.sampled_from(list(type_urls))
    subscribe = st.builds(Subscribe, urls, _name_lists(names, wildcard=True))
    unsubscribe = st.builds(Unsubscribe, urls, _name_lists(names, wildcard=True).filter(bool))
    options: list[st.SearchStrategy[ClientAction]] = [
        subscribe,
        subscribe,
        unsubscribe,
        st.builds(NackNext, urls, st.booleans()),
    ]
    if disconnect:
        options.append(st.just(Disconnect()))
    return st.one_of(options)
