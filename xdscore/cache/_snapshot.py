"""Immutable snapshots: a complete set of resources per type for a group of clients."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ..protocol._subscription import EVERYTHING, Subscription
from ..protocol._view import Selection
from ..wire._messages import make_resource
from ..wire._resource import VERSION_BYTES, Resource
from ..wire._typeurls import type_info
from ._selections import SelectionMemo

__all__ = ["REVISION_BYTES", "Inconsistency", "Snapshot", "SnapshotError", "content_revision"]

REVISION_BYTES = 8
"""Digest size of a revision id (16 hex digits)."""

Provenance = Mapping[tuple[str, str], str] | str | None
"""Where a snapshot's resources came from: by (type URL, name), or one label for all."""


class SnapshotError(ValueError):
    """A snapshot could not be built from what it was given."""


@attrs.frozen(kw_only=True)
class Inconsistency:
    """A resource refers to another that the snapshot does not hold."""

    type_url: str
    name: str
    missing_type_url: str
    missing_name: str
    field: str

    def __str__(self) -> str:
        return (
            f"{type_info(self.type_url).short_name} {self.name!r} refers to "
            f"{type_info(self.missing_type_url).short_name} {self.missing_name!r} "
            f"({self.field}), which the snapshot does not contain"
        )


class Snapshot:
    """An immutable set of resources, by type and name, served as one consistent state.

    The snapshot is authoritative for the types it holds resources of and for those listed
    in ``types``: list a type to serve "none of these" (an empty LDS deletes every listener);
    a type neither held nor listed is not answered at all. Resources may be
    [`Resource`][xdscore.Resource] values, protobuf messages or betterproto2 messages.
    Selections are memoised, so every stream with the same subscription shares one encoded
    response body.

    ``provenance`` says where the resources came from, for status pages, logs and the NACK
    report (a file and document, an etcd key, a label of yours): by ``(type_url, name)``, or
    one string for every resource. ``label`` names the whole state (``"etcd revision 7
    under /mesh"``), and ``store_revision`` is the revision of the store it was read from
    (an etcd revision), when there is one. None of them is part of the content: two
    snapshots of the same resources have the same `revision` whatever they say.
    """

    __slots__ = (
        "__weakref__",
        "_by_type",
        "_memo",
        "_provenance",
        "_revision",
        "label",
        "store_revision",
    )

    def __init__(
        self,
        resources: Iterable[Resource | Any] = (),
        *,
        types: Iterable[str] = (),
        provenance: Provenance = None,
        label: str = "",
        store_revision: int | None = None,
    ):
        by_type: dict[str, dict[str, Resource]] = {type_url: {} for type_url in types}
        for item in resources:
            resource = item if isinstance(item, Resource) else make_resource(item)
            names = by_type.setdefault(resource.type_url, {})
            if resource.name in names:
                raise SnapshotError(
                    f"duplicate {type_info(resource.type_url).short_name} resource "
                    f"{resource.name!r}"
                )
            names[resource.name] = resource
        self._by_type: dict[str, Mapping[str, Resource]] = {
            type_url: MappingProxyType(names) for type_url, names in by_type.items()
        }
        self._memo = SelectionMemo()
        self._provenance = provenance
        self._revision: str | None = None
        self.label = label
        """What this state is, in a few words (``""``: nothing said)."""
        self.store_revision = store_revision
        """The revision of the store it was read from (an etcd revision), if any."""

    @property
    def revision(self) -> str:
        """The id of this state: a hash of the content versions of every type it is
        authoritative for (see `content_revision`), the same on every replica that
        holds the same resources. Computed once, on first use."""
        if self._revision is None:
            self._revision = content_revision(self._by_type)
        return self._revision

    def source_of(self, type_url: str, name: str) -> str | None:
        """Where the resource ``name`` of ``type_url`` came from, if the snapshot was told."""
        provenance = self._provenance
        if provenance is None or isinstance(provenance, str):
            return provenance
        return provenance.get((type_url, name))

    @property
    def type_urls(self) -> frozenset[str]:
        """The types this snapshot is authoritative for."""
        return frozenset(self._by_type)

    def _share(self, previous: Snapshot, type_urls: Iterable[str]) -> None:
        """Hold each of ``type_urls`` whose resources are the very ones ``previous`` holds
        (the same objects, or the same version, aliases, TTL and bytes) in ``previous``'s
        mapping: the view protocol's same mapping for an unchanged type, which lets SotW
        streams leave the type unselected and Delta streams skip it in O(1). Nothing a
        client can be sent changes."""
        mine, theirs = self._by_type, previous._by_type
        for type_url in type_urls:
            new, old = mine.get(type_url), theirs.get(type_url)
            if new is None or old is None or new is old:
                continue
            if same_resources(old, new, exact=True):
                mine[type_url] = old

    def resources(self, type_url: str) -> Mapping[str, Resource] | None:
        """Every resource of ``type_url``, by name; ``None`` if the snapshot lacks the type."""
        return self._by_type.get(type_url)

    def __iter__(self) -> Iterator[Resource]:
        for names in self._by_type.values():
            yield from names.values()

    def __len__(self) -> int:
        return sum(len(names) for names in self._by_type.values())

    def __repr__(self) -> str:
        counts = ", ".join(
            f"{type_info(url).short_name}={len(names)}"
            for url, names in self._by_type.items()
            if names
        )
        return f"<Snapshot {counts or 'empty'}>"

    def changed_since(
        self, type_url: str, previous: Mapping[str, Resource]
    ) -> frozenset[str] | None:
        """Nothing if ``previous`` is this snapshot's own mapping, else unknown (``None``)."""
        return frozenset() if previous is self._by_type.get(type_url) else None

    def select(self, type_url: str, subscription: Subscription) -> Selection | None:
        """The resources of ``type_url`` that ``subscription`` selects (memoised)."""
        resources = self._by_type.get(type_url)
        if resources is None:
            return None
        return self._memo.select(type_url, resources, subscription)

    def version(self, type_url: str) -> str:
        """The content version of every resource of ``type_url`` ("" if it lacks the type)."""
        selection = self.select(type_url, EVERYTHING)
        return selection.version if selection is not None else ""

    def inconsistencies(self) -> list[Inconsistency]:
        """References to resources of a declared type that the snapshot does not hold."""
        found: list[Inconsistency] = []
        for type_url, names in self._by_type.items():
            for resource in names.values():
                for ref in resource.references:
                    target = self._by_type.get(ref.type_url)
                    if target is not None and ref.name not in target:
                        found.append(
                            Inconsistency(
                                type_url=type_url,
                                name=resource.name,
                                missing_type_url=ref.type_url,
                                missing_name=ref.name,
                                field=ref.field,
                            )
                        )
        return found


