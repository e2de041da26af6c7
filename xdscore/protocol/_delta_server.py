"""The server side of one incremental (Delta) xDS stream, as a pure state machine.

Theory of operation
-------------------
Like [`SotwServer`][xdscore.protocol.SotwServer], one [`DeltaServer`][xdscore.protocol.DeltaServer]
exists per gRPC stream; [`receive`][xdscore.protocol.DeltaServer.receive] applies a decoded request
and returns events, [`poll`][xdscore.protocol.DeltaServer.poll] returns the responses due against a
[`ResourceView`][xdscore.protocol.ResourceView]. Each type URL is independent, and its phase moves
by the table of `xdscore.protocol._state`.

Per type the machine keeps a [`DeltaTypeState`][xdscore.protocol.DeltaTypeState]:

* ``subscription``: changed by every request, **even one with a stale nonce**: in Delta the
  nonce only pairs ACK/NACK, it never makes a subscription change stale.
* ``held_versions``: name → version the client is known to hold. Seeded from
  ``initial_resource_versions`` on the first request of the type on the stream (so after a
  reconnect only the difference is sent, and held names that no longer exist are removed),
  then updated by ACKs. Explicitly unsubscribed names leave it without a response.
* ``held``: the acknowledged resources whose content is known, which ordering reads.
* ``owed``: names owed an answer whatever the server believes the client holds: every name
  in ``resource_names_subscribe``, and, while the client is subscribed to the wildcard,
  every name it explicitly unsubscribes (answered with the resource if still in the
  wildcard, or a removal). Names a reconnecting client lists with a version are not owed:
  their version says what the client holds.
* ``rejected_versions``: name → version NACKed; such a version is not sent again unless the
  client asks for the name again; the next different version is sent. This holds for every
  resource of a rejected response, good or bad: clients apply the valid resources of a
  rejected update (Envoy's clusters and listeners, gRPC per its xDS NACK semantics), so
  re-sending them would only repeat the rejection.
* ``outstanding``: the response in flight (phase SENT); at most one per type.

A response carries, for each name the subscription wants, the resource when the client
does not hold its version (or the name is owed), and in ``removed_resources`` every name the
client holds (or is owed) that does not exist or is no longer wanted. No name appears twice
and never in both lists. ``system_version_info`` is the type's content version, for debugging.
For an aliased type (VHDS), a name subscribed to that resolves to no resource, by name or by
alias, is answered with an entry carrying that name as its alias and no body
([`Resource.unresolved`][xdscore.protocol.Resource.unresolved]): Envoy resumes the request paused on
that alias only when an entry carrying it arrives. On ADS, a VHDS subscription also watches the
namespaces (``<name>/*``) of the route configurations with VHDS sent on the stream, then and later:
Envoy's VHDS watch matches every virtual host named ``<route configuration>/...``, while its
requests name only the aliases it asks for on demand (its first request names nothing, and
an empty answer would not reach the watch). Otherwise a first request that asks for nothing
gets no answer.

Glob collections (``xdstp://…/*``, and those namespaces) are subscribed to as a whole: each
member is wanted, an owed glob owes each member, and an owed glob with no member is answered
by its own name in ``removed_resources``. Members are looked up in the collection index of
the view's shared selection of the whole type, built once per view, so a glob costs a stream
only its members, and a change only the names that changed.

On ADS, sending a type that others warm on (``warms_on`` in the type registry: clusters on
their endpoints) makes the names it refers to owed, because a cluster warms until its
endpoints arrive, and a reconnecting or updated cluster may not ask for them again. Also on
ADS, what is due goes through make-before-break ordering (`xdscore.protocol._ordering`):
a changed resource that refers to something the client does not hold yet waits, and so does
the removal of a resource that something the client holds still refers to.

TTLs reach a client that supports them ([`ClientFeatures`][xdscore.protocol.ClientFeatures]) in each
entry's ``ttl`` (``DeltaResponse.ttl``); others get the entries without it. A heartbeat
([`heartbeat`][xdscore.protocol.DeltaServer.heartbeat]) carries, for the resources with a TTL the
client holds at their current version, each name, version and TTL without a body
(``DeltaResponse.heartbeat``): the client restarts those TTLs and applies nothing. Virtual hosts are
repeated in full instead, since Envoy takes a body-less VHDS entry for an unresolved alias, not a
heartbeat.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, TypeVar, cast, final

import attrs
from mypy_extensions import mypyc_attr

from .._memos import DELTA_ACCEPTED, DELTA_ANSWERS
from ..wire._names import collection_of
from ..wire._records import DeltaDiscoveryRequest, ErrorDetail, ResourceError
from ..wire._resource import Resource
from ..wire._typeurls import ROUTE, VIRTUAL_HOST, TypeInfo, type_info
from ._events import Event, ResponseAcked, ResponseNacked, StaleNonceSeen, SubscriptionChanged
from ._identity import resolve_type
from ._limits import StreamLimits, check_names, check_subscribed, check_type_count
from ._machine import ServerMachine
from ._ordering import Holding, plan, warming
from ._record import KEEP, Keep, Record
from ._state import Effect, Input, Phase, classify, step
from ._subscription import EVERYTHING, NOTHING, WILDCARD, Subscription
from ._view import ResourceView

__all__ = ["DeltaResponse", "DeltaServer", "DeltaTypeState"]

_EMPTY: frozenset[str] = frozenset()
_by_name = operator.attrgetter("name")
_V = TypeVar("_V")
_NO_VERSIONS: Mapping[str, str] = MappingProxyType({})
_NO_RESOURCES: Mapping[str, Resource] = MappingProxyType({})
_Answer = tuple[
    tuple[Resource, ...],
    tuple[str, ...],
    Mapping[str, Resource],
    Mapping[str, "str | None"],
    tuple[Resource, ...],
]
"""Resources due and names to remove, in name order; resources found held; why names are
absent; the resources due, new or changed for the client, that refer to types sent before
theirs: the only ones make-before-break may hold back (see ``DeltaServer._answer``)."""
_Applied = tuple["_Holdings[str]", "_Holdings[Resource]", "_Holdings[str]"]
_OWNED_ELSEWHERE = (Resource, Subscription)
"""What shared work holds but does not own: the cache's resources, interned subscriptions."""
_REMOVED = ""
"""The version recorded in ``rejected_versions`` for a removal the client NACKed."""
_UNKNOWN = ""
"""The version recorded in ``held_versions`` for a resource the client may or may not hold."""


