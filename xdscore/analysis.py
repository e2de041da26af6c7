"""Static analysis of a snapshot or of a config directory, before anything is served.

:func:`analyze` looks at a :class:`~xdscore.Snapshot`, or at the ``(where, Resource)`` pairs
:func:`xdscore.config.read_directory` returns, and reports what a client would reject or
never use, as :class:`Diagnostic` records with stable codes:

======  ========  ==============================================================================
code    severity  meaning
======  ========  ==============================================================================
XDS001  ERROR     Dangling reference: a resource refers by name to one that does not exist
                  (route → cluster, listener → route configuration, scoped route → route
                  configuration, cluster → endpoints (EDS service name), cluster or listener →
                  secret, listener → extension config (ECDS)).
XDS002  ERROR     Duplicate name: two resources of one type share a name.
XDS003  ERROR     Wrong type: the bytes do not parse as the declared type, or the message the
                  resource was built from is of another type than its type URL says.
XDS004  WARNING   Unreferenced: a route configuration no listener or scoped route uses,
                  endpoints no cluster uses, a secret no listener or cluster uses. Clusters,
                  listeners and every other type are roots and never unreferenced.
XDS005  INFO      Per-request cluster: a route picks its cluster per request (``cluster_header``,
                  a cluster specifier plugin), so where it goes cannot be checked statically.
XDS006  WARNING   Empty endpoints: an EDS cluster's endpoints exist but hold no endpoint (nor
                  does any LEDS collection they name, when LEDS endpoints are present).
XDS007  ERROR     Name mismatch: the resource is served under one name while its message is
                  named another (``name``, or ``cluster_name`` for endpoints).
XDS008  ERROR     Duplicate domain: a route configuration lists one domain (case-insensitively)
                  twice, or ``*`` twice, across its virtual hosts; Envoy rejects all of it.
XDS009  WARNING   Unknown fields: the bytes carry top-level fields the declared type does not
                  have, the mark of a message of another type (or of a newer API than the
                  installed ``xds-protos``).
XDS010  WARNING   Egress matches no cluster (``scopes.yaml``, :func:`analyze_scopes`): a
                  scope's egress glob matches no cluster.
XDS011  WARNING   Scope shadowed: an earlier scope's node selector covers this one's, so
                  the first match never picks it.
XDS012  WARNING   Scope sees nothing: the scope's closure is empty.
XDS013  ERROR     Field constraint: a field breaks a protoc-gen-validate rule of Envoy's API
                  (``validate.rules``: an empty name, a negative duration, a port over
                  65535, a required field or oneof missing, ...); Envoy would reject it.
XDS014  WARNING   Locality without weight: endpoints that proxyless gRPC clients reach (from
                  an API listener) hold a locality with endpoints and no
                  ``load_balancing_weight``; gRPC ignores it, and fails RPCs with UNAVAILABLE
                  when no other locality is left. Envoy does not need the weight, so the check
                  is only made for what an API listener reaches.
XDS015  WARNING   Private secret visible to several scopes (``scopes.yaml``): a secret with
                  a private key, a password or a shared secret is in more than one scope's
                  view, so the proxies of each can read it.
======  ========  ==============================================================================

Which types count as present decides what a dangling or an unreferenced resource is. A
reference to a type that is not present is not checked (another source may serve it), and a
resource is only unreferenced when every type that could refer to it is present. With
``complete=True`` every registered type counts as present: the resources given are all
there is. That is the default for ``(where, Resource)`` pairs (a config directory is the only
source of its server). For a snapshot the default is ``complete=False``: the types present are
:attr:`Snapshot.type_urls <xdscore.Snapshot.type_urls>`, as for
:meth:`Snapshot.inconsistencies <xdscore.Snapshot.inconsistencies>`.

References are those :mod:`xdscore.wire._references` extracts, decoded with the protobuf
runtime (``xds-protos``).
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError, Message

from .cache._scoped import GRAPH_TYPES, Scope, ScopedCache
from .cache._snapshot import Snapshot
from .cache._snapshot_cache import SnapshotCache, same_for_all
from .wire._constraints import violations
from .wire._messages import holds_private_parts, message_class, resource_name
from .wire._names import canonical_name, collection_of
from .wire._records import Node
from .wire._references import unresolvable
from .wire._resource import Resource
from .wire._typeurls import (
    CLUSTER,
    ENDPOINT,
    EXTENSION_CONFIG,
    LBENDPOINT,
    LISTENER,
    ROUTE,
    RUNTIME,
    SCOPED_ROUTE,
    SECRET,
    VIRTUAL_HOST,
    all_types,
    type_info,
)

__all__ = [
    "CODES",
    "DANGLING_REFERENCE",
    "DUPLICATE_DOMAIN",
    "DUPLICATE_NAME",
    "EMPTY_ENDPOINTS",
    "FIELD_CONSTRAINT",
    "NAME_MISMATCH",
    "UNWEIGHTED_LOCALITY",
    "PER_REQUEST_CLUSTER",
    "SCOPE_EMPTY",
    "SCOPE_SHADOWED",
    "SCOPE_SHARED_SECRET",
    "SCOPE_UNMATCHED_EGRESS",
    "UNKNOWN_FIELDS",
    "UNREFERENCED",
    "WRONG_TYPE",
    "Diagnostic",
    "Report",
    "Severity",
    "analyze",
    "analyze_scopes",
]


class Severity(enum.Enum):
    """How bad a diagnostic is: ERROR is refused by the config server, the rest is advice."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """2 for ERROR, 1 for WARNING, 0 for INFO: compare ranks to filter by severity."""
        return _RANKS[self]

    def __str__(self) -> str:
        return self.name


_RANKS = {Severity.ERROR: 2, Severity.WARNING: 1, Severity.INFO: 0}

DANGLING_REFERENCE = "XDS001"
DUPLICATE_NAME = "XDS002"
WRONG_TYPE = "XDS003"
UNREFERENCED = "XDS004"
PER_REQUEST_CLUSTER = "XDS005"
EMPTY_ENDPOINTS = "XDS006"
NAME_MISMATCH = "XDS007"
DUPLICATE_DOMAIN = "XDS008"
UNKNOWN_FIELDS = "XDS009"
SCOPE_UNMATCHED_EGRESS = "XDS010"
SCOPE_SHADOWED = "XDS011"
SCOPE_EMPTY = "XDS012"
FIELD_CONSTRAINT = "XDS013"
UNWEIGHTED_LOCALITY = "XDS014"
SCOPE_SHARED_SECRET = "XDS015"

CODES: Mapping[str, tuple[Severity, str]] = {
    DANGLING_REFERENCE: (Severity.ERROR, "dangling reference"),
    DUPLICATE_NAME: (Severity.ERROR, "duplicate name"),
    WRONG_TYPE: (Severity.ERROR, "wrong type"),
    UNREFERENCED: (Severity.WARNING, "unreferenced resource"),
    PER_REQUEST_CLUSTER: (Severity.INFO, "cluster chosen per request"),
    EMPTY_ENDPOINTS: (Severity.WARNING, "empty endpoints"),
    NAME_MISMATCH: (Severity.ERROR, "name mismatch"),
    DUPLICATE_DOMAIN: (Severity.ERROR, "duplicate domain"),
    UNKNOWN_FIELDS: (Severity.WARNING, "unknown fields"),
    SCOPE_UNMATCHED_EGRESS: (Severity.WARNING, "egress pattern matches no cluster"),
    SCOPE_SHADOWED: (Severity.WARNING, "scope shadowed by an earlier one"),
    SCOPE_EMPTY: (Severity.WARNING, "scope sees nothing"),
    FIELD_CONSTRAINT: (Severity.ERROR, "field constraint"),
    UNWEIGHTED_LOCALITY: (Severity.WARNING, "locality without weight (gRPC)"),
    SCOPE_SHARED_SECRET: (Severity.WARNING, "private secret visible to several scopes"),
}
"""Every code: its severity and a short title."""

_NOUNS = {
    LISTENER: "listener",
    ROUTE: "route configuration",
    SCOPED_ROUTE: "scoped route configuration",
    VIRTUAL_HOST: "virtual host",
    CLUSTER: "cluster",
    ENDPOINT: "endpoints",
    LBENDPOINT: "LEDS endpoint",
    SECRET: "secret",
    RUNTIME: "runtime layer",
    EXTENSION_CONFIG: "extension config",
}

# Who may refer to a resource of the key type. Only these types can be unreferenced (XDS004).
_REFERRERS: Mapping[str, tuple[str, ...]] = {
    ROUTE: (LISTENER, SCOPED_ROUTE),
    ENDPOINT: (CLUSTER,),
    SECRET: (LISTENER, CLUSTER),
}


# The references a proxyless gRPC client follows from its API listener down to endpoints.
_GRPC_FOLLOWS: Mapping[str, frozenset[str]] = {
    LISTENER: frozenset({ROUTE, CLUSTER}),
    ROUTE: frozenset({CLUSTER}),
    CLUSTER: frozenset({ENDPOINT}),
}


# VHDS resources are named "<route configuration>/<domain>", not by their message.
_NAMED_OTHERWISE = frozenset({VIRTUAL_HOST})


def _inner_name(type_url: str, message: Message) -> str | None:
    """The name the message gives itself, if its type has one the resource must match."""
    if type_url in _NAMED_OTHERWISE:
        return None
    try:
        return resource_name(type_url, message)
    except ValueError:
        return None


def _noun(type_url: str) -> str:
    return _NOUNS.get(type_url) or type_info(type_url).message_name.rsplit(".", 1)[-1]


@attrs.frozen(kw_only=True)
class Diagnostic:
    """One finding about the resource ``name`` of type ``type_url``.

    ``where`` is where the resource came from (a file and document), when known; ``field``
    is the part of the resource the finding is about, when there is one.
    """

    code: str
    severity: Severity
    message: str
    type_url: str
    name: str
    where: str | None = None
    field: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        """The diagnostic as a JSON-ready mapping (severity in lower case)."""
        return {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "type_url": self.type_url,
            "name": self.name,
            "where": self.where,
            "field": self.field,
        }

    def __str__(self) -> str:
        return f"{self.where or 'snapshot'}: {self.severity} {self.code} {self.message}"


def _sort_key(diagnostic: Diagnostic) -> tuple[str, ...]:
    return (
        diagnostic.code,
        diagnostic.type_url,
        diagnostic.name,
        diagnostic.where or "",
        diagnostic.field or "",
        diagnostic.message,
    )


def _sorted(diagnostics: Iterable[Diagnostic]) -> tuple[Diagnostic, ...]:
    return tuple(sorted(diagnostics, key=_sort_key))


@attrs.frozen
class Report:
    """What :func:`analyze` found, sorted by code, type URL and name (then location, field)."""

    diagnostics: tuple[Diagnostic, ...] = attrs.field(default=(), converter=_sorted)

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        """The diagnostics of ERROR severity."""
        return self._of(Severity.ERROR)

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        """The diagnostics of WARNING severity."""
        return self._of(Severity.WARNING)

    @property
    def infos(self) -> tuple[Diagnostic, ...]:
        """The diagnostics of INFO severity."""
        return self._of(Severity.INFO)

    @property
    def has_errors(self) -> bool:
        """Whether anything of ERROR severity was found."""
        return bool(self.errors)

    def _of(self, severity: Severity) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity is severity)

    def codes(self) -> list[str]:
        """The code of every diagnostic, in order (repeats included)."""
        return [d.code for d in self.diagnostics]

    def at_least(self, severity: Severity) -> Report:
        """The diagnostics of ``severity`` or worse."""
        return Report(tuple(d for d in self.diagnostics if d.severity.rank >= severity.rank))

    def to_json(self) -> list[dict[str, str | None]]:
        """Every diagnostic as a JSON-ready mapping (see :meth:`Diagnostic.to_dict`)."""
        return [d.to_dict() for d in self.diagnostics]

    def to_text(self) -> str:
        """One line per diagnostic, ``where: SEVERITY CODE message`` ("" if none)."""
        return "\n".join(str(d) for d in self.diagnostics)

    def __iter__(self) -> Iterator[Diagnostic]:
        return iter(self.diagnostics)

    def __len__(self) -> int:
        return len(self.diagnostics)


def analyze(
    source: Snapshot | Iterable[tuple[str | None, Resource]],
    *,
    locations: Mapping[tuple[str, str], str] | None = None,
    complete: bool | None = None,
) -> Report:
    """Check a snapshot, or ``(where, Resource)`` pairs, and report what is wrong.

    Pairs (as :func:`xdscore.config.read_directory` returns them) may hold duplicates, which
    are reported with both locations. ``locations`` maps ``(type_url, name)`` to where a
    resource came from, for a snapshot or for pairs that lack one.

    ``complete`` says whether every registered type counts as present (see the module
    documentation); ``None`` means ``True`` for pairs and ``False`` for a snapshot, whose
    present types are then :attr:`Snapshot.type_urls <xdscore.Snapshot.type_urls>`.
    """
    places = locations or {}
    entries: list[tuple[str | None, Resource]]
    if isinstance(source, Snapshot):
        entries = [(places.get((r.type_url, r.name)), r) for r in source]
        held = set(source.type_urls)
        complete = False if complete is None else complete
    else:
        entries = [(where or places.get((r.type_url, r.name)), r) for where, r in _pairs(source)]
        held = {resource.type_url for _, resource in entries}
        complete = True if complete is None else complete
    present = held | {info.type_url for info in all_types()} if complete else held
    return Report(_Analysis(entries, frozenset(present)).run())


def _pairs(source: Iterable[Any]) -> Iterator[tuple[str | None, Resource]]:
    for item in source:
        if (
            not isinstance(item, tuple)
            or len(item) != 2
            or not isinstance(item[1], Resource)
            or not (item[0] is None or isinstance(item[0], str))
        ):
            raise TypeError(
                "analyze() takes a Snapshot or (where, Resource) pairs, "
                f"not an iterable of {type(item).__qualname__}"
            )
        yield item[0], item[1]


class _Analysis:
    """One run of every check over ``entries``, with the types that count as present."""

    def __init__(self, entries: list[tuple[str | None, Resource]], present: frozenset[str]):
        self.entries = entries
        self.present = present
        self.found: list[Diagnostic] = []
        # The first resource of each (type, name), where it came from, and its message.
        self.first: dict[tuple[str, str], tuple[str | None, Resource]] = {}
        self.messages: dict[tuple[str, str], Message] = {}

    def run(self) -> list[Diagnostic]:
        for where, resource in self.entries:
            key = (resource.type_url, resource.name)
            if key in self.first:
                self._duplicate(where, resource, self.first[key][0])
                message = self._decode(where, resource)
            else:
                self.first[key] = (where, resource)
                message = self._decode(where, resource)
                if message is not None:
                    self.messages[key] = message
            if message is not None:
                self._constraints(where, resource, message)
            if isinstance(message, route_pb2.RouteConfiguration):
                self._domains(where, resource, message)
            self._per_request(where, resource)
        referenced: set[tuple[str, str]] = set()
        for where, resource in self.entries:
            for ref in resource.references:
                target = (ref.type_url, ref.name)
                referenced.add(target)
                if target not in self.first:
                    if ref.type_url in self.present:
                        self._dangling(where, resource, ref.type_url, ref.name, ref.field)
                elif resource.type_url == CLUSTER and ref.type_url == ENDPOINT:
                    self._empty_endpoints(where, resource, ref.name, ref.field)
        self._unreferenced(referenced)
        self._unweighted_localities()
        return self.found

    def _add(
        self,
        code: str,
        message: str,
        resource: Resource,
        where: str | None,
        field: str | None = None,
    ) -> None:
        severity, _ = CODES[code]
        self.found.append(
            Diagnostic(
                code=code,
                severity=severity,
                message=message,
                type_url=resource.type_url,
                name=resource.name,
                where=where,
                field=field,
            )
        )

    def _duplicate(self, where: str | None, resource: Resource, first_where: str | None) -> None:
        also = f"; first defined in {first_where}" if first_where else ""
        self._add(
            DUPLICATE_NAME,
            f"{_noun(resource.type_url)} {resource.name!r} is defined more than once{also}",
            resource,
            where,
        )

    def _decode(self, where: str | None, resource: Resource) -> Message | None:
        """The resource's message, or ``None`` (with XDS003) if its bytes are not one."""
        noun, name = _noun(resource.type_url), resource.name
        declared = type_info(resource.type_url).message_name
        try:
            cls = message_class(resource.type_url)
        except KeyError:
            return None  # a type protobuf does not know: nothing to check it against
        built_from = resource.message
        if isinstance(built_from, Message) and built_from.DESCRIPTOR.full_name != declared:
            self._add(
                WRONG_TYPE,
                f"{noun} {name!r} is declared as {declared} but was built from a "
                f"{built_from.DESCRIPTOR.full_name} message",
                resource,
                where,
            )
            return None
        try:
            message = cls.FromString(resource.body)
        except DecodeError as exc:
            self._add(
                WRONG_TYPE, f"{noun} {name!r} does not parse as {declared}: {exc}", resource, where
            )
            return None
        unknown = sorted({field.field_number for field in unknown_fields.UnknownFieldSet(message)})
        if unknown:
            numbers = ", ".join(str(number) for number in unknown)
            self._add(
                UNKNOWN_FIELDS,
                f"{noun} {name!r} carries field numbers {declared} does not have ({numbers}): "
                "the bytes of another message type, or of a newer API than xds-protos knows",
                resource,
                where,
            )
        inner = _inner_name(resource.type_url, message)
        if inner is not None and inner != resource.name and not name.startswith("xdstp:"):
            self._add(
                NAME_MISMATCH,
                f"{noun} {name!r} holds a message named {inner!r}: "
                "clients would know it by another name than the control plane",
                resource,
                where,
                "cluster_name" if resource.type_url == ENDPOINT else "name",
            )
        return message

    def _constraints(self, where: str | None, resource: Resource, message: Message) -> None:
        for violation in violations(message):
            self._add(
                FIELD_CONSTRAINT,
                f"{_noun(resource.type_url)} {resource.name!r}: {violation.field or 'the message'}"
                f" {violation.message} (validate rule {violation.rule}); Envoy rejects it",
                resource,
                where,
                violation.field or None,
            )

    def _domains(
        self, where: str | None, resource: Resource, config: route_pb2.RouteConfiguration
    ) -> None:
        seen: dict[str, str] = {}
        for host in config.virtual_hosts:
            for domain in host.domains:
                folded = domain.lower()
                if folded not in seen:
                    seen[folded] = host.name
                    continue
                other = seen[folded]
                hosts = (
                    f"twice in virtual host {host.name!r}"
                    if other == host.name
                    else f"in virtual hosts {other!r} and {host.name!r}"
                )
                what = "the wildcard domain '*'" if domain == "*" else f"domain {domain!r}"
                self._add(
                    DUPLICATE_DOMAIN,
                    f"route configuration {resource.name!r} lists {what} {hosts}; "
                    "Envoy rejects the whole route configuration",
                    resource,
                    where,
                    f"virtual_hosts[{host.name}].domains",
                )

    def _per_request(self, where: str | None, resource: Resource) -> None:
        for field in unresolvable(resource.type_url, resource.body):
            self._add(
                PER_REQUEST_CLUSTER,
                f"route configuration {resource.name!r} chooses a cluster per request "
                f"({field}); the clusters it may use cannot be checked",
                resource,
                where,
                field,
            )

    def _dangling(
        self, where: str | None, resource: Resource, type_url: str, name: str, field: str
    ) -> None:
        self._add(
            DANGLING_REFERENCE,
            f"{_noun(resource.type_url)} {resource.name!r} refers to {_noun(type_url)} "
            f"{name!r} ({field}), which does not exist",
            resource,
            where,
            field,
        )

    def _empty_endpoints(
        self, where: str | None, resource: Resource, name: str, field: str
    ) -> None:
        assignment = self.messages.get((ENDPOINT, name))
        if not isinstance(assignment, endpoint_pb2.ClusterLoadAssignment):
            return
        if any(group.lb_endpoints for group in assignment.endpoints):
            return
        collections = sorted(
            canonical_name(group.leds_cluster_locality_config.leds_collection_name)
            for group in assignment.endpoints
            if group.HasField("leds_cluster_locality_config")
        )
        if collections:
            if LBENDPOINT not in self.present or not self._leds_empty(collections):
                return
            lists = f"whose LEDS collections ({', '.join(collections)}) hold no endpoint"
        else:
            lists = "which lists none"
        self._add(
            EMPTY_ENDPOINTS,
            f"cluster {resource.name!r} takes its endpoints from {name!r}, {lists}: "
            "every request to it fails with no healthy upstream",
            resource,
            where,
            field,
        )

    def _grpc_endpoints(self) -> dict[tuple[str, str], str]:
        """The endpoints an API listener reaches, each with the first such listener's name."""
        reached: dict[tuple[str, str], str] = {}
        for key, message in self.messages.items():
            if isinstance(message, listener_pb2.Listener) and message.HasField("api_listener"):
                for target in self._reached_by_grpc(key):
                    if target[0] == ENDPOINT:
                        reached.setdefault(target, key[1])
        return reached

    def _reached_by_grpc(self, start: tuple[str, str]) -> set[tuple[str, str]]:
        """What the API listener ``start`` reaches through the references gRPC follows."""
        seen, pending = {start}, [start]
        while pending:
            _, resource = self.first[pending.pop()]
            for ref in resource.references:
                target = (ref.type_url, ref.name)
                allowed = ref.type_url in _GRPC_FOLLOWS.get(resource.type_url, ())
                if allowed and target in self.first and target not in seen:
                    seen.add(target)
                    pending.append(target)
        return seen

    def _unweighted_localities(self) -> None:
        for key, listener in self._grpc_endpoints().items():
            assignment = self.messages.get(key)
            if not isinstance(assignment, endpoint_pb2.ClusterLoadAssignment):
                continue
            where, resource = self.first[key]
            for index, group in enumerate(assignment.endpoints):
                if not group.lb_endpoints or group.HasField("load_balancing_weight"):
                    continue  # a weight of 0 is an XDS013 error already
                self._add(
                    UNWEIGHTED_LOCALITY,
                    f"endpoints {resource.name!r}: locality endpoints[{index}] has no "
                    "load_balancing_weight; "
                    f"gRPC clients (API listener {listener!r}) ignore it, and fail RPCs with "
                    "UNAVAILABLE if no other locality is left",
                    resource,
                    where,
                    f"endpoints[{index}].load_balancing_weight",
                )

    def _leds_empty(self, collections: Iterable[str]) -> bool:
        """Whether no LEDS endpoint given is in any of ``collections``."""
        held = {collection_of(name) for type_url, name in self.first if type_url == LBENDPOINT}
        return held.isdisjoint(collections)

    def _unreferenced(self, referenced: set[tuple[str, str]]) -> None:
        for key, (where, resource) in self.first.items():
            referrers = _REFERRERS.get(resource.type_url)
            if referrers is None or key in referenced:
                continue
            if not all(type_url in self.present for type_url in referrers):
                continue
            users = " or ".join(_noun(type_url) for type_url in referrers)
            self._add(
                UNREFERENCED,
                f"{_noun(resource.type_url)} {resource.name!r} is not used by any {users}; "
                "no client will ask for it",
                resource,
                where,
            )


