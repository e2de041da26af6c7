"""The checks the SotW and Delta stateful properties both make, over what one step did.

Each function is named after the clause of XDS_INVARIANTS.md it checks (``invNN_...``), as
the methods of the two state machines are; where the two protocols number the same rule
differently (SotW nonces are clause 5, Delta nonces clause 24) each name is defined here
and both run the same check. The steps are the suites' own records: these functions only
read the fields named by the protocols below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import attrs

from xdscore import Resource, ResponseAcked, ResponseNacked
from xdscore.protocol import (
    DeltaDiscoveryRequest,
    DeltaServer,
    DiscoveryRequest,
    Event,
    NodeIdentified,
    SotwServer,
    SubscriptionChanged,
)
from xdscore.protocol._ordering import blocked, referenced
from xdscore.protocol._view import ResourceView
from xdscore.wire import Node
from xdscore.wire._records import DeltaDiscoveryResponse, DiscoveryResponse

from ..factories import short
from ._model import Want

__all__ = [
    "Ordering",
    "assert_holds_the_subscribed_snapshot",
    "inv01_node_identified_on_the_first_request_only",
    "inv04_resource_type_urls_equal_the_response_type_url",
    "inv05_nonces_unique_per_stream",
    "inv06_at_most_one_unacked_response_per_type",
    "inv10_ack_reported",
    "inv11_nack_reported",
    "inv15_inv17_subscription_changes_reported",
    "inv17_inv32_subscription_changes_reported",
    "inv17_server_subscription_equals_the_model",
    "inv22_no_duplicate_names_in_a_response",
    "inv24_nonces_present_and_unique_per_stream",
    "inv26_server_subscription_equals_the_model",
    "not_current_or_not_wanted",
    "ordering",
]


# -- what the checks read of the suites' steps ---------------------------------------------


class RequestStep(Protocol):
    """A request the server received in this step, and what the model expects of it."""

    @property
    def request(self) -> DiscoveryRequest | DeltaDiscoveryRequest: ...

    @property
    def events(self) -> tuple[Event, ...]: ...

    @property
    def first_of_stream(self) -> bool: ...


class Expecting(Protocol):
    @property
    def changed_to(self) -> Want | None: ...


class ExpectingStep(RequestStep, Protocol):
    @property
    def expect(self) -> Expecting: ...


class TypeModel(Protocol):
    """The model of one type on the stream, as it was before a response."""

    @property
    def want(self) -> Want: ...

    @property
    def unanswered(self) -> str | None: ...


class ResponseStep(Protocol):
    """A response the server sent in this step."""

    @property
    def response(self) -> DiscoveryResponse | DeltaDiscoveryResponse: ...

    @property
    def before(self) -> TypeModel: ...

    @property
    def duplicate_nonce(self) -> bool: ...


# -- requests ------------------------------------------------------------------------------


def inv01_node_identified_on_the_first_request_only(
    steps: Iterable[RequestStep], node: Node
) -> None:
    """Inv. 1: the first request of a stream identifies the node, no later one does."""
    for step in steps:
        identified = [e for e in step.events if isinstance(e, NodeIdentified)]
        assert len(identified) == int(step.first_of_stream), (step.request, step.events)
        if identified:
            assert identified[0].node == node, identified


def inv10_ack_reported(
    request: DiscoveryRequest | DeltaDiscoveryRequest, events: Sequence[Event], acks: str | None
) -> None:
    """Inv. 10: a request that ACKs version ``acks`` (by the model) is reported as exactly
    that ACK; any other request as none."""
    acked = [e for e in events if isinstance(e, ResponseAcked)]
    if acks is None:
        assert not acked, f"{request} is no ACK, yet {acked}"
        return
    expected = ResponseAcked(
        type_url=request.type_url, version_info=acks, nonce=request.response_nonce
    )
    assert acked == [expected], (request, events)


def inv11_nack_reported(
    request: DiscoveryRequest | DeltaDiscoveryRequest, events: Sequence[Event], nacks: str | None
) -> ResponseNacked | None:
    """Inv. 11: a request that NACKs version ``nacks`` (by the model) is reported as one NACK
    of that version, with the request's nonce and error; any other request as none."""
    nacked = [e for e in events if isinstance(e, ResponseNacked)]
    if nacks is None:
        assert not nacked, f"{request} is no NACK, yet {nacked}"
        return None
    assert len(nacked) == 1, (request, events)
    assert nacked[0].rejected == nacks, (request, nacked)
    assert nacked[0].nonce == request.response_nonce, (request, nacked)
    assert nacked[0].error == request.error_detail, (request, nacked)
    return nacked[0]


def _subscription_changes_reported(steps: Iterable[ExpectingStep]) -> None:
    for step in steps:
        changes = [e for e in step.events if isinstance(e, SubscriptionChanged)]
        expected = step.expect.changed_to
        if expected is None:
            assert not changes, f"{step.request} changed nothing, yet {changes}"
            continue
        assert len(changes) == 1, (
            f"{step.request} changes the subscription to {expected}; "
            f"the server reported {step.events}"
        )
        assert Want.of(changes[0].subscription) == expected, (
            f"{step.request} means {expected}, the event says {changes[0].subscription}"
        )


def inv15_inv17_subscription_changes_reported(steps: Iterable[ExpectingStep]) -> None:
    """SotW inv. 15-17: each request that changes what the client wants, by the spec's rules
    (the model's), is reported as exactly that change; no other request is."""
    _subscription_changes_reported(steps)