def same_resources(
    old: Mapping[str, Resource], new: Mapping[str, Resource], *, exact: bool = False
) -> bool:
    """Whether two mappings hold the same resources: the same names, versions and aliases
    (a content version says the rest); ``exact``: the same TTLs and bytes too, whatever the
    versions say."""
    if len(old) != len(new):
        return False
    for name, resource in new.items():
        before = old.get(name)
        if before is resource:
            continue
        if (
            before is None
            or before.version != resource.version
            or before.aliases != resource.aliases
            or (exact and (before.ttl != resource.ttl or before.body != resource.body))
        ):
            return False
    return True


def content_revision(by_type: Mapping[str, Mapping[str, Resource]]) -> str:
    """A revision id for resources by type URL: a hash of each type's content version (the
    version a `Selection` of all of them has, over its names and
    versions), in type URL order. O(resources), and nothing is kept: no selection is made."""
    digest = hashlib.blake2b(digest_size=REVISION_BYTES)
    for type_url in sorted(by_type):
        resources = by_type[type_url]
        version = hashlib.blake2b(type_url.encode(), digest_size=VERSION_BYTES)
        for name in sorted(resources):
            version.update(b"\x00" + name.encode() + b"\x01" + resources[name].version.encode())
        digest.update(type_url.encode() + b"\x00" + version.hexdigest().encode() + b"\x00")
    return digest.hexdigest()
