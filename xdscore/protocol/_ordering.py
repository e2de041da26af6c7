"""Make-before-break on one aggregated stream, as a pure planner: send, wait or keep.

Envoy warms a new cluster until its endpoints arrive and a new listener until its routes
arrive, but it does not warm routes: a route that names a cluster the proxy does not have
yet sends traffic into a 503, and so does removing a cluster an accepted route still names.
Only on ADS, where one stream carries every type, can the server prevent both. The rules,
applied by both server machines whenever they build a response on ADS:

1. Types go out in make-before-break order (the ``rank`` of the type registry:
   SDS, CDS, EDS, LDS, ECDS, RDS, SRDS, VHDS, RTDS).
2. A new or changed resource **waits** while it refers to a lower-ranked resource that the
   client wants (its subscription for that type covers the name) but does not hold yet, or
   holds without the higher-ranked resources it warms on (a cluster without its
   endpoints). Only what exists on the server counts: a reference to something the server
   does not have can never be satisfied, so it holds nothing back. References to
   higher-ranked types (a cluster's endpoints, a listener's routes) are what Envoy warms
   on, and never hold anything back.
3. A resource the client holds is **kept** (not removed, and in SotW still listed in full
   state responses) while anything the client holds refers to it. It goes once the client
   has acknowledged the resources that stopped referring to it; if it rejects them, the
   old ones, and what they refer to, stay.

"Holds" means acknowledged, and not being taken away by a response still in flight: a
reference only counts as satisfied once the client surely has its target. Conversely a
removal waits while anything the client holds *or is being sent* refers to it. What a
client NACKs is never counted as held. Clients that subscribe by name to what they
discover (proxyless gRPC) are not held back by names they have not asked for yet, so
ordering cannot deadlock them.

The machines describe what their client holds as immutable `Holding` values, one
per type, and ask `plan` about what is due; the planner never calls back into them.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Final, final

import attrs

from ..wire._resource import Resource
from ..wire._typeurls import type_info
from ._record import Record
from ._subscription import Subscription
from ._view import ResourceView

__all__ = ["Holding", "Holdings", "Plan", "blocked", "plan", "referenced", "warming"]

_NOTHING: Mapping[str, Resource] = MappingProxyType({})


@final
class Holding(Record):
    """What one client wants and holds of one type, at one moment.

    ``held``: acknowledged resources whose content is known; ``arriving``: what the
    response in flight carries; ``surviving``: when the response in flight replaces the
    whole set (SotW full state), the names it carries (every other held name is going
    away); ``removing``: names the response in flight removes (Delta)."""

    # record fields:
    #     subscription: Subscription
    #     held: Mapping[str, Resource] = _NOTHING
    #     *
    #     arriving: Collection[Resource] = ()
    #     surviving: Container[str] | None = None
    #     removing: Container[str] = frozenset()
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("subscription", "held", "arriving", "surviving", "removing")
    __slots__ = _fields

    def __init__(
        self,
        subscription: Subscription,
        held: Mapping[str, Resource] = _NOTHING,
        *,
        arriving: Collection[Resource] = (),
        surviving: Container[str] | None = None,
        removing: Container[str] = frozenset(),
    ) -> None:
        self.subscription: Final = subscription
        self.held: Final = held
        self.arriving: Final = arriving
        self.surviving: Final = surviving
        self.removing: Final = removing

    # --- end generated ---

    def surely(self, name: str) -> Resource | None:
        """The resource ``name`` if the client holds it and nothing in flight takes it away."""
        resource = self.held.get(name)
        if resource is None or name in self.removing:
            return None
        if self.surviving is not None and name not in self.surviving:
            return None
        return resource

    def maybe(self) -> Iterator[Resource]:
        """Every version the client holds or is being sent."""
        yield from self.held.values()
        yield from self.arriving


Holdings = Mapping[str, Holding]
"""A client's holdings by type URL; a type it never asked for is absent."""