def inv17_inv32_subscription_changes_reported(steps: Iterable[ExpectingStep]) -> None:
    """Delta inv. 17 and 32: the same as :func:`inv15_inv17_subscription_changes_reported`,
    by the Delta rules (legacy wildcard, ``*`` subscribed and unsubscribed)."""
    _subscription_changes_reported(steps)


# -- responses -----------------------------------------------------------------------------


def inv04_resource_type_urls_equal_the_response_type_url(steps: Iterable[ResponseStep]) -> None:
    """Inv. 4: every resource of a response is of the response's type."""
    for step in steps:
        for resource in step.response.resources:
            assert resource.type_url == step.response.type_url, step.response


def inv05_nonces_unique_per_stream(steps: Iterable[ResponseStep]) -> None:
    """Inv. 5: every response has a nonce, never sent before on its stream."""
    for step in steps:
        assert step.response.nonce, f"a response without a nonce: {step.response}"
        assert not step.duplicate_nonce, f"nonce {step.response.nonce!r} sent twice"


def inv24_nonces_present_and_unique_per_stream(steps: Iterable[ResponseStep]) -> None:
    """Inv. 24: the Delta form of :func:`inv05_nonces_unique_per_stream`."""
    inv05_nonces_unique_per_stream(steps)


def inv06_at_most_one_unacked_response_per_type(steps: Iterable[ResponseStep]) -> None:
    """Inv. 6: nothing of a type is sent while its last response awaits the ACK/NACK."""
    for step in steps:
        assert step.before.unanswered is None, (
            f"{short(step.response.type_url)} response {step.response.nonce} sent while "
            f"{step.before.unanswered} was still unanswered"
        )


def inv22_no_duplicate_names_in_a_response(steps: Iterable[ResponseStep]) -> None:
    """Inv. 22: no name twice among a response's resources."""
    for step in steps:
        names = [resource.name for resource in step.response.resources]
        assert len(names) == len(set(names)), f"duplicate names in {names}"


def not_current_or_not_wanted(
    sent: Iterable[Resource], want: Want, current: Mapping[str, Resource]
) -> dict[str, str]:
    """The resources of ``sent`` that are not at the view's current version or that ``want``
    does not ask for (name -> version sent): what only make-before-break may send."""
    return {
        resource.name: resource.version
        for resource in sent
        if not want.wants(resource.name)
        or current.get(resource.name) is None
        or current[resource.name].version != resource.version
    }


@attrs.frozen
class Ordering:
    """What make-before-break may do to one type right now (see ``xdscore._ordering``)."""

    held_back: frozenset[str]
    """Current names it may hold back: sending them could point the client at something it
    does not hold yet (``blocked``)."""
    kept: frozenset[str]
    """Names something the client holds, or is being sent, refers to (``referenced``): the
    server may keep them although they are gone or no longer wanted."""


def ordering(server: SotwServer | DeltaServer, view: ResourceView, type_url: str) -> Ordering:
    """The :class:`Ordering` of ``type_url``, from ``server.holdings()`` and ``view``."""
    holdings = server.holdings()
    current = view.resources(type_url) or {}
    held_back = {name for name, r in current.items() if blocked(r, holdings, view)}
    kept = {name for t, name in referenced(holdings.values()) if t == type_url}
    return Ordering(frozenset(held_back), frozenset(kept))


# -- the whole stream ----------------------------------------------------------------------


def _server_subscription_equals_the_model(
    server: SotwServer | DeltaServer, types: Mapping[str, TypeModel]
) -> None:
    for type_url, model in types.items():
        subscription = server.subscription(type_url)
        assert subscription is not None, f"the server forgot {short(type_url)}"
        assert Want.of(subscription) == model.want, (
            f"{short(type_url)}: the requests mean {model.want}, "
            f"the server has {Want.of(subscription)}"
        )


def inv17_server_subscription_equals_the_model(
    server: SotwServer | DeltaServer, types: Mapping[str, TypeModel]
) -> None:
    """SotW inv. 15-17: the server's subscription of every type is what the requests mean."""
    _server_subscription_equals_the_model(server, types)


def inv26_server_subscription_equals_the_model(
    server: SotwServer | DeltaServer, types: Mapping[str, TypeModel]
) -> None:
    """Delta inv. 26 (and 17, 32): as :func:`inv17_server_subscription_equals_the_model`,
    although some subscription changes echoed stale nonces."""
    _server_subscription_equals_the_model(server, types)


def assert_holds_the_subscribed_snapshot(
    type_url: str,
    holds: Mapping[str, str],
    current: Mapping[str, Resource],
    wants: Callable[[str], bool],
    *,
    described: str,
    exact: bool = True,
    excused: Iterable[str] = (),
) -> None:
    """After settling: the client ``holds`` (name -> version) every resource of ``current``
    it ``wants``, at its current version, and nothing else; or, not ``exact``, it may also
    keep wanted names the view deleted. ``excused`` names may be missing."""
    expected = {name: r.version for name, r in current.items() if wants(name)}
    for name in excused:
        expected.pop(name, None)
    if exact:
        assert holds == expected, (
            f"{short(type_url)}: client {described} holds {holds}, the snapshot says {expected}"
        )
        return
    for name, version in holds.items():
        assert wants(name), f"{short(type_url)}: holds unwatched {name!r}"
        if name in current:
            assert version == expected[name], f"{short(type_url)} {name!r} is stale"
    missing = expected.keys() - holds.keys()
    assert not missing, f"{short(type_url)}: client {described} lacks {sorted(missing)}"
