"""Immutable snapshots: a complete set of resources per type for a group of clients."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ..protocol._subscription import EVERYTHING, Subscription
from ..protocol._view import Selection
from ..wire._messages import make_resource
from ..wire._resource import Resource
from ..wire._typeurls import type_info
from ._selections import SelectionMemo

__all__ = ["Inconsistency", "Snapshot", "SnapshotError"]


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
    :class:`~xdscore.Resource` values, protobuf messages or betterproto2 messages.
    Selections are memoised, so every stream with the same subscription shares one encoded
    response body.
    """

    __slots__ = ("__weakref__", "_by_type", "_memo")

    def __init__(self, resources: Iterable[Resource | Any] = (), *, types: Iterable[str] = ()):
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

    @property
    def type_urls(self) -> frozenset[str]:
        """The types this snapshot is authoritative for."""
        return frozenset(self._by_type)

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
