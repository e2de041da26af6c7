"""What the SotW and Delta server machines share: identity, life cycle, the per-type table."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Final, Generic, Protocol, TypeVar

from mypy_extensions import mypyc_attr

from .._errors import GrpcStatus, ProtocolError
from ..wire._records import Node, ResourceError
from ..wire._resource import Resource
from ..wire._typeurls import type_info
from ._events import Event, NodeIdentified
from ._features import NO_FEATURES, ClientFeatures
from ._identity import check_node
from ._limits import StreamLimits
from ._ordering import Holding, Holdings
from ._state import Phase, StreamState, ensure_open
from ._subscription import Subscription
from ._view import ResourceView

__all__ = ["Deny", "Response", "ServerMachine"]

Deny = Callable[[str, str], "str | None"]
"""Given a type URL and a resource name: ``None`` if this stream's client may have it, else
why not. Must answer the same for the same name for as long as the stream lasts."""


class Response(Protocol):
    """What the runtime reads of a response a server machine returns."""

    @property
    def type_url(self) -> str: ...

    @property
    def nonce(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def heartbeats(self) -> int:
        """How many resources it heartbeats (0: it is no heartbeat)."""
        ...

    @property
    def carries_ttl(self) -> bool:
        """Whether it sends a client that reads TTLs a resource with one."""
        ...

    @property
    def carried(self) -> Collection[Resource]:
        """The resources it sends."""
        ...


class _TypeState(Protocol):
    @property
    def subscription(self) -> Subscription: ...

    @property
    def phase(self) -> Phase: ...

    @property
    def outstanding(self) -> object | None: ...


_State = TypeVar("_State", bound=_TypeState)
_ABSENT: Final = object()
"""What `_quiet` records for a type the view had no resources of."""
_UNREAD: Final = object()
"""A type's resources not read from the view yet (see `_respond`)."""
_NOT_FOUND = "the server has no resource of this name"
_Request = TypeVar("_Request")
_Response = TypeVar("_Response")


