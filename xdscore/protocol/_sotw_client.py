"""The client side of one State-of-the-World stream, behaving like Envoy's, as a pure machine.

Theory of operation
-------------------
A :class:`SotwClient` holds, per type, what the client watches and what it accepted.
Verbs return the request to send: :meth:`~SotwClient.watch` replaces the watched set
of a type (``None`` means legacy wildcard, ``"*"`` among the names an explicit one), and
:meth:`~SotwClient.receive` applies a response and returns the ACK or NACK to send.
After a disconnect, :meth:`~SotwClient.reconnect` returns the first requests of the
new stream: every watched type with the last accepted version and no nonce (types it no
longer watches anything of are not requested again).

Like Envoy:

* Every request carries the full watched set, the last *accepted* version and the latest
  nonce received for the type (so a NACK keeps the old version).
* The node is sent on every request (or only on the first, like gRPC, with
  ``node_on_first_request_only``).
* A response is rejected (NACK: ``error_detail`` with code INTERNAL) as a whole when a
  resource's type differs from the response's or a name repeats. When the ``validate``
  hook objects to some resources, the others still apply (as Envoy applies the valid
  clusters and listeners of an update, and gRPC every valid resource) and the response is
  NACKed, naming the bad ones; the version stays the last accepted one.
* LDS, CDS and SRDS responses replace the whole set; for other types each resource is
  replaced on its own and names not in the response are kept while still watched.
* Resources that were not asked for are ignored; a non-empty response for a type nobody
  watches is answered with a request that keeps the old version (a de-facto NACK).
* Entries wrapped in ``envoy.service.discovery.v3.Resource`` are read (the codec unwraps
  them, TTL included); body-less ones are not applied (gRPC and Envoy alike).
* ``resource_errors`` (xRFC TP3) are kept per watched name, as gRPC keeps them (gRFC A88):
  an error does not drop a resource already held (a full-state response without it does);
  the resource arriving clears its error; LDS, CDS and SRDS responses replace every error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, final

import attrs
from mypy_extensions import mypyc_attr

from .._errors import GrpcStatus, LocalProtocolError
from .._memos import CLIENT_LISTINGS, CLIENT_SOTW_RESPONSES, encoded_size, footprint
from ..wire._names import canonical_names
from ..wire._records import DiscoveryRequest, DiscoveryResponse, ErrorDetail, Node
from ..wire._resource import Resource
from ..wire._typeurls import type_info
from ._record import KEEP, Keep, Record
from ._subscription import WILDCARD, Subscription

__all__ = ["SotwClientTypeState", "SotwClient", "Validator"]

Validator = Callable[[str, Sequence[Resource]], str | None]
"""Given a type URL and the resources of a response, an error message to NACK with."""


@final
class SotwClientTypeState(Record):
    """What the client watches and holds of one type; ``errors``: the server's
    ``resource_errors`` for watched names, by name."""

    # record fields, with evolve:
    #     *
    #     subscription: Subscription
    #     version_info: str = ""
    #     nonce: str = ""
    #     resources: Mapping[str, Resource] = {}
    #     errors: Mapping[str, ErrorDetail] = {}
    #     last_error: ErrorDetail | None = None
    #     acks: int = 0
    #     nacks: int = 0
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = (
        "subscription",
        "version_info",
        "nonce",
        "resources",
        "errors",
        "last_error",
        "acks",
        "nacks",
    )
    __slots__ = _fields

    def __init__(
        self,
        *,
        subscription: Subscription,
        version_info: str = "",
        nonce: str = "",
        resources: Mapping[str, Resource] | None = None,
        errors: Mapping[str, ErrorDetail] | None = None,
        last_error: ErrorDetail | None = None,
        acks: int = 0,
        nacks: int = 0,
    ) -> None:
        self.subscription: Final = subscription
        self.version_info: Final = version_info
        self.nonce: Final = nonce
        self.resources: Final[Mapping[str, Resource]] = {} if resources is None else resources
        self.errors: Final[Mapping[str, ErrorDetail]] = {} if errors is None else errors
        self.last_error: Final = last_error
        self.acks: Final = acks
        self.nacks: Final = nacks

    def evolve(
        self,
        *,
        subscription: Subscription | Keep = KEEP,
        version_info: str | Keep = KEEP,
        nonce: str | Keep = KEEP,
        resources: Mapping[str, Resource] | Keep = KEEP,
        errors: Mapping[str, ErrorDetail] | Keep = KEEP,
        last_error: ErrorDetail | Keep | None = KEEP,
        acks: int | Keep = KEEP,
        nacks: int | Keep = KEEP,
    ) -> SotwClientTypeState:
        """A copy with the fields given changed."""
        return SotwClientTypeState(
            subscription=self.subscription if isinstance(subscription, Keep) else subscription,
            version_info=self.version_info if isinstance(version_info, Keep) else version_info,
            nonce=self.nonce if isinstance(nonce, Keep) else nonce,
            resources=self.resources if isinstance(resources, Keep) else resources,
            errors=self.errors if isinstance(errors, Keep) else errors,
            last_error=self.last_error if isinstance(last_error, Keep) else last_error,
            acks=self.acks if isinstance(acks, Keep) else acks,
            nacks=self.nacks if isinstance(nacks, Keep) else nacks,
        )

    # --- end generated ---


@mypyc_attr(allow_interpreted_subclasses=True)
class SotwClient:
    """The client side of a SotW ADS stream, as Envoy (or gRPC) drives one."""

    def __init__(
        self,
        *,
        node: Node,
        validate: Validator | None = None,
        node_on_first_request_only: bool = False,
    ) -> None:
        self.node = node
        self._validate = validate
        self._node_once = node_on_first_request_only
        self._node_sent = False
        self._types: dict[str, SotwClientTypeState] = {}

    def type_state(self, type_url: str) -> SotwClientTypeState | None:
        """The client's state for ``type_url``, if it ever watched it."""
        return self._types.get(type_url)

    def holds(self, type_url: str) -> Mapping[str, Resource]:
        """The resources of ``type_url`` the client accepted and still watches."""
        state = self._types.get(type_url)
        return state.resources if state is not None else {}

    def type_urls(self) -> list[str]:
        """Every type the client watches, in the order it first watched them."""
        return list(self._types)

    def errors(self, type_url: str) -> Mapping[str, ErrorDetail]:
        """The server's errors for watched names of ``type_url`` (``resource_errors``)."""
        state = self._types.get(type_url)
        return state.errors if state is not None else {}

    def watch(self, type_url: str, names: Iterable[str] | None) -> DiscoveryRequest:
        """Watch exactly ``names`` of ``type_url`` (``None``: legacy wildcard); return the
        request to send.

        Resources no longer watched are dropped at once. Raises
        :class:`~xdscore.LocalProtocolError` for ``None`` on a type that has no wildcard.
        """
        info = type_info(type_url)
        previous = self._types.get(type_url)
        listed = () if names is None else tuple(sorted(set(canonical_names(names))))
        if names is None and not info.wildcard_capable:
            raise LocalProtocolError(f"{info.short_name} cannot be watched with a wildcard")
        subscription = Subscription.sotw(
            previous.subscription if previous is not None else None,
            listed,
            wildcard_capable=info.wildcard_capable,
        )
        if previous is None:
            state = SotwClientTypeState(subscription=subscription)
        else:
            kept = {n: r for n, r in previous.resources.items() if subscription.wants(n)}
            state = previous.evolve(subscription=subscription, resources=kept)
        self._types[type_url] = state
        return self._request(type_url, state, state.version_info, listed)

    def receive(self, response: DiscoveryResponse) -> DiscoveryRequest:
        """Apply a response; return the ACK or NACK to send.

        The valid part of the response is applied even when it is NACKed (the version stays
        the last accepted one). Raises :class:`~xdscore.LocalProtocolError` for a type the
        client never watched; the client's state is then unchanged.
        """
        type_url = response.type_url
        state = self._types.get(type_url)
        if state is None:
            raise LocalProtocolError(f"response for {type_url!r}, which the client never watched")
        indexed = _index(response)
        by_name = indexed.by_name
        if indexed.error is not None:
            return self._reject(state, response, indexed.error)
        if state.subscription.empty:
            # Nothing is watched: keep the old version, as Envoy does.
            state = state.evolve(nonce=response.nonce)
            self._types[type_url] = state
            return self._request(type_url, state, state.version_info, None)
        subscription = state.subscription
        if subscription.wildcard or by_name.keys() <= subscription.names:
            wanted = by_name
        else:
            names = subscription.names
            wanted = {name: r for name, r in by_name.items() if name in names}
        invalid = self._invalid(type_url, wanted.values())
        if invalid and wanted is by_name:
            wanted = dict(wanted)  # (the index is shared)
        for name in invalid:
            # Keep what was held before (or nothing): the rest of the response still applies.
            old = state.resources.get(name)
            if old is None:
                del wanted[name]
            else:
                wanted[name] = old
        if indexed.name_only:
            wanted = {name: r for name, r in wanted.items() if not r.name_only}
        full_state = type_info(type_url).sotw_full_state
        if full_state or state.resources.keys() <= wanted.keys():
            resources = wanted
        else:
            resources = {**state.resources, **wanted}
        errors = _errors(state, response, resources, full_state)
        if invalid:
            state = state.evolve(resources=resources, errors=errors)
            return self._reject(state, response, "; ".join(invalid.values()))
        state = state.evolve(
            resources=resources,
            errors=errors,
            version_info=response.version_info,
            nonce=response.nonce,
            last_error=None,
            acks=state.acks + 1,
        )
        self._types[type_url] = state
        return self._request(type_url, state, state.version_info, None)

    def _reject(
        self, state: SotwClientTypeState, response: DiscoveryResponse, error: str
    ) -> DiscoveryRequest:
        detail = ErrorDetail(code=GrpcStatus.INTERNAL, message=error)
        state = state.evolve(nonce=response.nonce, last_error=detail, nacks=state.nacks + 1)
        self._types[response.type_url] = state
        return self._request(response.type_url, state, state.version_info, None, error=detail)

    def _invalid(self, type_url: str, resources: Iterable[Resource]) -> dict[str, str]:
        """Each resource the ``validate`` hook objects to, with its reason."""
        if self._validate is None:
            return {}
        found = {}
        for resource in resources:
            reason = self._validate(type_url, [resource])
            if reason is not None:
                found[resource.name] = reason
        return found

    def reconnect(self) -> list[DiscoveryRequest]:
        """The first requests of a new stream: every watched type with its last accepted
        version and no nonce (nonces do not survive a stream). Held resources are kept."""
        self._node_sent = False
        requests = []
        for type_url, state in self._types.items():
            state = state.evolve(nonce="")
            self._types[type_url] = state
            if state.subscription.empty:
                continue  # nothing wanted: an empty first request would mean legacy wildcard
            requests.append(self._request(type_url, state, state.version_info, None))
        return requests

    def _request(
        self,
        type_url: str,
        state: SotwClientTypeState,
        version_info: str,
        listed: tuple[str, ...] | None,
        *,
        error: ErrorDetail | None = None,
    ) -> DiscoveryRequest:
        if listed is None:
            listed = _listing(state.subscription)
        node = None if self._node_once and self._node_sent else self.node
        self._node_sent = True
        return DiscoveryRequest(
            type_url=type_url,
            version_info=version_info,
            resource_names=listed,
            response_nonce=state.nonce,
            error_detail=error,
            node=node,
        )


