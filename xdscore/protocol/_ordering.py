"""Make-before-break on one aggregated stream: what may be sent now, and what must wait.

Envoy warms a new cluster until its endpoints arrive and a new listener until its routes
arrive, but it does not warm routes: a route that names a cluster the proxy does not have
yet sends traffic into a 503, and so does removing a cluster an accepted route still names.
Only on ADS, where one stream carries every type, can the server prevent both. The rules,
applied by both state machines whenever they build a response on ADS:

1. Types go out in make-before-break order (the ``rank`` of :mod:`xdscore._typeurls`:
   SDS, CDS, EDS, LDS, ECDS, RDS, SRDS, VHDS, RTDS).
2. A new or changed resource is **held back** while it refers to a lower-ranked resource
   that the client wants (its subscription for that type covers the name) but does not
   hold yet, or holds without the higher-ranked resources it warms on (a cluster without
   its endpoints). Only what exists on the server counts: a reference to something the
   server does not have can never be satisfied, so it holds nothing back. References to
   higher-ranked types (a cluster's endpoints, a listener's routes) are what Envoy warms
   on, and never hold anything back.
3. A resource the client holds is **kept** (not removed, and in SotW still listed in full
   state responses) while anything the client holds refers to it. It goes once the client
   has acknowledged the resources that stopped referring to it; if it rejects them, the
   old ones, and what they refer to, stay.

"Holds" means acknowledged, and not being taken away by a response still in flight: a
reference only counts as satisfied once the client surely has its target. Conversely a
removal waits while anything the client holds *or is being sent* refers to it. What a
client NACKs is never counted as held. Clients that subscribe by
name to what they discover (proxyless gRPC) are not held back by names they have not asked
for yet, so ordering cannot deadlock them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from ..wire._resource import Resource
from ..wire._typeurls import type_info
from ._subscription import Subscription
from ._view import ResourceView

__all__ = ["ClientHoldings", "blocked", "referenced"]


class ClientHoldings(Protocol):
    """What one aggregated stream's client wants and holds, per type."""

    def subscription(self, type_url: str) -> Subscription | None:
        """The client's subscription for ``type_url`` (``None``: never asked for it)."""
        ...

    def holds(self, type_url: str) -> Mapping[str, Resource]:
        """What the client surely holds of ``type_url``: acknowledged, and no response in
        flight takes it away."""
        ...

    def may_hold(self, type_url: str) -> Iterable[Resource]:
        """Every version of ``type_url`` resources the client holds or is being sent."""
        ...


def _rank(type_url: str) -> int:
    return type_info(type_url).rank


def blocked(resource: Resource, client: ClientHoldings, view: ResourceView) -> bool:
    """True while sending ``resource`` could point the client at something it lacks."""
    rank = _rank(resource.type_url)
    for ref in resource.references:
        if _rank(ref.type_url) >= rank or not _exists(view, ref.type_url, ref.name):
            continue
        wanted = client.subscription(ref.type_url)
        if wanted is None or not wanted.wants(ref.name):
            continue
        target = client.holds(ref.type_url).get(ref.name)
        if target is None or not _warm(target, client, view):
            return True
    return False


def _exists(view: ResourceView, type_url: str, name: str) -> bool:
    resources = view.resources(type_url)
    return resources is not None and name in resources


def _warm(resource: Resource, client: ClientHoldings, view: ResourceView) -> bool:
    """Whether the client holds everything ``resource`` warms on (a cluster's endpoints)."""
    rank = _rank(resource.type_url)
    for ref in resource.references:
        if _rank(ref.type_url) <= rank or client.subscription(ref.type_url) is None:
            continue
        if ref.name not in client.holds(ref.type_url) and _exists(view, ref.type_url, ref.name):
            return False
    return True


def referenced(client: ClientHoldings, type_urls: Iterable[str]) -> set[tuple[str, str]]:
    """Every (type URL, name) that a resource of ``type_urls`` the client holds, or is being
    sent, refers to."""
    found: set[tuple[str, str]] = set()
    for type_url in type_urls:
        for resource in client.may_hold(type_url):
            found.update((ref.type_url, ref.name) for ref in resource.references)
    return found
