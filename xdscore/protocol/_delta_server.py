"""The server side of one incremental (Delta) xDS stream, as a pure state machine.

Theory of operation
-------------------
Like :class:`~xdscore.SotwServer`, one :class:`DeltaServer` exists per gRPC
stream; :meth:`~DeltaServer.receive` applies a decoded request and returns events,
:meth:`~DeltaServer.poll` returns the responses due against a
:class:`~xdscore.ResourceView`. Each type URL is independent.

Per type the machine keeps a :class:`DeltaTypeState`:

* ``subscription``: changed by every request, **even one with a stale nonce**: in Delta the
  nonce only pairs ACK/NACK, it never makes a subscription change stale.
* ``client_has``: name → version the client is known to hold. Seeded from
  ``initial_resource_versions`` on the first request of the type on the stream (so after a
  reconnect only the difference is sent, and held names that no longer exist are removed),
  then updated by ACKs. Explicitly unsubscribed names leave it without a response.
* ``must_answer``: names owed an answer whatever the server believes the client holds:
  every name in ``resource_names_subscribe``, and, while the client is subscribed to the
  wildcard, every name it explicitly unsubscribes (answered with the resource if still in
  the wildcard, or a removal). Names a reconnecting client lists with a version are not
  owed: their version says what the client holds.
* ``rejected``: name → version NACKed; such a version is not sent again unless the client
  asks for the name again; the next different version is sent. This holds for every
  resource of a rejected response, good or bad: clients apply the valid resources of a
  rejected update (Envoy's clusters and listeners, gRPC per its xDS NACK semantics), so
  re-sending them would only repeat the rejection.
* ``outstanding``: the response awaiting ACK/NACK; at most one per type.

A response carries, for each name the subscription wants, the resource when the client
does not hold its version (or the name is owed), and in ``removed_resources`` every name the
client holds (or is owed) that does not exist or is no longer wanted. No name appears twice
and never in both lists. ``system_version_info`` is the type's content version, for debugging.

On ADS, sending clusters makes their endpoints owed, because a cluster warms until its
endpoints arrive, and a reconnecting or updated cluster may not ask for them again. Also on
ADS, what is due goes through make-before-break ordering (:mod:`xdscore._ordering`): a
changed resource that refers to something the client does not hold yet waits, and so does
the removal of a resource that something the client holds still refers to. ``holding``
keeps the acknowledged resources whose content is known, which the ordering reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

import attrs

from ..wire._records import DeltaDiscoveryRequest, ErrorDetail
from ..wire._resource import Resource
from ..wire._typeurls import CLUSTER, ENDPOINT, VIRTUAL_HOST
from ._events import (
    Event,
    NodeIdentified,
    ResponseAcked,
    ResponseNacked,
    StaleNonceSeen,
    SubscriptionChanged,
)
from ._identity import check_node, resolve_type
from ._limits import StreamLimits, check_names, check_subscribed, check_type_count
from ._machine import ServerMachine
from ._ordering import blocked, referenced
from ._subscription import EVERYTHING, WILDCARD, Subscription
from ._view import ResourceView

__all__ = ["DeltaResponse", "DeltaServer", "DeltaTypeState"]

_EMPTY: frozenset[str] = frozenset()
_REMOVED = ""
"""The version recorded in ``rejected`` for a removal the client NACKed."""
_UNKNOWN = ""
"""The version recorded in ``client_has`` for a resource the client may or may not hold."""


@attrs.frozen(kw_only=True)
class DeltaResponse:
    """A Delta response to send: changed resources and removed names of one type."""

    type_url: str
    nonce: str
    system_version_info: str
    resources: tuple[Resource, ...]
    removed: tuple[str, ...]


@attrs.frozen(kw_only=True)
class DeltaTypeState:
    """What one Delta stream knows about one type (see the module docstring)."""

    subscription: Subscription
    client_has: Mapping[str, str] = attrs.field(factory=dict)
    must_answer: frozenset[str] = _EMPTY
    rejected: Mapping[str, str] = attrs.field(factory=dict)
    last_error: ErrorDetail | None = None
    latest_nonce: str = ""
    answered: bool = False
    """Whether the client has an answer for this type: a response, or the versions it
    presented on reconnect. Until then even an empty response is due, so that a client
    subscribed to a type with no resources does not wait out its initial fetch timeout."""
    outstanding: DeltaResponse | None = None
    holding: Mapping[str, Resource] = attrs.field(factory=dict)
    """The resources the client holds whose content is known, for ordering."""
    synced: Mapping[str, Resource] | None = None
    """The resource mapping this state was last reconciled with: unchanged, nothing to do;
    changed, only the names the view says changed since then need a look."""
    acks: int = 0
    nacks: int = 0


class DeltaServer(ServerMachine[DeltaTypeState, DeltaDiscoveryRequest, DeltaResponse]):
    """The server side of one Delta stream. ``type_url`` fixes the type on per-type services."""

    def __init__(
        self,
        *,
        nonce_source: Callable[[], str],
        type_url: str | None = None,
        limits: StreamLimits | None = None,
        ordered: bool = True,
    ) -> None:
        super().__init__(
            nonce_source=nonce_source, type_url=type_url, limits=limits, ordered=ordered
        )
        self._endpoints_owed: frozenset[str] = frozenset()
        self._aliases: tuple[Mapping[str, Resource], dict[str, Resource]] | None = None

    def holds(self, type_url: str) -> Mapping[str, Resource]:
        """What the client acknowledged of ``type_url`` and no response in flight removes."""
        status = self._types.get(type_url)
        if status is None:
            return {}
        if status.outstanding is None or not status.outstanding.removed:
            return status.holding
        gone = set(status.outstanding.removed)
        return {name: r for name, r in status.holding.items() if name not in gone}

    def may_hold(self, type_url: str) -> list[Resource]:
        """Every version of ``type_url`` resources the client acknowledged or is being sent."""
        status = self._types.get(type_url)
        if status is None:
            return []
        held = list(status.holding.values())
        if status.outstanding is not None:
            held.extend(status.outstanding.resources)
        return held

    def _receive(self, request: DeltaDiscoveryRequest) -> list[Event]:
        events: list[Event] = []
        first = self.node is None
        self.node = check_node(self.node, request.node)
        if first:
            events.append(NodeIdentified(node=self.node))
        info = resolve_type(self._fixed_type, request.type_url, delta=True)
        subscribe = request.resource_names_subscribe
        unsubscribe = request.resource_names_unsubscribe
        check_names(subscribe, self._limits, "resource_names_subscribe")
        check_names(unsubscribe, self._limits, "resource_names_unsubscribe")
        type_url = info.type_url
        status = self._types.get(type_url)

        if status is None:
            check_type_count(len(self._types), self._limits)
            check_names(
                list(request.initial_resource_versions), self._limits, "initial_resource_versions"
            )
            subscription = Subscription.delta_initial(
                subscribe, unsubscribe, wildcard_capable=info.wildcard_capable
            )
            check_subscribed(len(subscription.names), self._limits)
            held = dict(request.initial_resource_versions)
            must_answer = frozenset(subscribe) - {WILDCARD} - held.keys()
            if type_url == ENDPOINT and self._endpoints_owed:
                owed = self._endpoints_owed
                must_answer |= frozenset(n for n in owed if subscription.wants(n))
                self._endpoints_owed = frozenset()
            self._types[type_url] = DeltaTypeState(
                subscription=subscription,
                client_has=held,
                must_answer=must_answer,
                answered=bool(request.initial_resource_versions),
            )
            events.append(
                SubscriptionChanged(type_url=type_url, previous=None, subscription=subscription)
            )
            return events

        nonce = request.response_nonce
        outstanding = status.outstanding
        if nonce:
            if outstanding is not None and nonce == outstanding.nonce:
                status = self._settle(status, outstanding, request.error_detail, events)
            else:
                events.append(
                    StaleNonceSeen(type_url=type_url, nonce=nonce, latest=status.latest_nonce)
                )

        previous = status.subscription
        subscription = previous.delta_update(subscribe, unsubscribe)
        check_subscribed(len(subscription.names), self._limits)
        must_answer = status.must_answer | (frozenset(subscribe) - {WILDCARD})
        client_has = status.client_has
        if unsubscribe:
            dropped = frozenset(unsubscribe) - {WILDCARD}
            if subscription.wildcard:
                must_answer |= dropped
            else:
                must_answer -= dropped - frozenset(subscribe)
                client_has = {n: v for n, v in client_has.items() if n not in dropped}
            if WILDCARD in unsubscribe and not subscription.wildcard:
                client_has = {n: v for n, v in client_has.items() if n in subscription.names}
        holding, rejected = status.holding, status.rejected
        if client_has is not status.client_has:
            holding = {n: r for n, r in holding.items() if n in client_has}
            rejected = {n: v for n, v in rejected.items() if subscription.wants(n)}
        status = attrs.evolve(
            status,
            subscription=subscription,
            must_answer=must_answer,
            client_has=client_has,
            holding=holding,
            rejected=rejected,
        )
        if subscription != previous:
            status = attrs.evolve(status, synced=None)
            events.append(
                SubscriptionChanged(type_url=type_url, previous=previous, subscription=subscription)
            )
        self._types[type_url] = status
        return events

    @staticmethod
    def _settle(
        status: DeltaTypeState,
        outstanding: DeltaResponse,
        error: ErrorDetail | None,
        events: list[Event],
    ) -> DeltaTypeState:
        """Apply the ACK or NACK of the outstanding response."""
        if error is not None:
            rejected = dict(status.rejected)
            rejected.update({r.name: r.version for r in outstanding.resources})
            rejected.update(dict.fromkeys(outstanding.removed, _REMOVED))
            events.append(
                ResponseNacked(
                    type_url=outstanding.type_url,
                    rejected=outstanding.system_version_info,
                    version_info="",
                    nonce=outstanding.nonce,
                    error=error,
                )
            )
            # Clients apply the valid part of a rejected response, so what it carried may now
            # be held at a version the server does not know: if it goes away, say so.
            client_has = dict(status.client_has)
            for resource in outstanding.resources:
                if _wanted(status.subscription, resource.name, resource):
                    client_has.setdefault(resource.name, _UNKNOWN)
            return attrs.evolve(
                status,
                outstanding=None,
                client_has=client_has,
                rejected=rejected,
                last_error=error,
                nacks=status.nacks + 1,
                synced=None,
            )
        client_has = dict(status.client_has)
        holding = dict(status.holding)
        rejected = dict(status.rejected)
        for resource in outstanding.resources:
            rejected.pop(resource.name, None)
            if not _wanted(status.subscription, resource.name, resource):
                continue  # unsubscribed while in flight: the client dropped it
            client_has[resource.name] = resource.version
            holding[resource.name] = resource
        for name in outstanding.removed:
            client_has.pop(name, None)
            holding.pop(name, None)
            rejected.pop(name, None)
        events.append(
            ResponseAcked(
                type_url=outstanding.type_url,
                version_info=outstanding.system_version_info,
                nonce=outstanding.nonce,
            )
        )
        return attrs.evolve(
            status,
            outstanding=None,
            client_has=client_has,
            holding=holding,
            rejected=rejected,
            acks=status.acks + 1,
        )

    def _candidates(
        self, status: DeltaTypeState, resources: Mapping[str, Resource]
    ) -> Iterator[str]:
        sources: list[Iterable[str]] = [
            status.must_answer,
            status.client_has,
            status.subscription.names,
        ]
        if status.subscription.wildcard:
            sources.append(resources)
        return _unique(*sources)

    def _respond(self, type_url: str, view: ResourceView) -> DeltaResponse | None:
        status = self._types[type_url]
        if status.outstanding is not None:
            return None
        resources = view.resources(type_url)
        if resources is None or (status.synced is resources and not status.must_answer):
            return None
        subscription = status.subscription
        due: dict[str, Resource] = {}
        removed: list[str] = []
        recognised: dict[str, Resource] = {}
        changed = None
        if status.synced is not None:
            changed = view.changed_since(type_url, status.synced)
        names = (
            self._candidates(status, resources)
            if changed is None
            else _unique(status.must_answer, changed)
        )
        for name in names:
            owed = name in status.must_answer
            resource = self._lookup(type_url, resources, name)
            if resource is not None and not _wanted(subscription, name, resource):
                resource = None
            if resource is not None:
                key = resource.name
                held = status.client_has.get(key)
                if held == resource.version and key not in status.holding:
                    recognised[key] = resource
                if owed or (
                    held != resource.version and status.rejected.get(key) != resource.version
                ):
                    due[key] = resource
            elif owed or (name in status.client_has and status.rejected.get(name) != _REMOVED):
                removed.append(name)
        sending = list(due.values())
        removed = [name for name in removed if name not in due]
        if recognised:
            status = attrs.evolve(status, holding={**status.holding, **recognised})
            self._types[type_url] = status
        deferred: frozenset[str] = _EMPTY
        if self._ordered and (sending or removed):
            sending, removed, deferred = self._make_before_break(
                type_url, status, sending, removed, view
            )
        if not sending and not removed and (status.answered or deferred or subscription.empty):
            self._types[type_url] = attrs.evolve(
                status,
                synced=None if deferred else resources,
                must_answer=status.must_answer & deferred,
            )
            return None
        everything = view.select(type_url, EVERYTHING)
        response = DeltaResponse(
            type_url=type_url,
            nonce=self._nonce_source(),
            system_version_info=everything.version if everything is not None else "",
            resources=tuple(sorted(sending, key=lambda r: r.name)),
            removed=tuple(sorted(removed)),
        )
        self._types[type_url] = attrs.evolve(
            status,
            outstanding=response,
            latest_nonce=response.nonce,
            answered=True,
            must_answer=status.must_answer & deferred,
            synced=None if deferred else resources,
        )
        if type_url == CLUSTER and self.aggregated:
            self._owe_endpoints(response.resources)
        return response

    def _lookup(
        self, type_url: str, resources: Mapping[str, Resource], name: str
    ) -> Resource | None:
        """The resource called ``name``; for virtual hosts, also one with ``name`` as alias."""
        resource = resources.get(name)
        if resource is not None or type_url != VIRTUAL_HOST:
            return resource
        cached = self._aliases
        if cached is None or cached[0] is not resources:
            index = {alias: r for r in resources.values() for alias in r.aliases}
            cached = self._aliases = (resources, index)
        return cached[1].get(name)

    def _make_before_break(
        self,
        type_url: str,
        status: DeltaTypeState,
        sending: list[Resource],
        removed: list[str],
        view: ResourceView,
    ) -> tuple[list[Resource], list[str], frozenset[str]]:
        """Split what is due into what may go now and what must wait (see ``_ordering``)."""
        ready: list[Resource] = []
        waiting: set[str] = set()
        for resource in sending:
            if status.client_has.get(resource.name) != resource.version and blocked(
                resource, self, view
            ):
                waiting.add(resource.name)
            else:
                ready.append(resource)
        going = removed
        if removed:
            kept = referenced(self, self._types)
            going = [name for name in removed if (type_url, name) not in kept]
            waiting.update(name for name in removed if (type_url, name) in kept)
        return ready, going, frozenset(waiting)

    def _owe_endpoints(self, clusters: Iterable[Resource]) -> None:
        names = frozenset(
            ref.name
            for cluster in clusters
            for ref in cluster.references
            if ref.type_url == ENDPOINT
        )
        endpoints = self._types.get(ENDPOINT)
        if endpoints is None:
            # The endpoints subscription is still on its way: owe them when it arrives.
            self._endpoints_owed |= names
            return
        # A rejected version is not pushed again for warming: the next different one will be.
        owed = frozenset(
            name
            for name in names
            if endpoints.subscription.wants(name) and name not in endpoints.rejected
        )
        if owed:
            self._types[ENDPOINT] = attrs.evolve(
                endpoints, must_answer=endpoints.must_answer | owed
            )


def _wanted(subscription: Subscription, name: str, resource: Resource) -> bool:
    """Whether the subscription covers ``resource``, found as ``name`` (or by an alias)."""
    return (
        subscription.wants(name)
        or subscription.wants(resource.name)
        or any(subscription.wants(alias) for alias in resource.aliases)
    )


def _unique(*sources: Iterable[str]) -> Iterator[str]:
    """Every name of ``sources`` once, in order of first appearance."""
    seen: set[str] = set()
    for names in sources:
        for name in names:
            if name not in seen:
                seen.add(name)
                yield name
