"""What the state machines read a cache through: the view protocol and selections.

A [`Selection`][xdscore.protocol.Selection] is the set of resources of one type that one
subscription asks for, with a content version over (name, version) pairs and the encoded
``resources`` field of a SotW response, built once per distinct selection and shared by every stream
that asks the same.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import Protocol

import attrs

from ..wire._framing import string_field
from ..wire._names import collection_of
from ..wire._resource import VERSION_BYTES, Resource
from ._subscription import Subscription

__all__ = ["ResourceView", "Selection"]


@attrs.frozen(kw_only=True)
class Selection:
    """The resources of one type a subscription selects, keyed by name in name order."""

    type_url: str
    resources: Mapping[str, Resource] = attrs.field(
        eq=False, repr=lambda r: f"<{len(r)} resources>"
    )
    version: str = attrs.field()

    @version.default
    def _hash_contents(self) -> str:
        digest = hashlib.blake2b(self.type_url.encode(), digest_size=VERSION_BYTES)
        for name, resource in self.resources.items():
            digest.update(b"\x00" + name.encode() + b"\x01" + resource.version.encode())
        return digest.hexdigest()

    @classmethod
    def of(cls, type_url: str, resources: Mapping[str, Resource]) -> Selection:
        """A selection of ``resources`` (any order) of type ``type_url``."""
        ordered = {name: resources[name] for name in sorted(resources)}
        return cls(type_url=type_url, resources=ordered)

    def __len__(self) -> int:
        return len(self.resources)

    @functools.cached_property
    def has_lower_references(self) -> bool:
        """Whether any resource refers to a type sent before its own (see ``_ordering``)."""
        return any(resource.earlier_references for resource in self.resources.values())

    @functools.cached_property
    def collections(self) -> Mapping[str, tuple[str, ...]]:
        """The names of this selection by the glob collection each is in (see
        `collection_of`); built on first use, shared by streams."""
        index: dict[str, list[str]] = {}
        for name in self.resources:
            collection = collection_of(name)
            if collection is not None:
                index.setdefault(collection, []).append(name)
        return {collection: tuple(names) for collection, names in index.items()}

    @functools.cached_property
    def sotw_body(self) -> bytes:
        """The ``resources`` and ``type_url`` fields of a SotW response, shared by all streams."""
        entries = b"".join(resource.sotw_entry for resource in self.resources.values())
        return entries + string_field(4, self.type_url)

    @functools.cached_property
    def sotw_wrapped_body(self) -> bytes:
        """[`sotw_body`][xdscore.protocol.Selection.sotw_body] with every resource that has a TTL
        wrapped in ``envoy.service.discovery.v3.Resource`` (carrying the TTL), for clients that read
        wrapped entries and TTLs; shared by all such streams."""
        if self.shortest_ttl is None:
            return self.sotw_body
        entries = b"".join(
            resource.sotw_entry if resource.ttl is None else resource.sotw_wrapped_entry
            for resource in self.resources.values()
        )
        return entries + string_field(4, self.type_url)

    @functools.cached_property
    def shortest_ttl(self) -> float | None:
        """The smallest TTL of the selected resources (``None``: none has a TTL)."""
        ttls = [r.ttl for r in self.resources.values() if r.ttl is not None]
        return min(ttls) if ttls else None


class ResourceView(Protocol):
    """What the state machines read from a cache: immutable for as long as it is held.

    Both methods return ``None`` for a type the view is not authoritative for: the machines
    then send nothing of that type (rather than an empty state that would delete what the
    client has). ``select`` should return the same [`Selection`][xdscore.protocol.Selection] object
    for equal arguments on the same view, so that every stream with the same subscription shares one
    encoded body; ``resources`` should return the same mapping object while the type is
    unchanged, which lets Delta streams skip unchanged types in O(1) and SotW streams leave
    them unselected; a view that cannot keep it costs them only a look.
    """

    def select(self, type_url: str, subscription: Subscription) -> Selection | None:
        """The resources of ``type_url`` that ``subscription`` asks for."""
        ...

    def resources(self, type_url: str) -> Mapping[str, Resource] | None:
        """Every resource of ``type_url``, by name."""
        ...

    def changed_since(
        self, type_url: str, previous: Mapping[str, Resource]
    ) -> frozenset[str] | None:
        """Names of ``type_url`` added, changed or removed since ``previous``, a mapping an
        earlier view's ``resources`` returned; ``None`` when the view cannot tell."""
        ...