@attrs.frozen
class Plan:
    """What of a due change may go now: everything but ``wait`` and ``keep``."""

    wait: frozenset[str] = frozenset()
    """New or changed resources held back: the client lacks what they refer to."""
    keep: frozenset[str] = frozenset()
    """Removals held back: something the client holds or is being sent refers to them."""

    @property
    def deferred(self) -> frozenset[str]:
        """Every name this plan holds back."""
        return self.wait | self.keep


_SEND_ALL = Plan()


def plan(
    type_url: str,
    changed: Iterable[Resource],
    removals: Collection[str],
    holdings: Holdings,
    view: ResourceView,
) -> Plan:
    """Which of ``changed`` (new or changed for the client) and ``removals`` must wait."""
    known = _Known(view)
    wait = frozenset(
        r.name for r in changed if r.earlier_references and _blocked(r, holdings, known)
    )
    keep: frozenset[str] = frozenset()
    if removals:
        kept = referenced(holdings.values())
        keep = frozenset(name for name in removals if (type_url, name) in kept)
    if not wait and not keep:
        return _SEND_ALL
    return Plan(wait=wait, keep=keep)


def _rank(type_url: str) -> int:
    return type_info(type_url).rank


def blocked(resource: Resource, holdings: Holdings, view: ResourceView) -> bool:
    """True while sending ``resource`` could point the client at something it lacks."""
    return _blocked(resource, holdings, _Known(view))


@final
class _Known:
    """What the view holds, each type's mapping asked of it once (a plan asks about many
    references to the same few types: a route to each of its clusters)."""

    __slots__ = ("_by_type", "_view")

    def __init__(self, view: ResourceView) -> None:
        self._view = view
        self._by_type: dict[str, Mapping[str, Resource] | None] = {}

    def exists(self, type_url: str, name: str) -> bool:
        by_type = self._by_type
        if type_url in by_type:
            resources = by_type[type_url]
        else:
            resources = by_type[type_url] = self._view.resources(type_url)
        return resources is not None and name in resources


def _blocked(resource: Resource, holdings: Holdings, known: _Known) -> bool:
    for ref in resource.earlier_references:
        if not known.exists(ref.type_url, ref.name):
            continue
        holding = holdings.get(ref.type_url)
        if holding is None or not holding.subscription.wants(ref.name):
            continue
        target = holding.surely(ref.name)
        if target is None or not _warm(target, holdings, known):
            return True
    return False


def _warm(resource: Resource, holdings: Holdings, known: _Known) -> bool:
    """Whether the client holds everything ``resource`` warms on (a cluster's endpoints)."""
    rank = _rank(resource.type_url)
    for ref in resource.references:
        holding = holdings.get(ref.type_url)
        if _rank(ref.type_url) <= rank or holding is None:
            continue
        if holding.surely(ref.name) is None and known.exists(ref.type_url, ref.name):
            return False
    return True


def referenced(holdings: Iterable[Holding]) -> set[tuple[str, str]]:
    """Every (type URL, name) that something held, or being sent, refers to."""
    found: set[tuple[str, str]] = set()
    for holding in holdings:
        for resource in holding.maybe():
            found.update((ref.type_url, ref.name) for ref in resource.references)
    return found


def warming(type_url: str, sent: Sequence[Resource]) -> tuple[str, frozenset[str]] | None:
    """After ``sent`` of ``type_url`` went out: the type they warm on and the names they
    wait for there (a cluster's endpoints), which the server answers again; else ``None``.

    Streams that were sent the same response (the very same ``sent``) get the answer
    worked out for the first of them: the last one is kept per type, holding that one
    ``sent``."""
    target = type_info(type_url).warms_on
    if target is None:
        return None
    last = _LAST_WARMING.get(type_url)
    if last is not None and last[0] is sent:
        return target, last[1]
    names = frozenset(
        ref.name for resource in sent for ref in resource.references if ref.type_url == target
    )
    _LAST_WARMING[type_url] = (sent, names)
    return target, names


_LAST_WARMING: dict[str, tuple[Sequence[Resource], frozenset[str]]] = {}
