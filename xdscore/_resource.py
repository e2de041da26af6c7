"""Immutable resources and selections, encoded exactly once.

A :class:`Resource` is one named xDS resource: its encoded message and a version that is a
hash of those bytes, so every replica and every restart agrees on it. The protobuf framing a
response needs around it (the ``Any`` and the Delta ``Resource`` wrapper) is built once per
resource, on first use, and then shared by every stream.

A :class:`Selection` is the set of resources of one type that one subscription asks for,
with a content version over (name, version) pairs and the encoded ``resources`` field of a
SotW response, built once per distinct selection.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping

import attrs

from ._subscription import Subscription
from ._typeurls import type_info
from .wire._framing import bytes_field, string_field
from .wire._references import Reference, references

__all__ = ["Resource", "Selection", "content_version"]

_VERSION_BYTES = 12


def content_version(payload: bytes) -> str:
    """A short, stable hash of ``payload`` used as a version string."""
    return hashlib.blake2b(payload, digest_size=_VERSION_BYTES).hexdigest()


@attrs.frozen(kw_only=True)
class Resource:
    """One named xDS resource of type ``type_url``, with its encoded message ``body``."""

    type_url: str
    name: str
    body: bytes = attrs.field(repr=False, eq=False)
    version: str = attrs.field()
    aliases: tuple[str, ...] = ()
    message: object = attrs.field(default=None, eq=False, repr=False)
    """The typed message the resource was built from, if any (never used on a hot path)."""

    @version.default
    def _hash_body(self) -> str:
        return content_version(self.body)

    @functools.cached_property
    def any_bytes(self) -> bytes:
        """The encoded ``google.protobuf.Any`` holding the resource."""
        return string_field(1, self.type_url) + bytes_field(2, self.body)

    @functools.cached_property
    def references(self) -> tuple[Reference, ...]:
        """The resources this one refers to by name (see :mod:`xdscore.wire._references`)."""
        return references(self.type_url, self.body)

    @functools.cached_property
    def sotw_entry(self) -> bytes:
        """This resource as one ``resources`` entry of a ``DiscoveryResponse``."""
        return bytes_field(2, self.any_bytes)

    @functools.cached_property
    def delta_entry(self) -> bytes:
        """This resource as one ``resources`` entry of a ``DeltaDiscoveryResponse``."""
        wrapper = (
            string_field(1, self.version)
            + bytes_field(2, self.any_bytes)
            + string_field(3, self.name)
            + b"".join(string_field(4, alias) for alias in self.aliases)
        )
        return bytes_field(2, wrapper)


@attrs.frozen(kw_only=True)
class Selection:
    """The resources of one type a subscription selects, keyed by name in name order."""

    type_url: str
    resources: Mapping[str, Resource] = attrs.field(
        eq=False, repr=lambda r: f"<{len(r)} resources>"
    )
    version: str = attrs.field()
    subscription: Subscription | None = attrs.field(default=None, eq=False, repr=False)
    """The subscription this selection answers, when a view selected it for one."""

    @version.default
    def _hash_contents(self) -> str:
        digest = hashlib.blake2b(self.type_url.encode(), digest_size=_VERSION_BYTES)
        for name, resource in self.resources.items():
            digest.update(b"\x00" + name.encode() + b"\x01" + resource.version.encode())
        return digest.hexdigest()

    @classmethod
    def of(
        cls,
        type_url: str,
        resources: Mapping[str, Resource],
        subscription: Subscription | None = None,
    ) -> Selection:
        """A selection of ``resources`` (any order) of type ``type_url``."""
        ordered = {name: resources[name] for name in sorted(resources)}
        return cls(type_url=type_url, resources=ordered, subscription=subscription)

    def __len__(self) -> int:
        return len(self.resources)

    @functools.cached_property
    def has_lower_references(self) -> bool:
        """Whether any resource refers to a type sent before its own (see ``_ordering``)."""
        for resource in self.resources.values():
            rank = type_info(resource.type_url).rank
            if any(type_info(ref.type_url).rank < rank for ref in resource.references):
                return True
        return False

    @functools.cached_property
    def sotw_body(self) -> bytes:
        """The ``resources`` and ``type_url`` fields of a SotW response, shared by all streams."""
        entries = b"".join(resource.sotw_entry for resource in self.resources.values())
        return entries + string_field(4, self.type_url)