@final
class DeltaResponse(Record):
    """A Delta response to send: changed resources and removed names of one type.

    ``ttl``: encode each resource's TTL (the client supports TTLs). ``heartbeat``: encode
    the resources as heartbeats, name, version and TTL, no body. ``errors``:
    ``resource_errors``, removed names the client asked for by name, and why (for clients
    that read them)."""

    # record fields:
    #     *
    #     type_url: str
    #     nonce: str
    #     system_version_info: str
    #     resources: tuple[Resource, ...]
    #     removed: tuple[str, ...]
    #     ttl: bool = False
    #     heartbeat: bool = False
    #     errors: tuple[ResourceError, ...] = ()
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = (
        "type_url",
        "nonce",
        "system_version_info",
        "resources",
        "removed",
        "ttl",
        "heartbeat",
        "errors",
    )
    __slots__ = _fields

    def __init__(
        self,
        *,
        type_url: str,
        nonce: str,
        system_version_info: str,
        resources: tuple[Resource, ...],
        removed: tuple[str, ...],
        ttl: bool = False,
        heartbeat: bool = False,
        errors: tuple[ResourceError, ...] = (),
    ) -> None:
        self.type_url: Final = type_url
        self.nonce: Final = nonce
        self.system_version_info: Final = system_version_info
        self.resources: Final = resources
        self.removed: Final = removed
        self.ttl: Final = ttl
        self.heartbeat: Final = heartbeat
        self.errors: Final = errors

    # --- end generated ---

    @property
    def version(self) -> str:
        """The version this response carries (``system_version_info``)."""
        return self.system_version_info

    @property
    def heartbeats(self) -> int:
        """How many resources this response heartbeats (0: it is no heartbeat)."""
        return len(self.resources) if self.heartbeat else 0

    @property
    def carries_ttl(self) -> bool:
        """Whether it sends a resource with a TTL to a client that reads TTLs."""
        return self.ttl and any(resource.ttl is not None for resource in self.resources)

    @property
    def carried(self) -> Collection[Resource]:
        """The resources it sends (not the names it removes)."""
        return self.resources


