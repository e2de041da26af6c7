"""The server side of one State-of-the-World xDS stream, as a pure state machine.

Theory of operation
-------------------
One [`SotwServer`][xdscore.protocol.SotwServer] exists per gRPC stream (ADS, or a per-type service
when ``type_url`` is fixed). It never does I/O and never awaits: the driver hands it each decoded
request with [`receive`][xdscore.protocol.SotwServer.receive], which returns the events the request
caused, and asks it with [`poll`][xdscore.protocol.SotwServer.poll] what to send given the current
[`ResourceView`][xdscore.protocol.ResourceView]. Each type URL is an independent sub-stream whose
phase moves by the table of `xdscore.protocol._state`.

Per type the machine keeps an immutable [`SotwTypeState`][xdscore.protocol.SotwTypeState]:

* ``subscription``: replaced by each request the table lets subscribe.
* ``held_version``: the version the client is known to hold: the one it ACKed, or, for
  LDS, CDS and SRDS watched with the legacy wildcard, the ``version_info`` it presents on
  the first request of the stream (its last accepted version: with content-hash versions a
  reconnecting client that already holds the current full state is sent nothing).
  Otherwise a new stream is always answered: a version says what was sent, not what the
  client kept of it (a client drops resources it stops watching), so it is only trusted
  where the client cannot have narrowed what it watches (inv. 8). ``None`` after a NACK,
  since clients may apply part of a rejected response.
* ``held``: the content the client acknowledged, which make-before-break ordering reads.
* ``rejected_version``: the version last NACKed. It is never sent again; the next
  different one is.
* ``outstanding``: the response in flight (phase SENT). While one is in flight nothing more
  of that type is sent, so a slow client coalesces to the latest state instead of queueing.
* ``owed``: a response is due even if the content is unchanged: the client asked again
  after its response was answered, or (on ADS) a type was just sent that this one warms
  (``warms_on`` in the type registry: clusters warm until their endpoints arrive).

Rules, in the order [`receive`][xdscore.protocol.SotwServer.receive] applies them:

1. The first request must carry a node; later ones may omit it; a different node is an error.
2. ADS requests must name their type; per-type services accept only their own type.
3. The request's nonce makes it an input of the phase table: REQUEST, ACK, NACK, STALE or
   ECHO. A stale request is reported and ignored once a response of the type was sent (a
   newer request will follow the response the client has not seen yet); before that,
   nothing is in flight and its ``resource_names`` still count.
4. A request echoing the outstanding nonce is a NACK if it has ``error_detail``, else an ACK.
5. The request's ``resource_names`` replace the subscription (wildcard rules in
   `xdscore.protocol._subscription`).

[`poll`][xdscore.protocol.SotwServer.poll] then sends, per subscribed type in make-before-break
order, the current selection when nothing is in flight, it differs from the rejected version, and it
differs from what the client holds or a response is owed. LDS, CDS and SRDS selections are
full state: all their resources, every time.

For a client that reads TTLs and wrapped entries
([`ClientFeatures`][xdscore.protocol.ClientFeatures]), resources with a TTL are sent wrapped in
``envoy.service.discovery.v3.Resource`` (``SotwResponse.wrapped``; the wrapped body is shared like
the plain one). Its heartbeat ([`heartbeat`][xdscore.protocol.SotwServer.heartbeat]) repeats the
held selection, bodies included, at the held version: a body-less SotW entry is not a TTL refresh
for Envoy (its SotW client sets TTLs only from the resources it applies, and leaves body-less
entries out of the state it applies, which for listeners and clusters would delete them). For LDS,
CDS and SRDS the heartbeat is all or nothing, since a SotW response of those types is the whole
state: a type with a quiet resource gets none. Other types repeat only their non-quiet resources
with a TTL, and the client's acknowledgement leaves what it is known to hold unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from types import MappingProxyType
from typing import Any, Final, final

from mypy_extensions import mypyc_attr

from ..wire._records import DiscoveryRequest, ErrorDetail, ResourceError
from ..wire._resource import Resource
from ..wire._typeurls import TypeInfo, type_info
from ._events import Event, ResponseAcked, ResponseNacked, StaleNonceSeen, SubscriptionChanged
from ._identity import resolve_type
from ._limits import StreamLimits, check_names, check_subscribed, check_type_count
from ._machine import ServerMachine
from ._ordering import Holding, plan
from ._record import KEEP, Keep, Record
from ._state import Effect, Input, Phase, classify, step
from ._subscription import NO_NAMES, NOTHING, RequestedNames, Subscription
from ._view import ResourceView, Selection

__all__ = ["SotwResponse", "SotwServer", "SotwTypeState"]

_NOTHING: Mapping[str, Resource] = MappingProxyType({})
_NO_REASONS: Mapping[str, str] = MappingProxyType({})


@final
class SotwResponse(Record):
    """A response to send: ``selection`` framed with this stream's version and nonce.

    ``wrapped``: encode the resources that have a TTL wrapped, with it
    (``Selection.sotw_wrapped_body``). ``heartbeat``: the held version again, to restart
    the client's TTLs. ``errors``: ``resource_errors``, names asked for that are not sent,
    and why (for clients that read them)."""

    # record fields:
    #     *
    #     type_url: str
    #     version_info: str
    #     nonce: str
    #     selection: Selection
    #     wrapped: bool = False
    #     heartbeat: bool = False
    #     errors: tuple[ResourceError, ...] = ()
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("type_url", "version_info", "nonce", "selection", "wrapped", "heartbeat", "errors")
    __slots__ = _fields

    def __init__(
        self,
        *,
        type_url: str,
        version_info: str,
        nonce: str,
        selection: Selection,
        wrapped: bool = False,
        heartbeat: bool = False,
        errors: tuple[ResourceError, ...] = (),
    ) -> None:
        self.type_url: Final = type_url
        self.version_info: Final = version_info
        self.nonce: Final = nonce
        self.selection: Final = selection
        self.wrapped: Final = wrapped
        self.heartbeat: Final = heartbeat
        self.errors: Final = errors

    # --- end generated ---

    @property
    def version(self) -> str:
        """The version this response carries (``version_info``)."""
        return self.version_info

    @property
    def heartbeats(self) -> int:
        """How many resources this response heartbeats (0: it is no heartbeat)."""
        return len(self.selection) if self.heartbeat else 0

    @property
    def carries_ttl(self) -> bool:
        """Whether a resource it sends has a TTL."""
        return self.selection.shortest_ttl is not None

    @property
    def carried(self) -> Collection[Resource]:
        """The resources it sends."""
        return self.selection.resources.values()


@final
class SotwTypeState(Record):
    """What one stream knows about one type (see the module docstring).

    ``listed``: the ``resource_names`` of the last request, to skip re-reading an unchanged
    list (shared by every stream that sent the same list)."""

    # record fields, with evolve:
    #     *
    #     subscription: Subscription
    #     phase: Phase = Phase.REQUESTED
    #     listed: RequestedNames = NO_NAMES
    #     held_version: str | None = None
    #     held: Selection | None = None
    #     rejected_version: str | None = None
    #     last_error: ErrorDetail | None = None
    #     latest_nonce: str = ""
    #     outstanding: SotwResponse | None = None
    #     owed: bool = False
    #     acks: int = 0
    #     nacks: int = 0
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = (
        "subscription",
        "phase",
        "listed",
        "held_version",
        "held",
        "rejected_version",
        "last_error",
        "latest_nonce",
        "outstanding",
        "owed",
        "acks",
        "nacks",
    )
    __slots__ = _fields

    def __init__(
        self,
        *,
        subscription: Subscription,
        phase: Phase = Phase.REQUESTED,
        listed: RequestedNames = NO_NAMES,
        held_version: str | None = None,
        held: Selection | None = None,
        rejected_version: str | None = None,
        last_error: ErrorDetail | None = None,
        latest_nonce: str = "",
        outstanding: SotwResponse | None = None,
        owed: bool = False,
        acks: int = 0,
        nacks: int = 0,
    ) -> None:
        self.subscription: Final = subscription
        self.phase: Final = phase
        self.listed: Final = listed
        self.held_version: Final = held_version
        self.held: Final = held
        self.rejected_version: Final = rejected_version
        self.last_error: Final = last_error
        self.latest_nonce: Final = latest_nonce
        self.outstanding: Final = outstanding
        self.owed: Final = owed
        self.acks: Final = acks
        self.nacks: Final = nacks

    def evolve(
        self,
        *,
        subscription: Subscription | Keep = KEEP,
        phase: Phase | Keep = KEEP,
        listed: RequestedNames | Keep = KEEP,
        held_version: str | Keep | None = KEEP,
        held: Selection | Keep | None = KEEP,
        rejected_version: str | Keep | None = KEEP,
        last_error: ErrorDetail | Keep | None = KEEP,
        latest_nonce: str | Keep = KEEP,
        outstanding: SotwResponse | Keep | None = KEEP,
        owed: bool | Keep = KEEP,
        acks: int | Keep = KEEP,
        nacks: int | Keep = KEEP,
    ) -> SotwTypeState:
        """A copy with the fields given changed."""
        return SotwTypeState(
            subscription=self.subscription if isinstance(subscription, Keep) else subscription,
            phase=self.phase if isinstance(phase, Keep) else phase,
            listed=self.listed if isinstance(listed, Keep) else listed,
            held_version=self.held_version if isinstance(held_version, Keep) else held_version,
            held=self.held if isinstance(held, Keep) else held,
            rejected_version=(
                self.rejected_version if isinstance(rejected_version, Keep) else rejected_version
            ),
            last_error=self.last_error if isinstance(last_error, Keep) else last_error,
            latest_nonce=self.latest_nonce if isinstance(latest_nonce, Keep) else latest_nonce,
            outstanding=self.outstanding if isinstance(outstanding, Keep) else outstanding,
            owed=self.owed if isinstance(owed, Keep) else owed,
            acks=self.acks if isinstance(acks, Keep) else acks,
            nacks=self.nacks if isinstance(nacks, Keep) else nacks,
        )

    # --- end generated ---

    _unshown = frozenset({"listed"})

    @property
    def requested(self) -> tuple[str, ...]:
        """The ``resource_names`` of the last request."""
        return self.listed.names


_UNSEEN = SotwTypeState(subscription=NOTHING, phase=Phase.IDLE)
"""A type the client has not asked for yet (one record for every stream)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class SotwServer(ServerMachine[SotwTypeState, DiscoveryRequest, SotwResponse]):
    """The server side of one SotW stream. ``type_url`` fixes the type on per-type services.

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
        self._judges_current = True
        self._warming: frozenset[str] = frozenset()
        """Types owed an answer because a type that warms on them was just sent (ADS)."""
        self._authorized: dict[
            str, tuple[Selection, Subscription, Selection, Mapping[str, str]]
        ] = {}
        """Per type, the last selection the view gave and for which subscription, what of
        it the client may have, and the denied names with their reasons."""

    def _holding(self, state: SotwTypeState) -> Holding:
        held = state.held.resources if state.held is not None else _NOTHING
        outstanding = state.outstanding
        if outstanding is None:
            return Holding(state.subscription, held)
        arriving = outstanding.selection.resources
        full = type_info(outstanding.type_url).sotw_full_state
        return Holding(
            state.subscription,
            held,
            arriving=arriving.values(),
            surviving=arriving if full else None,
        )

    def _receive(self, request: DiscoveryRequest) -> list[Event]:
        events = self._identify(request.node)
        info = resolve_type(self._fixed_type, request.type_url, delta=False)
        type_url = info.type_url
        state = self._types.get(type_url)
        if state is None or request.resource_names is not state.requested:
            # (An ACK decoded from remembered bytes repeats the very list checked before.)
            check_names(request.resource_names, self._limits, "resource_names")
        if state is None:
            check_type_count(len(self._types), self._limits)
            state = _UNSEEN
        outstanding = state.outstanding
        given = classify(
            state.phase,
            request.response_nonce,
            error=request.error_detail is not None,
            latest_nonce=state.latest_nonce,
            outstanding_nonce=outstanding.nonce if outstanding is not None else None,
            repeat=request.resource_names == state.requested
            and request.version_info == (state.held_version or ""),
        )
        move = step("sotw", type_url, state.phase, given)
        # The effects' changes are gathered and applied at once: one new state a request.
        changes: dict[str, Any] = {"phase": move.next}
        for effect in move.effects:
            if effect is Effect.REPORT_STALE:
                events.append(
                    StaleNonceSeen(
                        type_url=type_url, nonce=request.response_nonce, latest=state.latest_nonce
                    )
                )
            elif effect is Effect.ACCEPT:
                assert outstanding is not None
                changes.update(
                    held_version=outstanding.version_info,
                    held=state.held if outstanding.heartbeat else outstanding.selection,
                    rejected_version=None,
                    outstanding=None,
                    acks=state.acks + 1,
                )
                events.append(
                    ResponseAcked(
                        type_url=type_url,
                        version_info=outstanding.version_info,
                        nonce=outstanding.nonce,
                    )
                )
            elif effect is Effect.REJECT:
                assert outstanding is not None
                assert request.error_detail is not None
                changes.update(
                    last_error=request.error_detail, outstanding=None, nacks=state.nacks + 1
                )
                if not outstanding.heartbeat:
                    # (A rejected heartbeat repeated what the client holds: it still does.)
                    changes.update(held_version=None, rejected_version=outstanding.version_info)
                events.append(
                    ResponseNacked(
                        type_url=type_url,
                        rejected=outstanding.version_info,
                        version_info=request.version_info,
                        nonce=outstanding.nonce,
                        error=request.error_detail,
                    )
                )
            elif effect is Effect.OWE:
                changes["owed"] = True
            else:
                self._subscribe(info, state, request, events, changes)
        self._types[type_url] = state.evolve(**changes)
        if not events or "owed" in changes or any(type(e) is not ResponseAcked for e in events):
            self._quiet.pop(type_url, None)
        return events

    def _owes(self, type_url: str) -> bool:
        return type_url in self._warming or self._types[type_url].owed

    def _subscribe(
        self,
        info: TypeInfo,
        state: SotwTypeState,
        request: DiscoveryRequest,
        events: list[Event],
        changes: dict[str, Any],
    ) -> None:
        """Apply ``resource_names`` into ``changes``; a list equal to the previous one is
        not read again. (``state`` is the type's state before the request; of what the
        request's other effects change, only ``held_version`` is set here too, later.)"""
        first = state.phase is Phase.IDLE
        if not first and request.resource_names == state.requested:
            return
        previous = None if first else state.subscription
        subscription = Subscription.sotw(
            previous, request.resource_names, wildcard_capable=info.wildcard_capable
        )
        changes["listed"] = RequestedNames.of(request.resource_names)
        if not first and subscription == previous:
            return
        check_subscribed(len(subscription.names), self._limits)
        resumable = _resumable(info, subscription)
        if first:
            changes["held_version"] = (request.version_info or None) if resumable else None
        elif not state.latest_nonce and not resumable:
            changes["held_version"] = None
        events.append(
            SubscriptionChanged(
                type_url=info.type_url, previous=previous, subscription=subscription
            )
        )
        changes["subscription"] = subscription

    def selection(self, type_url: str, view: ResourceView | None) -> Selection | None:
        """What this stream's client would be sent of ``type_url`` now: the view's selection
        for its subscription, less what the resource policy denies (``None``: the type was
        not asked for, or the view does not serve it)."""
        state = self._types.get(type_url)
        if state is None or view is None:
            return None
        return self._select(type_url, state, view)[0]

    def _select(
        self, type_url: str, state: SotwTypeState, view: ResourceView
    ) -> tuple[Selection | None, Mapping[str, str]]:
        """What the view selects for the subscription, less what the client may not have
        (with the reasons, by name; see ``use_authorization``)."""
        selection = view.select(type_url, state.subscription)
        if selection is None or self._deny is None:
            return selection, _NO_REASONS
        memo = self._authorized.get(type_url)
        if memo is not None and memo[0] is selection and memo[1] == state.subscription:
            return memo[2], memo[3]
        deny = self._deny
        names = set(selection.resources) | state.subscription.names
        denied = {name: reason for name in names if (reason := deny(type_url, name)) is not None}
        allowed = selection
        if denied.keys() & selection.resources.keys():
            kept = {n: r for n, r in selection.resources.items() if n not in denied}
            allowed = Selection.of(type_url, kept)
        self._authorized[type_url] = (selection, state.subscription, allowed, denied)
        return allowed, denied

    def _respond(self, type_url: str, view: ResourceView, resources: object) -> SotwResponse | None:
        self._quiet.pop(type_url, None)
        state = self._types[type_url]
        if state.outstanding is not None:
            # (Sent before this poll, perhaps from an older view: not quiet.)
            if not state.outstanding.heartbeat:
                self.polled_current = False
            elif self.polled_current:
                self.polled_current = None  # (what it holds is not looked at)
            return None
        selection, denied = self._select(type_url, state, view)
        if selection is None:
            self._looked(type_url, view, resources)
            return None
        if selection.version != state.held_version:
            self.polled_current = False
        errors = self._sotw_errors(state.subscription, selection, denied)
        if state.held is None and state.held_version == selection.version:
            state = state.evolve(held=selection)
            self._types[type_url] = state
        owed = state.owed or type_url in self._warming
        if not owed and selection.version == state.held_version:
            self._looked(type_url, view, resources)
            return None
        whole = True
        if self._ordered:
            ordered = self._make_before_break(type_url, selection, state.held, view)
            if ordered is None:
                return None  # everything new must wait for the client to catch up
            if ordered is not selection:
                whole = False  # (what waits goes once the client catches up: not quiet)
            selection = ordered
        if selection.version == state.rejected_version:
            return None  # (not quiet: the client may ask for it again)
        if not owed and selection.version == state.held_version:
            return None
        response = self._send(state, selection, selection.version, errors=errors)
        if self.aggregated:
            warms_on = type_info(type_url).warms_on
            self._warming -= {type_url}
            if warms_on is not None:
                self._warming |= {warms_on}
        if whole:
            self._looked(type_url, view, resources)
        return response

    def _sotw_errors(
        self, subscription: Subscription, selection: Selection, denied: Mapping[str, str]
    ) -> tuple[ResourceError, ...]:
        """The errors for the names asked for that ``selection`` (what the view has, less
        what is denied) does not carry."""
        if not self.features.resource_errors:
            return ()
        absent: dict[str, str | None] = {
            name: denied.get(name) for name in subscription.names if name not in selection.resources
        }
        return self._resource_errors(absent, subscription)

    def _send(
        self,
        state: SotwTypeState,
        selection: Selection,
        version: str,
        *,
        heartbeat: bool = False,
        errors: tuple[ResourceError, ...] = (),
    ) -> SotwResponse:
        """Put ``selection`` in flight at ``version``."""
        type_url = selection.type_url
        move = step("sotw", type_url, state.phase, Input.RESPOND)
        response = SotwResponse(
            type_url=type_url,
            version_info=version,
            nonce=self._nonce_source(),
            selection=selection,
            wrapped=self.features.sotw_ttl and selection.shortest_ttl is not None,
            heartbeat=heartbeat,
            errors=errors,
        )
        self._types[type_url] = state.evolve(
            phase=move.next,
            outstanding=response,
            latest_nonce=response.nonce,
            owed=False,
        )
        return response

    def _beat(
        self, type_url: str, view: ResourceView, quiet: Collection[tuple[str, str]]
    ) -> SotwResponse | None:
        state = self._types[type_url]
        if not self.features.sotw_ttl or state.outstanding is not None or state.owed:
            return None
        if state.held is None or state.held_version is None:
            return None
        selection = self._select(type_url, state, view)[0]
        if selection is None or selection.version != state.held_version:
            return None  # a change is due instead, which restarts the TTLs
        if selection.shortest_ttl is None:
            return None
        beating = {
            name: resource
            for name, resource in selection.resources.items()
            if resource.ttl is not None and (type_url, name) not in quiet
        }
        if type_info(type_url).sotw_full_state:
            if len(beating) < sum(1 for r in selection.resources.values() if r.ttl is not None):
                return None
        elif not beating:
            return None
        elif len(beating) < len(selection):
            selection = Selection.of(type_url, beating)
        return self._send(state, selection, state.held_version, heartbeat=True)

    def _ttl(self, state: SotwTypeState) -> float | None:
        if not self.features.sotw_ttl:
            return None
        outstanding = state.outstanding
        selections = (state.held, outstanding.selection if outstanding is not None else None)
        ttls = [
            ttl
            for selection in selections
            if selection is not None and (ttl := selection.shortest_ttl) is not None
        ]
        return min(ttls) if ttls else None

    def _owe(self, state: SotwTypeState, names: frozenset[str]) -> SotwTypeState:
        return state.evolve(owed=True)

    def _make_before_break(
        self, type_url: str, desired: Selection, held: Selection | None, view: ResourceView
    ) -> Selection | None:
        """``desired`` less what must wait, plus what must stay (see `._ordering`);
        ``None`` when that would change nothing for the client."""
        before = held.resources if held is not None else _NOTHING
        changed = (
            [
                resource
                for name, resource in desired.resources.items()
                if (old := before.get(name)) is None or old.version != resource.version
            ]
            if desired.has_lower_references
            else []
        )
        removals = (
            [name for name in before if name not in desired.resources]
            if before and type_info(type_url).sotw_full_state
            else []
        )
        if not changed and not removals:
            return desired
        decided = plan(type_url, changed, removals, self.holdings(), view)
        if not decided.wait and not decided.keep:
            return desired
        chosen = dict(desired.resources)
        for name in decided.wait:
            old = before.get(name)
            if old is not None:
                chosen[name] = old
            else:
                del chosen[name]
        for name in decided.keep:
            chosen[name] = before[name]
        if not _news(type_url, chosen, before):
            return None
        return Selection.of(type_url, chosen)


def _news(type_url: str, chosen: Mapping[str, Resource], before: Mapping[str, Resource]) -> bool:
    """Whether sending ``chosen`` would change anything for a client holding ``before``."""
    for name, resource in chosen.items():
        old = before.get(name)
        if old is None or old.version != resource.version:
            return True
    return type_info(type_url).sotw_full_state and len(before) != len(chosen)


def _resumable(info: TypeInfo, subscription: Subscription) -> bool:
    """Whether a version presented on a new stream says what the client holds.

    Only for full-state types watched with the legacy wildcard (how Envoy watches listeners
    and clusters): such a client never narrows what it watches, so an accepted version is
    the whole set and it kept all of it. A client that names resources (``*`` included)
    may have dropped some since it accepted the version, which still names them.
    """
    return info.sotw_full_state and subscription.legacy
