"""A snapshot served through the mappings of the view before it, as a cache that keeps an
unchanged type's mapping serves it.

The view protocol promises that ``resources`` gives the same mapping object while a type is
unchanged; the SotW machine relies on it to leave such a type unlooked-at. A new `Snapshot`
builds new mappings for every type, so property runs that change the configuration wrap each
one in a `StableView`: a type whose resources are the same (by name, version and aliases) as
in the previous view is given as that view's mapping object, the rest as the snapshot's.
"""

from __future__ import annotations

from collections.abc import Mapping

from xdscore import Resource, Snapshot
from xdscore.protocol import Selection, Subscription


class StableView:
    """``snapshot`` with the mappings of ``previous`` for the types it did not change."""

    def __init__(self, snapshot: Snapshot, previous: StableView | None) -> None:
        self.snapshot = snapshot
        self._mappings: dict[str, Mapping[str, Resource]] = {}
        for type_url in snapshot.type_urls:
            mapping = snapshot.resources(type_url)
            assert mapping is not None
            before = previous.resources(type_url) if previous is not None else None
            self._mappings[type_url] = (
                before if before is not None and _same(before, mapping) else mapping
            )

    def resources(self, type_url: str) -> Mapping[str, Resource] | None:
        return self._mappings.get(type_url)

    def select(self, type_url: str, subscription: Subscription) -> Selection | None:
        return self.snapshot.select(type_url, subscription)

    def changed_since(
        self, type_url: str, previous: Mapping[str, Resource]
    ) -> frozenset[str] | None:
        if previous is self._mappings.get(type_url):
            return frozenset()
        return self.snapshot.changed_since(type_url, previous)


def stable(snapshot: Snapshot, previous: StableView | None) -> StableView:
    """The view of ``snapshot`` after ``previous`` (``previous`` itself for its own
    snapshot)."""
    if previous is not None and previous.snapshot is snapshot:
        return previous
    return StableView(snapshot, previous)


def _same(old: Mapping[str, Resource], new: Mapping[str, Resource]) -> bool:
    if old.keys() != new.keys():
        return False
    return all(
        old[name].version == resource.version and old[name].aliases == resource.aliases
        for name, resource in new.items()
    )