@final
class DeltaTypeState(Record):
    """What one Delta stream knows about one type (see the module docstring).

    ``answered``: whether the client has an answer for this type, a response or the
    versions it presented on reconnect. Until then even an empty response is due, so that
    a client subscribed to a type with no resources does not wait out its initial fetch
    timeout. ``synced``: the resource mapping this state was last reconciled with:
    unchanged, nothing to do; changed, only the names the view says changed since then
    need a look."""

    # record fields, with evolve:
    #     *
    #     subscription: Subscription
    #     phase: Phase = Phase.REQUESTED
    #     held_versions: Mapping[str, str] = _NO_VERSIONS
    #     held: Mapping[str, Resource] = _NO_RESOURCES
    #     owed: frozenset[str] = _EMPTY
    #     rejected_versions: Mapping[str, str] = _NO_VERSIONS
    #     last_error: ErrorDetail | None = None
    #     latest_nonce: str = ""
    #     answered: bool = False
    #     outstanding: DeltaResponse | None = None
    #     synced: Mapping[str, Resource] | None = None
    #     acks: int = 0
    #     nacks: int = 0
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = (
        "subscription",
        "phase",
        "held_versions",
        "held",
        "owed",
        "rejected_versions",
        "last_error",
        "latest_nonce",
        "answered",
        "outstanding",
        "synced",
        "acks",
        "nacks",
    )
    __slots__ = _fields

    def __init__(
        self,
        *,
        subscription: Subscription,
        phase: Phase = Phase.REQUESTED,
        held_versions: Mapping[str, str] = _NO_VERSIONS,
        held: Mapping[str, Resource] = _NO_RESOURCES,
        owed: frozenset[str] = _EMPTY,
        rejected_versions: Mapping[str, str] = _NO_VERSIONS,
        last_error: ErrorDetail | None = None,
        latest_nonce: str = "",
        answered: bool = False,
        outstanding: DeltaResponse | None = None,
        synced: Mapping[str, Resource] | None = None,
        acks: int = 0,
        nacks: int = 0,
    ) -> None:
        self.subscription: Final = subscription
        self.phase: Final = phase
        self.held_versions: Final = held_versions
        self.held: Final = held
        self.owed: Final = owed
        self.rejected_versions: Final = rejected_versions
        self.last_error: Final = last_error
        self.latest_nonce: Final = latest_nonce
        self.answered: Final = answered
        self.outstanding: Final = outstanding
        self.synced: Final = synced
        self.acks: Final = acks
        self.nacks: Final = nacks

    def evolve(
        self,
        *,
        subscription: Subscription | Keep = KEEP,
        phase: Phase | Keep = KEEP,
        held_versions: Mapping[str, str] | Keep = KEEP,
        held: Mapping[str, Resource] | Keep = KEEP,
        owed: frozenset[str] | Keep = KEEP,
        rejected_versions: Mapping[str, str] | Keep = KEEP,
        last_error: ErrorDetail | Keep | None = KEEP,
        latest_nonce: str | Keep = KEEP,
        answered: bool | Keep = KEEP,
        outstanding: DeltaResponse | Keep | None = KEEP,
        synced: Mapping[str, Resource] | Keep | None = KEEP,
        acks: int | Keep = KEEP,
        nacks: int | Keep = KEEP,
    ) -> DeltaTypeState:
        """A copy with the fields given changed."""
        return DeltaTypeState(
            subscription=self.subscription if isinstance(subscription, Keep) else subscription,
            phase=self.phase if isinstance(phase, Keep) else phase,
            held_versions=self.held_versions if isinstance(held_versions, Keep) else held_versions,
            held=self.held if isinstance(held, Keep) else held,
            owed=self.owed if isinstance(owed, Keep) else owed,
            rejected_versions=(
                self.rejected_versions if isinstance(rejected_versions, Keep) else rejected_versions
            ),
            last_error=self.last_error if isinstance(last_error, Keep) else last_error,
            latest_nonce=self.latest_nonce if isinstance(latest_nonce, Keep) else latest_nonce,
            answered=self.answered if isinstance(answered, Keep) else answered,
            outstanding=self.outstanding if isinstance(outstanding, Keep) else outstanding,
            synced=self.synced if isinstance(synced, Keep) else synced,
            acks=self.acks if isinstance(acks, Keep) else acks,
            nacks=self.nacks if isinstance(nacks, Keep) else nacks,
        )

    # --- end generated ---


