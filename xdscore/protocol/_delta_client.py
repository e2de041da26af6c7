"""The client side of one Delta stream, behaving like Envoy's, as a pure state machine.

Theory of operation
-------------------
Per type the client keeps Envoy's three sets:

* ``requested``: names it subscribed to, each with the version it holds, or ``None`` while
  it waits for the server (just subscribed, or removed by the server while still wanted);
* ``wildcard_received``: resources it holds only because it is subscribed to the wildcard;
* ``ambiguous``: names it unsubscribed while subscribed to the wildcard, held until the
  server says whether they are still in the wildcard (a resource) or gone (a removal).

:meth:`~DeltaClient.subscribe` and :meth:`~DeltaClient.unsubscribe` return the
request to send; the first request of a wildcard-capable type with no names is legacy
wildcard. :meth:`~DeltaClient.receive` applies a response and returns the ACK (nonce
only) or NACK. A response is rejected as a whole when a name repeats or a name is both
updated and removed; when the ``validate`` hook objects to some resources, the rest of the
response (removals included) still applies and the response is NACKed, as Envoy does for
clusters and listeners. A resource with no body whose version equals the held one is a
heartbeat; a body-less entry for anything else (without aliases) is rejected with the whole
response, as Envoy rejects it. ``resource_errors`` are kept per requested name until the
resource arrives or the name is unsubscribed (an error alone drops nothing held, as in
gRPC).
:meth:`~DeltaClient.reconnect` returns the first requests of a new stream: every requested
name (and ``*`` when explicit) with ``initial_resource_versions`` listing every held
resource, names still waiting omitted; types it no longer wants anything of are not
requested again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, final

import attrs
from mypy_extensions import mypyc_attr

from .._errors import GrpcStatus, LocalProtocolError
from .._memos import CLIENT_DELTA_RESPONSES, encoded_size, footprint
from ..wire._names import canonical_names
from ..wire._records import DeltaDiscoveryRequest, DeltaDiscoveryResponse, ErrorDetail, Node
from ..wire._resource import Resource
from ..wire._typeurls import type_info
from ._record import KEEP, Keep, Record
from ._sotw_client import Validator
from ._subscription import WILDCARD

__all__ = ["DeltaClient", "DeltaClientTypeState"]


@final
class DeltaClientTypeState(Record):
    """What a Delta client wants and holds of one type (see the module docstring);
    ``errors``: the server's ``resource_errors`` for requested names, by name."""

    # record fields, with evolve:
    #     *
    #     wildcard: bool = False
    #     legacy: bool = False
    #     requested: Mapping[str, Resource | None] = {}
    #     wildcard_received: Mapping[str, Resource] = {}
    #     ambiguous: Mapping[str, Resource] = {}
    #     errors: Mapping[str, ErrorDetail] = {}
    #     nonce: str = ""
    #     last_error: ErrorDetail | None = None
    #     acks: int = 0
    #     nacks: int = 0
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = (
        "wildcard",
        "legacy",
        "requested",
        "wildcard_received",
        "ambiguous",
        "errors",
        "nonce",
        "last_error",
        "acks",
        "nacks",
    )
    __slots__ = _fields

    def __init__(
        self,
        *,
        wildcard: bool = False,
        legacy: bool = False,
        requested: Mapping[str, Resource | None] | None = None,
        wildcard_received: Mapping[str, Resource] | None = None,
        ambiguous: Mapping[str, Resource] | None = None,
        errors: Mapping[str, ErrorDetail] | None = None,
        nonce: str = "",
        last_error: ErrorDetail | None = None,
        acks: int = 0,
        nacks: int = 0,
    ) -> None:
        self.wildcard: Final = wildcard
        self.legacy: Final = legacy
        self.requested: Final[Mapping[str, Resource | None]] = (
            {} if requested is None else requested
        )
        self.wildcard_received: Final[Mapping[str, Resource]] = (
            {} if wildcard_received is None else wildcard_received
        )
        self.ambiguous: Final[Mapping[str, Resource]] = {} if ambiguous is None else ambiguous
        self.errors: Final[Mapping[str, ErrorDetail]] = {} if errors is None else errors
        self.nonce: Final = nonce
        self.last_error: Final = last_error
        self.acks: Final = acks
        self.nacks: Final = nacks

    def evolve(
        self,
        *,
        wildcard: bool | Keep = KEEP,
        legacy: bool | Keep = KEEP,
        requested: Mapping[str, Resource | None] | Keep = KEEP,
        wildcard_received: Mapping[str, Resource] | Keep = KEEP,
        ambiguous: Mapping[str, Resource] | Keep = KEEP,
        errors: Mapping[str, ErrorDetail] | Keep = KEEP,
        nonce: str | Keep = KEEP,
        last_error: ErrorDetail | Keep | None = KEEP,
        acks: int | Keep = KEEP,
        nacks: int | Keep = KEEP,
    ) -> DeltaClientTypeState:
        """A copy with the fields given changed."""
        return DeltaClientTypeState(
            wildcard=self.wildcard if isinstance(wildcard, Keep) else wildcard,
            legacy=self.legacy if isinstance(legacy, Keep) else legacy,
            requested=self.requested if isinstance(requested, Keep) else requested,
            wildcard_received=(
                self.wildcard_received if isinstance(wildcard_received, Keep) else wildcard_received
            ),
            ambiguous=self.ambiguous if isinstance(ambiguous, Keep) else ambiguous,
            errors=self.errors if isinstance(errors, Keep) else errors,
            nonce=self.nonce if isinstance(nonce, Keep) else nonce,
            last_error=self.last_error if isinstance(last_error, Keep) else last_error,
            acks=self.acks if isinstance(acks, Keep) else acks,
            nacks=self.nacks if isinstance(nacks, Keep) else nacks,
        )

    # --- end generated ---

    def holds(self) -> dict[str, Resource]:
        """Every resource held, by name."""
        held: dict[str, Resource] = dict(self.wildcard_received)
        held.update(self.ambiguous)
        held.update({n: r for n, r in self.requested.items() if r is not None})
        return held