@mypyc_attr(allow_interpreted_subclasses=True)
class ServerMachine(Generic[_State, _Request, _Response]):
    """One gRPC stream's server side; subclasses say how a request applies and what is due.

    ``type_url`` fixes the type on per-type services (``None``: ADS). ``ordered`` applies
    make-before-break ordering, which only an aggregated stream can do.
    """

    def __init__(
        self,
        *,
        nonce_source: Callable[[], str],
        type_url: str | None = None,
        limits: StreamLimits | None = None,
        ordered: bool = True,
    ) -> None:
        self._nonce_source = nonce_source
        self._fixed_type = type_url
        self._limits = limits or StreamLimits()
        self._ordered = ordered and type_url is None
        self._types: dict[str, _State] = {}
        self._ranked: list[str] = []
        """The keys of ``_types`` in make-before-break order (types are never removed)."""
        self.node: Node | None = None
        """The client's node, from the first request (``None`` before it)."""
        self.state = StreamState.OPEN
        """OPEN, or ERROR for good after a protocol error."""
        self.features: ClientFeatures = NO_FEATURES
        """What the client can read beyond the plain protocol (see `use_features`)."""
        self._deny: Deny | None = None
        self._judges_current = False
        """Whether `_respond` keeps `polled_current` (the SotW machine does)."""
        self._quiet: dict[str, object] = {}
        """The types whose last look left nothing that a later look could send while the
        view's resources of the type stay the same (the type current, absent from the view,
        or sent in full; see the SotW machine), each with the mapping the view's
        ``resources`` gave then (`_ABSENT`: none); only ACKs of the type arrived since."""
        self.polled_current: bool | None = None
        """What the last `poll` saw of whether the client holds what the view gives it of
        every type, nothing of it in flight (as ``holds_current`` in the runtime's status
        module judges it): ``False`` if some type it looked at did not, ``True`` if every
        type did, ``None`` if it could not tell (it looked at some types only, a heartbeat
        was in flight, or this machine does not judge it while polling)."""

    def use_features(self, features: ClientFeatures) -> None:
        """Encode what is sent from now on for a client that reads ``features`` (the runtime
        works them out from the first request's node; until then: none)."""
        self.features = features
        self._quiet.clear()

    def use_authorization(self, deny: Deny | None) -> None:
        """Withhold from now on every resource ``deny`` names a reason for: it is sent as
        absent (SotW: left out; Delta: removed if held) and, for a client that reads
        ``resource_errors`` and named it, reported as PERMISSION_DENIED with the reason."""
        self._deny = deny
        self._quiet.clear()

    def _resource_errors(
        self, absent: Mapping[str, str | None], subscription: Subscription
    ) -> tuple[ResourceError, ...]:
        """The ``resource_errors`` for the names in ``absent`` the client asked for by name:
        PERMISSION_DENIED with the reason, or NOT_FOUND (``None``); nothing for a client
        that does not read them."""
        if not self.features.resource_errors or not absent:
            return ()
        return tuple(
            ResourceError(name=name, code=GrpcStatus.PERMISSION_DENIED, message=reason)
            if reason is not None
            else ResourceError(name=name, code=GrpcStatus.NOT_FOUND, message=_NOT_FOUND)
            for name, reason in sorted(absent.items())
            if name in subscription.names
        )

    @property
    def aggregated(self) -> bool:
        """True on ADS, where one stream carries every type."""
        return self._fixed_type is None

    def type_states(self) -> Mapping[str, _State]:
        """A read-only copy of the per-type state, by type URL, in the order first asked."""
        return dict(self._types)

    def type_state(self, type_url: str) -> _State | None:
        """The state of ``type_url``, if the client asked for it on this stream."""
        return self._types.get(type_url)

    def subscription(self, type_url: str) -> Subscription | None:
        """The client's subscription for ``type_url``, if it asked for the type."""
        state = self._types.get(type_url)
        return state.subscription if state is not None else None

    def receive(self, request: _Request) -> list[Event]:
        """Apply one decoded request; return the events it caused, in order.

        Raises [`RemoteProtocolError`][xdscore.protocol.RemoteProtocolError] for a request the
        protocol forbids (its ``status`` says how the stream should end) and
        [`LocalProtocolError`][xdscore.protocol.LocalProtocolError] if the machine already failed.
        After either the machine is in ERROR for good: the stream must end. Otherwise only the
        request's type changed; nothing is sent until `poll`.
        """
        ensure_open(self.state)
        try:
            return self._receive(request)
        except ProtocolError:
            self.state = StreamState.ERROR
            raise

    def poll(
        self,
        view: ResourceView | None,
        only: Collection[str] | None = None,
        *,
        same_view: bool = False,
    ) -> list[_Response]:
        """The responses due now against ``view``, in make-before-break order of their types.

        ``view`` is ``None`` while the cache has nothing for this client: nothing is sent.
        ``only`` limits the look to those types (the others wait for a later poll).
        Each response returned is in flight from then on (its type is SENT); send them in
        the order given. Raises [`LocalProtocolError`][xdscore.protocol.LocalProtocolError] if the
        machine already failed; never raises for anything the cache holds.

        A type whose last look left nothing to send, with only ACKs of it since, is not
        looked at again while ``view.resources`` gives the same mapping object for it (the
        view protocol's promise for an unchanged type). ``same_view`` says ``view`` gives
        what the view of the last poll of every type gave (the cache did not change since):
        the mappings are not asked for either.
        """
        ensure_open(self.state)
        quiet = self._quiet
        if view is None:
            self.polled_current = None
            quiet.clear()
            return []
        self.polled_current = True if only is None and self._judges_current else None
        types = self._types
        out: list[_Response] = []
        for type_url in self._in_rank_order():
            if only is not None and type_url not in only:
                continue
            seen = quiet.get(type_url)
            resources = _UNREAD
            if seen is not None and not self._owes(type_url):
                if not same_view:
                    resources = _mapping(view, type_url)
                if same_view or resources is seen:
                    # Nothing changed for the type since it was last looked at.
                    if types[type_url].outstanding is not None:
                        self.polled_current = False  # (sent in full then, not answered yet)
                    continue
            response = self._respond(type_url, view, resources)
            if response is not None:
                out.append(response)
        return out

    def heartbeat(
        self, view: ResourceView | None, *, quiet: Collection[tuple[str, str]] = ()
    ) -> list[_Response]:
        """Heartbeats to send now against ``view``, in the order of their types.

        For each type with nothing in flight, the resources with a TTL that the client
        holds at their current version, unless ``(type_url, name)`` is in ``quiet``; only
        for a client that supports TTLs. A Delta heartbeat carries names, versions and TTLs
        without bodies; a SotW one repeats the held state, wrapped (see the machines).
        Each response returned is in flight, as from `poll`. The caller decides when:
        before the shortest TTL (`shortest_ttl`) lapses.
        """
        ensure_open(self.state)
        if view is None:
            return []
        out: list[_Response] = []
        for type_url in self._in_rank_order():
            response = self._beat(type_url, view, quiet)
            if response is not None:
                out.append(response)
                self._quiet.pop(type_url, None)
        return out

    def _looked(self, type_url: str, view: ResourceView, resources: object) -> None:
        """The look at ``type_url`` just made left nothing a later look could send while
        the view's resources of it (``resources``, if read already) stay the same (see
        `_quiet`)."""
        self._quiet[type_url] = _mapping(view, type_url) if resources is _UNREAD else resources

    def _owes(self, type_url: str) -> bool:
        """Whether ``type_url`` is owed an answer whatever the view gives (only a machine
        that keeps `_quiet` is asked)."""
        return False

    def _in_rank_order(self) -> list[str]:
        """The types asked for, in make-before-break order (sorted again only when one was
        added)."""
        if len(self._ranked) != len(self._types):
            self._ranked = sorted(self._types, key=_rank_and_url)
        return self._ranked

    def shortest_ttl(self) -> float | None:
        """The smallest TTL of what the client holds or has in flight, for a client that
        supports TTLs (``None``: nothing it holds expires)."""
        ttls = [ttl for state in self._types.values() if (ttl := self._ttl(state)) is not None]
        return min(ttls) if ttls else None

    def refresh(self, type_url: str, names: Collection[str]) -> None:
        """Owe the client ``names`` of ``type_url`` in full at the next `poll`, even
        if it holds their versions (after their heartbeats were stopped, the client may have
        let them expire)."""
        state = self._types.get(type_url)
        if state is not None and names:
            self._types[type_url] = self._owe(state, frozenset(names))
            self._quiet.pop(type_url, None)

    def holds(self, type_url: str) -> Mapping[str, Resource]:
        """The resources of ``type_url`` the client acknowledged, by name (none for a type
        it never asked for)."""
        state = self._types.get(type_url)
        return self._holding(state).held if state is not None else {}

    def holdings(self) -> Holdings:
        """What the client holds of every type it asked for, for make-before-break."""
        return {type_url: self._holding(state) for type_url, state in self._types.items()}

    def _identify(self, presented: Node | None) -> list[Event]:
        """Check the node a request presents; the first one identifies the stream."""
        first = self.node is None
        self.node = check_node(self.node, presented)
        return [NodeIdentified(node=self.node)] if first else []

    def _receive(self, request: _Request) -> list[Event]:
        raise NotImplementedError

    def _respond(self, type_url: str, view: ResourceView, resources: object) -> _Response | None:
        """What to send of ``type_url`` now; ``resources`` is the view's mapping of it as
        `_quiet` keeps it, if the poll read it already (else `_UNREAD`)."""
        raise NotImplementedError

    def _holding(self, state: _State) -> Holding:
        raise NotImplementedError

    def _beat(
        self, type_url: str, view: ResourceView, quiet: Collection[tuple[str, str]]
    ) -> _Response | None:
        raise NotImplementedError

    def _ttl(self, state: _State) -> float | None:
        raise NotImplementedError

    def _owe(self, state: _State, names: frozenset[str]) -> _State:
        raise NotImplementedError


def _rank_and_url(type_url: str) -> tuple[int, str]:
    return type_info(type_url).rank, type_url


def _mapping(view: ResourceView, type_url: str) -> object:
    """The view's resources of ``type_url``, as `_quiet` compares them (by identity)."""
    resources = view.resources(type_url)
    return _ABSENT if resources is None else resources