def _listing(subscription: Subscription) -> tuple[str, ...]:
    """The ``resource_names`` that ask for ``subscription``, in a stable order."""
    found = CLIENT_LISTINGS.get(subscription)
    if found is not None:
        return found
    names = sorted(subscription.names)
    if subscription.wildcard and not subscription.legacy:
        names.insert(0, WILDCARD)
    listed = tuple(names)
    return CLIENT_LISTINGS.put(subscription, listed, footprint(listed, subscription))


@attrs.frozen
class _Indexed:
    """A response's resources by name (read-only: shared), and what is wrong with them."""

    resources: tuple[Resource, ...]
    """Held, so that the ``id`` it is remembered by stays its own."""
    by_name: dict[str, Resource]
    error: str | None
    name_only: bool
    """Whether any resource is only a name."""


def _index(response: DiscoveryResponse) -> _Indexed:
    """The response's resources by name, and why the response as a whole must be rejected."""
    resources = response.resources
    type_url = response.type_url
    key = (id(resources), type_url)
    found = CLIENT_SOTW_RESPONSES.get(key)
    if isinstance(found, _Indexed) and found.resources is resources:
        return found
    names = [resource.name for resource in resources]
    by_name = dict(zip(names, resources, strict=True))
    error = None
    if len(by_name) != len(names):
        seen: set[str] = set()
        for name in names:
            if name in seen:
                error = f"duplicate resource name {name!r}"
                break
            seen.add(name)
    if error is None:
        strays = {resource.type_url for resource in resources} - {type_url}
        if strays:
            error = f"resource type {min(strays)} does not match response type {type_url}"
    name_only = any(resource.name_only for resource in resources)
    found = _Indexed(resources, by_name, error, name_only)
    size = footprint(found, skip=(Resource,)) + encoded_size(resources)
    CLIENT_SOTW_RESPONSES.put(key, found, size)
    return found


def _errors(
    state: SotwClientTypeState,
    response: DiscoveryResponse,
    resources: Mapping[str, Resource],
    full_state: bool,
) -> Mapping[str, ErrorDetail]:
    """The errors after ``response``: its own for watched names, plus (for per-resource
    types) the earlier ones of names still watched and still without a resource."""
    subscription = state.subscription
    kept = {} if full_state else dict(state.errors)
    kept.update(
        {
            error.name: ErrorDetail(code=error.code, message=error.message)
            for error in response.resource_errors
            if subscription.wants(error.name)
        }
    )
    return {
        name: detail
        for name, detail in kept.items()
        if name not in resources and subscription.wants(name)
    }