@mypyc_attr(allow_interpreted_subclasses=True)
class DeltaClient:
    """The client side of a Delta ADS stream, as Envoy drives one."""

    def __init__(
        self,
        *,
        node: Node,
        validate: Validator | None = None,
        node_on_first_request_only: bool = True,
    ) -> None:
        self.node = node
        self._validate = validate
        self._node_once = node_on_first_request_only
        self._node_sent = False
        self._types: dict[str, DeltaClientTypeState] = {}

    def type_state(self, type_url: str) -> DeltaClientTypeState | None:
        """The client's state for ``type_url``, if it ever subscribed to it."""
        return self._types.get(type_url)

    def holds(self, type_url: str) -> Mapping[str, Resource]:
        """The resources of ``type_url`` the client holds."""
        state = self._types.get(type_url)
        return state.holds() if state is not None else {}

    def type_urls(self) -> list[str]:
        """Every type subscribed, in the order of the first subscription."""
        return list(self._types)

    def errors(self, type_url: str) -> Mapping[str, ErrorDetail]:
        """The server's errors for requested names of ``type_url`` (``resource_errors``)."""
        state = self._types.get(type_url)
        return state.errors if state is not None else {}

    def subscribe(self, type_url: str, names: Iterable[str] = ()) -> DeltaDiscoveryRequest:
        """Subscribe to ``names`` (``*`` for the wildcard); return the request to send.

        No names on the first request of a wildcard-capable type is the legacy wildcard.
        Names held through the wildcard become explicitly requested, keeping their version.
        """
        added = tuple(sorted(set(canonical_names(names))))
        state = self._types.get(type_url)
        if state is None:
            info = type_info(type_url)
            legacy = not added and info.wildcard_capable
            state = DeltaClientTypeState(wildcard=legacy or WILDCARD in added, legacy=legacy)
        elif added:
            state = state.evolve(
                wildcard=(state.wildcard and not state.legacy) or WILDCARD in added,
                legacy=False,
            )
        requested = dict(state.requested)
        ambiguous = dict(state.ambiguous)
        received = dict(state.wildcard_received)
        for name in added:
            if name == WILDCARD or name in requested:
                continue
            held = received.pop(name, None) or ambiguous.pop(name, None)
            requested[name] = held
        state = state.evolve(requested=requested, ambiguous=ambiguous, wildcard_received=received)
        self._types[type_url] = state
        return self._request(type_url, subscribe=added)

    def unsubscribe(self, type_url: str, names: Iterable[str]) -> DeltaDiscoveryRequest:
        """Unsubscribe from ``names`` (``*`` leaves the wildcard); return the request to send.

        Under the wildcard, unsubscribed names stay held (ambiguous) until the server says
        whether they remain in it. Raises :class:`~xdscore.LocalProtocolError` for a type
        never subscribed to.
        """
        state = self._types.get(type_url)
        if state is None:
            raise LocalProtocolError(f"never subscribed to {type_url!r}")
        removed = tuple(sorted(set(canonical_names(names))))
        requested = dict(state.requested)
        ambiguous = dict(state.ambiguous)
        received = dict(state.wildcard_received)
        wildcard = state.wildcard and WILDCARD not in removed
        for name in removed:
            if name == WILDCARD:
                continue
            held = requested.pop(name, None)
            if wildcard and held is not None:
                ambiguous[name] = held
        if not wildcard:
            received.clear()
            ambiguous.clear()
        self._types[type_url] = state.evolve(
            wildcard=wildcard,
            legacy=state.legacy and wildcard,
            requested=requested,
            ambiguous=ambiguous,
            wildcard_received=received,
        )
        return self._request(type_url, unsubscribe=removed)

    def receive(self, response: DeltaDiscoveryResponse) -> DeltaDiscoveryRequest:
        """Apply a response; return the ACK or NACK (nonce, and ``error_detail`` if NACK).

        A response with a repeated name, or a name both updated and removed, is rejected
        whole; otherwise its valid part applies even when it is NACKed. Raises
        :class:`~xdscore.LocalProtocolError` for a type never subscribed to (state unchanged).
        """
        type_url = response.type_url
        state = self._types.get(type_url)
        if state is None:
            raise LocalProtocolError(f"response for {type_url!r}, never subscribed")
        entries = _entries(response)
        error = self._problem(response, state, entries)
        if error is not None:
            detail = ErrorDetail(code=GrpcStatus.INTERNAL, message=error)
            self._types[type_url] = state.evolve(
                nonce=response.nonce, last_error=detail, nacks=state.nacks + 1
            )
            return self._request(type_url, nonce=response.nonce, error=detail)
        invalid = self._invalid(response)
        if (
            not invalid
            and entries.all_bodies
            and not response.removed_resources
            and not response.resource_errors
            and not state.errors
            and entries.names <= state.requested.keys()
        ):
            # The common case, for each of many clients of one answer: every resource is a
            # body for a name it asked for. The dict merge is one step, not one per name.
            self._types[type_url] = state.evolve(
                requested={**state.requested, **entries.by_name},
                nonce=response.nonce,
                last_error=None,
                acks=state.acks + 1,
            )
            return self._request(type_url, nonce=response.nonce)
        requested = dict(state.requested)
        ambiguous = dict(state.ambiguous)
        received = dict(state.wildcard_received)
        for resource in response.resources:
            name = resource.name
            held = requested.get(name) or received.get(name) or ambiguous.get(name)
            if not resource.body and held is not None and held.version == resource.version:
                continue  # heartbeat
            if name in invalid:
                continue  # not applied; the rest of the response is
            if name in requested:
                requested[name] = resource
            elif state.wildcard:
                ambiguous.pop(name, None)
                received[name] = resource
        for name in response.removed_resources:
            if name in requested:
                requested[name] = None
            received.pop(name, None)
            ambiguous.pop(name, None)
        errors = {
            **state.errors,
            **{
                error.name: ErrorDetail(code=error.code, message=error.message)
                for error in response.resource_errors
                if error.name in requested
            },
        }
        if errors:
            arrived = {r.name for r in response.resources if r.body and r.name not in invalid}
            errors = {
                name: detail
                for name, detail in errors.items()
                if name in requested and name not in arrived
            }
        state = state.evolve(
            requested=requested,
            ambiguous=ambiguous,
            wildcard_received=received,
            errors=errors,
            nonce=response.nonce,
        )
        if invalid:
            detail = ErrorDetail(code=GrpcStatus.INTERNAL, message="; ".join(invalid.values()))
            self._types[type_url] = state.evolve(last_error=detail, nacks=state.nacks + 1)
            return self._request(type_url, nonce=response.nonce, error=detail)
        self._types[type_url] = state.evolve(last_error=None, acks=state.acks + 1)
        return self._request(type_url, nonce=response.nonce)

    def _invalid(self, response: DeltaDiscoveryResponse) -> dict[str, str]:
        """Each resource the ``validate`` hook objects to, with its reason."""
        if self._validate is None:
            return {}
        found = {}
        for resource in response.resources:
            if resource.body:
                reason = self._validate(response.type_url, [resource])
                if reason is not None:
                    found[resource.name] = reason
        return found

    def reconnect(self) -> list[DeltaDiscoveryRequest]:
        """The first requests of a new stream, one per subscribed type, listing what is held
        in ``initial_resource_versions``; nonces are forgotten, held resources kept."""
        self._node_sent = False
        requests = []
        for type_url, state in self._types.items():
            state = state.evolve(nonce="")
            self._types[type_url] = state
            if not state.wildcard and not state.requested:
                continue  # nothing wanted: an empty first request would mean legacy wildcard
            names = sorted(state.requested)
            if state.wildcard and not state.legacy:
                names.insert(0, WILDCARD)
            held = {name: resource.version for name, resource in state.holds().items()}
            requests.append(self._request(type_url, subscribe=tuple(names), initial=held))
        return requests

    def _problem(
        self, response: DeltaDiscoveryResponse, state: DeltaClientTypeState, entries: _Entries
    ) -> str | None:
        if entries.problem is not None:
            return entries.problem
        if entries.name_only:
            held = state.holds()
            for resource in entries.name_only:
                mine = held.get(resource.name)
                if mine is None or mine.version != resource.version:
                    # As Envoy: a body-less entry is a heartbeat only for what is held.
                    return f"no body for {resource.name!r}, which is not held at that version"
        removed = response.removed_resources
        if removed:
            both = entries.names.intersection(removed)
            if both:
                return f"{sorted(both)[0]!r} is both updated and removed"
            if len(set(removed)) != len(removed):
                return "duplicate name in removed_resources"
        return None

    def _request(
        self,
        type_url: str,
        *,
        subscribe: tuple[str, ...] = (),
        unsubscribe: tuple[str, ...] = (),
        nonce: str = "",
        error: ErrorDetail | None = None,
        initial: Mapping[str, str] | None = None,
    ) -> DeltaDiscoveryRequest:
        node = None if self._node_once and self._node_sent else self.node
        self._node_sent = True
        return DeltaDiscoveryRequest(
            type_url=type_url,
            resource_names_subscribe=subscribe,
            resource_names_unsubscribe=unsubscribe,
            initial_resource_versions=dict(initial or {}),
            response_nonce=nonce,
            error_detail=error,
            node=node,
        )