_UNSEEN = DeltaTypeState(subscription=NOTHING, phase=Phase.IDLE)
"""A type the client has not asked for yet (one record for every stream)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class DeltaServer(ServerMachine[DeltaTypeState, DeltaDiscoveryRequest, DeltaResponse]):
    """The server side of one Delta stream. ``type_url`` fixes the type on per-type services.

    ``nonce_source`` returns a nonce unique on the stream each time it is called.
    """

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
        self._warming: dict[str, frozenset[str]] = {}
        """Names owed to a type the client has not asked for yet, because a type that
        warms on it was sent (clusters before their endpoints' subscription arrives)."""
        self._aliases: tuple[Mapping[str, Resource], dict[str, Resource]] | None = None
        self._namespaces: frozenset[str] = _EMPTY
        """The VHDS namespaces (``<route configuration>/*``) of the route configurations
        with VHDS sent on this ADS stream."""

    def _holding(self, state: DeltaTypeState) -> Holding:
        outstanding = state.outstanding
        if outstanding is None:
            return Holding(state.subscription, state.held)
        return Holding(
            state.subscription,
            state.held,
            arriving=outstanding.resources,
            removing=frozenset(outstanding.removed) if outstanding.removed else _EMPTY,
        )

    def _receive(self, request: DeltaDiscoveryRequest) -> list[Event]:
        events = self._identify(request.node)
        info = resolve_type(self._fixed_type, request.type_url, delta=True)
        check_names(request.resource_names_subscribe, self._limits, "resource_names_subscribe")
        check_names(request.resource_names_unsubscribe, self._limits, "resource_names_unsubscribe")
        type_url = info.type_url
        state = self._types.get(type_url)
        if state is None:
            check_type_count(len(self._types), self._limits)
            initial = request.initial_resource_versions  # (its names: a mapping's keys)
            check_names(initial, self._limits, "initial_resource_versions")
            state = _UNSEEN
        outstanding = state.outstanding
        given = classify(
            state.phase,
            request.response_nonce,
            error=request.error_detail is not None,
            latest_nonce=state.latest_nonce,
            outstanding_nonce=outstanding.nonce if outstanding is not None else None,
        )
        move = step("delta", type_url, state.phase, given)
        for effect in move.effects:
            if effect is Effect.REPORT_STALE:
                events.append(
                    StaleNonceSeen(
                        type_url=type_url, nonce=request.response_nonce, latest=state.latest_nonce
                    )
                )
            elif effect is Effect.ACCEPT:
                assert outstanding is not None
                state = _accept(state, outstanding, events, move.next)
            elif effect is Effect.REJECT:
                assert outstanding is not None
                assert request.error_detail is not None
                state = _reject(state, outstanding, request.error_detail, events, move.next)
            elif effect is Effect.SUBSCRIBE:
                state = self._subscribe(info, state, request, events, move.next)
            else:
                raise AssertionError(f"Delta has no {effect.name} effect")
        if state.phase is not move.next:
            state = state.evolve(phase=move.next)
        self._types[type_url] = state
        return events

    def _subscribe(
        self,
        info: TypeInfo,
        state: DeltaTypeState,
        request: DeltaDiscoveryRequest,
        events: list[Event],
        phase: Phase,
    ) -> DeltaTypeState:
        """``state`` after ``request``'s names (a first request's state is in ``phase``
        already)."""
        subscribe = request.resource_names_subscribe
        unsubscribe = request.resource_names_unsubscribe
        if state.phase is Phase.IDLE:
            return self._subscribe_first(info, request, events, phase)
        if not subscribe and not unsubscribe:
            return state  # (an ACK or NACK: the subscription stays)
        previous = state.subscription
        subscription = previous.delta_update(subscribe, unsubscribe)
        check_subscribed(len(subscription.names), self._limits)
        owed = state.owed | (frozenset(subscribe) - {WILDCARD})
        held_versions = state.held_versions
        if unsubscribe:
            dropped = frozenset(unsubscribe) - {WILDCARD}
            if subscription.wildcard:
                owed |= dropped
            else:
                # A name still in a subscribed collection is answered, as under the wildcard.
                kept = (
                    frozenset(filter(subscription.wants, dropped))
                    if subscription.collections
                    else _EMPTY
                )
                owed = (owed - (dropped - frozenset(subscribe))) | kept
                gone = dropped & previous.collections
                held_versions = {
                    n: v
                    for n, v in held_versions.items()
                    if (n not in dropped or n in kept)
                    and (not gone or collection_of(n) not in gone or subscription.wants(n))
                }
            if WILDCARD in unsubscribe and not subscription.wildcard:
                held_versions = {n: v for n, v in held_versions.items() if subscription.wants(n)}
        held, rejected = state.held, state.rejected_versions
        if held_versions is not state.held_versions:
            held = {n: r for n, r in held.items() if n in held_versions}
            rejected = {n: v for n, v in rejected.items() if subscription.wants(n)}
        state = state.evolve(
            subscription=subscription,
            owed=owed,
            held_versions=held_versions,
            held=held,
            rejected_versions=rejected,
        )
        if subscription != previous:
            state = state.evolve(synced=None)
            events.append(
                SubscriptionChanged(
                    type_url=info.type_url, previous=previous, subscription=subscription
                )
            )
        return state

    def _subscribe_first(
        self, info: TypeInfo, request: DeltaDiscoveryRequest, events: list[Event], phase: Phase
    ) -> DeltaTypeState:
        """The first request of a type: its subscription and what a reconnecting client
        holds, in ``phase``."""
        subscribe = request.resource_names_subscribe
        subscription = Subscription.delta_initial(
            subscribe, request.resource_names_unsubscribe, wildcard_capable=info.wildcard_capable
        )
        check_subscribed(len(subscription.names), self._limits)
        initial = request.initial_resource_versions
        held_versions = dict(initial) if initial else _NO_VERSIONS
        if held_versions or request.resource_names_unsubscribe:
            owed = frozenset(subscribe).difference((WILDCARD,), held_versions)
        else:
            owed = subscription.names  # (the same set: every name it subscribed to, shared)
        if held_versions:
            # A reconnecting client's versions say what it holds of its collections too.
            owed -= subscription.collections
        if info.type_url == VIRTUAL_HOST and self.aggregated and self._namespaces:
            subscription = attrs.evolve(subscription, implied=self._namespaces)
            if not held_versions:
                owed |= self._namespaces
        warm = self._warming.pop(info.type_url, _EMPTY)
        owed |= subscription.wanted(warm)
        events.append(
            SubscriptionChanged(type_url=info.type_url, previous=None, subscription=subscription)
        )
        return DeltaTypeState(
            subscription=subscription,
            phase=phase,
            held_versions=held_versions,
            owed=owed,
            answered=bool(request.initial_resource_versions),
        )

    def _candidates(
        self,
        state: DeltaTypeState,
        owed: Iterable[str],
        resources: Mapping[str, Resource],
        members: Mapping[str, tuple[str, ...]],
    ) -> Iterator[str]:
        subscription = state.subscription
        sources: list[Iterable[str]] = [owed, state.held_versions, subscription.names]
        if subscription.wildcard:
            sources.append(resources)
        else:
            sources += [members.get(collection, ()) for collection in subscription.collections]
        return _unique(*sources)

    def _respond(
        self, type_url: str, view: ResourceView, resources: object
    ) -> DeltaResponse | None:
        state = self._types[type_url]
        if state.outstanding is not None:
            return None
        subscription = state.subscription
        resources = view.resources(type_url)
        if resources is None or (state.synced is resources and not state.owed):
            return None
        collections = subscription.collections
        members = _members(view, type_url) if collections else {}
        owing, empty = _owing(state.owed, collections, members)
        if owing is not state.owed:
            state = state.evolve(owed=owing)
        # Streams in the same state (the same objects) get the same answer: worked out once.
        shareable = self._deny is None and not empty
        key = (
            resources,
            state.synced,
            state.held_versions,
            state.held,
            state.rejected_versions,
            subscription,
        )
        extra = (type_url, frozenset(owing))
        answer = cast("_Answer | None", DELTA_ANSWERS.get(key, extra)) if shareable else None
        if answer is None:
            answer = self._answer(type_url, state, owing, view, resources, members, empty)
            if shareable:
                DELTA_ANSWERS.put(key, extra, answer, skip=_OWNED_ELSEWHERE)
        sending, removed, recognised, absent, changed = answer
        if recognised:
            state = state.evolve(held={**state.held, **recognised})
            self._types[type_url] = state
        deferred: frozenset[str] = _EMPTY
        if self._ordered and (removed or changed):
            decided = plan(type_url, changed, removed, self.holdings(), view)
            deferred = decided.deferred
            if deferred:
                sending = tuple(r for r in sending if r.name not in decided.wait)
                removed = tuple(name for name in removed if name not in decided.keep)
        synced = None if deferred else resources
        if not sending and not removed and (state.answered or deferred or subscription.empty):
            self._types[type_url] = state.evolve(synced=synced, owed=state.owed & deferred)
            return None
        errors = self._resource_errors(
            {name: absent[name] for name in removed if name in absent}, subscription
        )
        return self._send(
            type_url, state, sending, removed, view, synced=synced, owed=deferred, errors=errors
        )

    def _answer(
        self,
        type_url: str,
        state: DeltaTypeState,
        owing: frozenset[str],
        view: ResourceView,
        resources: Mapping[str, Resource],
        members: Mapping[str, tuple[str, ...]],
        empty: Iterable[str],
    ) -> _Answer:
        """What is due to a stream in ``state``: resources to send and names to remove (each
        in name order), resources found held at their version, and why names are absent."""
        subscription = state.subscription
        aliased = type_info(type_url).aliased
        collections = subscription.collections
        changed = None
        if state.synced is not None:
            changed = view.changed_since(type_url, state.synced)
        names = (
            self._candidates(state, owing, resources, members)
            if changed is None
            else _unique(owing, changed)
        )
        due: dict[str, Resource] = {}
        removed: list[str] = list(empty)
        recognised: dict[str, Resource] = {}
        absent: dict[str, str | None] = {}
        deny = self._deny
        # Locals: this loop runs once per changed name per stream.
        held_versions, held_resources = state.held_versions, state.held
        rejected = state.rejected_versions
        wildcard, subscribed = subscription.wildcard, subscription.names
        for name in names:
            if name in collections:
                continue  # a glob is answered by its members (or, owed and empty, above)
            owed = name in owing
            resource = resources.get(name)
            if resource is None and aliased:
                resource = self._by_alias(resources, name)
            if resource is not None and not (
                wildcard or name in subscribed or _wanted(subscription, name, resource)
            ):
                resource = None
            reason = deny(type_url, name) if deny is not None else None
            if reason is not None:
                resource = None
            if resource is None and aliased and name in subscribed and reason is None:
                resource = _unresolved(type_url, name, owed, held_versions)
            if resource is None:
                absent[name] = reason
            if resource is not None:
                key = resource.name
                version = resource.version
                held = held_versions.get(key)
                if held == version and key not in held_resources:
                    recognised[key] = resource
                if owed or (held != version and rejected.get(key) != version):
                    due[key] = resource
            elif owed or (name in held_versions and rejected.get(name) != _REMOVED):
                removed.append(name)
        sending = tuple(sorted(due.values(), key=_by_name))
        return (
            sending,
            tuple(sorted(name for name in removed if name not in due)),
            recognised,
            absent,
            # What make-before-break looks at: what is new or changed for the client and
            # refers to something sent before it (worked out once for streams that share this).
            tuple(
                r
                for r in sending
                if r.earlier_references and held_versions.get(r.name) != r.version
            ),
        )

    def _send(
        self,
        type_url: str,
        state: DeltaTypeState,
        sending: tuple[Resource, ...],
        removed: tuple[str, ...],
        view: ResourceView,
        *,
        synced: Mapping[str, Resource] | None,
        owed: frozenset[str] = _EMPTY,
        heartbeat: bool = False,
        errors: tuple[ResourceError, ...] = (),
    ) -> DeltaResponse:
        """Put ``sending`` and ``removed`` (each in name order) in flight; ``owed`` stays owed
        (deferred names)."""
        everything = view.select(type_url, EVERYTHING)
        move = step("delta", type_url, state.phase, Input.RESPOND)
        response = DeltaResponse(
            type_url=type_url,
            nonce=self._nonce_source(),
            system_version_info=everything.version if everything is not None else "",
            resources=sending,
            removed=removed,
            ttl=self.features.ttl,
            heartbeat=heartbeat,
            errors=errors,
        )
        self._types[type_url] = state.evolve(
            phase=move.next,
            outstanding=response,
            latest_nonce=response.nonce,
            answered=True,
            owed=state.owed & owed,
            synced=synced,
        )
        if self.aggregated and not heartbeat:
            self._owe_warming(type_url, response.resources)
            if type_url == ROUTE:
                self._watch_namespaces(response.resources)
        return response

    def _beat(
        self, type_url: str, view: ResourceView, quiet: Collection[tuple[str, str]]
    ) -> DeltaResponse | None:
        state = self._types[type_url]
        if not self.features.ttl or state.outstanding is not None or not state.held:
            return None
        resources = view.resources(type_url)
        if resources is None:
            return None
        beating = [
            resource
            for name, resource in state.held.items()
            if resource.ttl is not None
            and (type_url, name) not in quiet
            and _wanted(state.subscription, name, resource)
            and state.held_versions.get(name) == resource.version
            and (current := resources.get(name)) is not None
            and current.version == resource.version
        ]
        if not beating:
            return None
        return self._send(
            type_url,
            state,
            tuple(sorted(beating, key=_by_name)),
            (),
            view,
            synced=state.synced,
            owed=state.owed,
            heartbeat=not type_info(type_url).aliased,
        )

    def _ttl(self, state: DeltaTypeState) -> float | None:
        if not self.features.ttl:
            return None
        arriving = state.outstanding.resources if state.outstanding is not None else ()
        ttls = [
            r.ttl for source in (state.held.values(), arriving) for r in source if r.ttl is not None
        ]
        return min(ttls) if ttls else None

    def _owe(self, state: DeltaTypeState, names: frozenset[str]) -> DeltaTypeState:
        return state.evolve(owed=state.owed | names.intersection(state.held_versions))

    def _by_alias(self, resources: Mapping[str, Resource], name: str) -> Resource | None:
        """The resource with ``name`` as an alias (aliased types: VHDS)."""
        cached = self._aliases
        if cached is None or cached[0] is not resources:
            index = {alias: r for r in resources.values() for alias in r.aliases}
            cached = self._aliases = (resources, index)
        return cached[1].get(name)

    def _watch_namespaces(self, sent: Iterable[Resource]) -> None:
        """Route configurations with VHDS were sent: the client's VHDS subscription, if it
        has one, now also watches their namespaces, and is owed an answer for each new one."""
        found = frozenset(r.vhds_namespace for r in sent if r.vhds_namespace is not None)
        new = found - self._namespaces
        if not new:
            return
        self._namespaces |= new
        state = self._types.get(VIRTUAL_HOST)
        if state is None:
            return
        previous = state.subscription
        self._types[VIRTUAL_HOST] = state.evolve(
            subscription=attrs.evolve(previous, implied=previous.implied | new),
            owed=state.owed | new,
            synced=None,
        )

    def _owe_warming(self, type_url: str, sent: Sequence[Resource]) -> None:
        warm = warming(type_url, sent)
        if warm is None:
            return
        target, names = warm
        waiting = self._types.get(target)
        if waiting is None:
            # The subscription is still on its way: owe the names when it arrives.
            self._warming[target] = self._warming.get(target, _EMPTY) | names
            return
        # A rejected version is not pushed again for warming: the next different one will be.
        owed = waiting.subscription.wanted(names).difference(waiting.rejected_versions)
        if owed:
            self._types[target] = waiting.evolve(owed=waiting.owed | owed)


@mypyc_attr(native_class=False)  # (referred to weakly: compiled classes cannot be)
class _Holdings(dict[str, _V]):
    """Holdings that shared work may refer to weakly (see `xdscore._memos`)."""

    __slots__ = ("__weakref__",)


def _alive(refs: tuple[weakref.ref[Any], ...]) -> _Applied | None:
    held_versions, held, rejected = (ref() for ref in refs)
    if held_versions is None or held is None or rejected is None:
        return None
    return held_versions, held, rejected


def _applied(state: DeltaTypeState, outstanding: DeltaResponse) -> _Applied:
    """The holdings of ``state`` once ``outstanding`` is applied (new mappings: holdings
    are shared between streams and never changed in place)."""
    held_versions = _Holdings(state.held_versions)
    held = _Holdings(state.held)
    rejected = _Holdings(state.rejected_versions)
    subscription = state.subscription
    wildcard, subscribed = subscription.wildcard, subscription.names
    for resource in outstanding.resources:
        name = resource.name
        if rejected:
            rejected.pop(name, None)
        if not (wildcard or name in subscribed or _wanted(subscription, name, resource)):
            continue  # unsubscribed while in flight: the client dropped it
        held_versions[name] = resource.version
        held[name] = resource
    for name in outstanding.removed:
        held_versions.pop(name, None)
        held.pop(name, None)
        rejected.pop(name, None)
    return held_versions, held, rejected


def _accept(
    state: DeltaTypeState, outstanding: DeltaResponse, events: list[Event], phase: Phase
) -> DeltaTypeState:
    """The client applied the response in flight: it now holds what it carried (and the
    type is in ``phase``)."""
    key = (
        state.held_versions,
        state.held,
        state.rejected_versions,
        outstanding.resources,
        outstanding.removed,
        state.subscription,
    )
    shared = cast("tuple[weakref.ref[Any], ...] | None", DELTA_ACCEPTED.get(key, None))
    holdings = None if shared is None else _alive(shared)
    if holdings is None:
        holdings = _applied(state, outstanding)
        # Weakly: holdings no stream holds any more are no use to share, and an entry
        # holding them would keep the entry they are the key of alive, and so on back.
        refs = tuple(weakref.ref(each) for each in holdings)
        DELTA_ACCEPTED.put(key, None, refs, skip=_OWNED_ELSEWHERE)
    held_versions, held, rejected = holdings
    events.append(
        ResponseAcked(
            type_url=outstanding.type_url,
            version_info=outstanding.system_version_info,
            nonce=outstanding.nonce,
        )
    )
    return state.evolve(
        phase=phase,
        outstanding=None,
        held_versions=held_versions,
        held=held,
        rejected_versions=rejected,
        acks=state.acks + 1,
    )


def _reject(
    state: DeltaTypeState,
    outstanding: DeltaResponse,
    error: ErrorDetail,
    events: list[Event],
    phase: Phase,
) -> DeltaTypeState:
    """The client rejected the response in flight: none of its versions is sent again (and
    the type is in ``phase``).

    A rejected heartbeat changes nothing the client is known to hold (it carried no body to
    apply); only its TTLs were not restarted, which the next heartbeat does."""
    events.append(
        ResponseNacked(
            type_url=outstanding.type_url,
            rejected=outstanding.system_version_info,
            version_info="",
            nonce=outstanding.nonce,
            error=error,
        )
    )
    if outstanding.heartbeat:
        return state.evolve(
            phase=phase,
            outstanding=None,
            last_error=error,
            nacks=state.nacks + 1,
            synced=None,
        )
    rejected = dict(state.rejected_versions)
    rejected.update({r.name: r.version for r in outstanding.resources})
    rejected.update(dict.fromkeys(outstanding.removed, _REMOVED))
    # Clients apply the valid part of a rejected response, so what it carried may now be
    # held at a version the server does not know, even where it knew the version before:
    # if it goes away, say so; if it comes back at the version held before, send it.
    held_versions = dict(state.held_versions)
    for resource in outstanding.resources:
        if _wanted(state.subscription, resource.name, resource):
            held_versions[resource.name] = _UNKNOWN
    return state.evolve(
        phase=phase,
        outstanding=None,
        held_versions=held_versions,
        rejected_versions=rejected,
        last_error=error,
        nacks=state.nacks + 1,
        synced=None,
    )


def _wanted(subscription: Subscription, name: str, resource: Resource) -> bool:
    """Whether the subscription covers ``resource``, found as ``name`` (or by an alias)."""
    return (
        subscription.wants(name)
        or subscription.wants(resource.name)
        or any(subscription.wants(alias) for alias in resource.aliases)
    )


def _unresolved(
    type_url: str, name: str, owed: bool, held_versions: Mapping[str, str]
) -> Resource | None:
    """What answers ``name``, subscribed to by name but resolving to nothing, of an aliased
    type: the alias-only entry, when the name is owed an answer or the client holds that
    entry already (then it is up to date); ``None`` (a removal, if due) otherwise."""
    entry = Resource.unresolved(type_url, name)
    if owed or held_versions.get(name) == entry.version:
        return entry
    return None


def _members(view: ResourceView, type_url: str) -> Mapping[str, tuple[str, ...]]:
    """The names of ``type_url`` by collection: one index per view, shared by streams."""
    everything = view.select(type_url, EVERYTHING)
    return everything.collections if everything is not None else {}


def _owing(
    owed: frozenset[str],
    collections: frozenset[str],
    members: Mapping[str, tuple[str, ...]],
) -> tuple[frozenset[str], list[str]]:
    """The names owed an answer, an owed glob standing for its members; and the owed globs
    that have none, answered by their own name in ``removed_resources`` (the one answer that
    reaches a client's glob or namespace watch: an empty response would reach only wildcard
    watches)."""
    globs = owed & collections if collections else _EMPTY
    if not globs:
        return owed, []
    names = set(owed - globs)
    empty: list[str] = []
    for glob in sorted(globs):
        found = members.get(glob, ())
        if found:
            names.update(found)
        else:
            empty.append(glob)
    return frozenset(names), empty


def _unique(*sources: Iterable[str]) -> Iterator[str]:
    """Every name of ``sources`` once, in order of first appearance."""
    seen: set[str] = set()
    for names in sources:
        for name in names:
            if name not in seen:
                seen.add(name)
                yield name