def analyze_scopes(
    scopes: Iterable[Scope], resources: Snapshot, *, where: str | None = None
) -> Report:
    """Check scopes against the resources they select from: an egress glob that matches no
    cluster (XDS010), a scope whose node selector an earlier scope's covers, so that it
    selects no node (XDS011), a scope that sees no resource at all (XDS012), and a secret
    with private parts that more than one scope sees (XDS015)."""
    ordered = list(scopes)
    clusters = list(resources.resources(CLUSTER) or {})
    source = SnapshotCache(group=same_for_all)
    source.set_snapshot(None, resources)
    cache = ScopedCache(source, ordered)
    found: list[Diagnostic] = []
    seen_by: dict[str, list[str]] = {}

    def report(code: str, scope: Scope, message: str, field: str | None = None) -> None:
        found.append(
            Diagnostic(
                code=code,
                severity=CODES[code][0],
                message=f"scope {scope.name!r}: {message}",
                type_url="",
                name=scope.name,
                where=where,
                field=field,
            )
        )

    for index, scope in enumerate(ordered):
        for glob in scope.egress:
            if not any(fnmatch.fnmatchcase(name, glob) for name in clusters):
                report(
                    SCOPE_UNMATCHED_EGRESS, scope, f"egress {glob!r} matches no cluster", "egress"
                )
        for earlier in ordered[:index]:
            if earlier.nodes.covers(scope.nodes):
                report(
                    SCOPE_SHADOWED,
                    scope,
                    f"every node it selects is selected first by scope {earlier.name!r}",
                    "nodes",
                )
                break
        view = cache.scope_view(scope.name, Node())
        if view is not None and not any(view.resources(t) for t in GRAPH_TYPES):
            report(SCOPE_EMPTY, scope, "its closure is empty: its proxies get no resource")
        for name in (view.resources(SECRET) or {}) if view is not None else ():
            seen_by.setdefault(name, []).append(scope.name)
    secrets = resources.resources(SECRET) or {}
    for name, scopes_seeing in sorted(seen_by.items()):
        if len(scopes_seeing) > 1 and holds_private_parts(secrets[name]):
            found.append(
                Diagnostic(
                    code=SCOPE_SHARED_SECRET,
                    severity=CODES[SCOPE_SHARED_SECRET][0],
                    message=f"secret {name!r} holds private parts (a key, a password) and "
                    f"scopes {', '.join(map(repr, scopes_seeing))} all see it: the proxies "
                    "of each can read it",
                    type_url=SECRET,
                    name=name,
                    where=where,
                )
            )
    return Report(found)