@attrs.frozen
class _Entries:
    """What a response's resources say whatever the client holds: worked out once for the
    many clients that receive the same resources."""

    problem: str | None
    """Why the response is rejected whole (a repeated name, a foreign type), if it is."""
    names: frozenset[str]
    by_name: Mapping[str, Resource]
    name_only: tuple[Resource, ...]
    """Body-less entries without aliases: heartbeats only for what is held."""
    all_bodies: bool


def _entries(response: DeltaDiscoveryResponse) -> _Entries:
    """The :class:`_Entries` of ``response`` (remembered for the last few resource tuples
    seen, by identity: a load generator hands one decoded tuple to every client)."""
    resources = response.resources
    key = (id(resources), response.type_url)
    kept = CLIENT_DELTA_RESPONSES.get(key)
    if isinstance(kept, tuple) and kept[0] is resources:
        entries: _Entries = kept[1]
        return entries
    entries = _examine(response)
    if len(resources) > 1:
        size = footprint(resources, entries, skip=(Resource,)) + encoded_size(resources)
        CLIENT_DELTA_RESPONSES.put(key, (resources, entries), size)
    return entries


def _examine(response: DeltaDiscoveryResponse) -> _Entries:
    by_name: dict[str, Resource] = {}
    name_only: list[Resource] = []
    problem = None
    for resource in response.resources:
        if resource.name in by_name:
            problem = f"duplicate resource name {resource.name!r}"
            break
        by_name[resource.name] = resource
        if resource.body and resource.type_url != response.type_url:
            problem = f"resource type {resource.type_url} does not match {response.type_url}"
            break
        if resource.name_only and not resource.aliases:
            name_only.append(resource)
    all_bodies = problem is None and all(r.body for r in by_name.values())
    return _Entries(problem, frozenset(by_name), by_name, tuple(name_only), all_bodies)
