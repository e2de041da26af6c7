"""Immutable resources, encoded exactly once.

A [`Resource`][xdscore.wire.Resource] is one named xDS resource: its encoded message and a version
that is a hash of those bytes (and of its TTL, if it has one), so every replica and every restart
agrees on it. The protobuf framing a response needs around it (the ``Any``, the
``envoy.service.discovery.v3.Resource`` wrapper of Delta and of wrapped SotW entries, and the
body-less heartbeat entries) is built once per resource, on first use, and then shared by
every stream.
"""

from __future__ import annotations

import functools
import hashlib

import attrs

from ._framing import bytes_field, string_field, varint
from ._names import canonical_name
from ._references import Reference, references, vhds_namespace
from ._typeurls import type_info

__all__ = ["RESOURCE_WRAPPER", "VERSION_BYTES", "Resource", "content_version"]

RESOURCE_WRAPPER = "type.googleapis.com/envoy.service.discovery.v3.Resource"
"""The type URL of a SotW entry wrapped in ``envoy.service.discovery.v3.Resource``."""

VERSION_BYTES = 12
"""Digest size of every content version."""


def content_version(payload: bytes) -> str:
    """A short, stable hash of ``payload`` used as a version string."""
    return hashlib.blake2b(payload, digest_size=VERSION_BYTES).hexdigest()


@attrs.frozen(kw_only=True)
class Resource:
    """One named xDS resource of type ``type_url``, with its encoded message ``body``.

    ``name`` is kept in canonical form (``xdstp://`` context parameters sorted, see
    `xdscore.wire.canonical_name`), which is how it is compared and sent; ``body``
    is not rewritten.
    """

    type_url: str
    name: str = attrs.field(converter=canonical_name)
    body: bytes = attrs.field(repr=False, eq=False)
    ttl: float | None = attrs.field(default=None)
    """Seconds a client that supports TTLs keeps the resource without hearing of it again
    (``None``: for ever). Part of the version: a new TTL is a new version."""
    version: str = attrs.field()
    aliases: tuple[str, ...] = ()
    message: object = attrs.field(default=None, eq=False, repr=False)
    """The typed message given when the resource was constructed directly, if any (the
    analyzer checks that it is of the declared type). [`make_resource`][xdscore.wire.make_resource]
    keeps only the bytes."""
    name_only: bool = False
    """A Delta entry without a body: its name, version and aliases only (see
    [`unresolved`][xdscore.wire.Resource.unresolved])."""

    @ttl.validator
    def _positive(self, _: object, value: float | None) -> None:
        if value is not None and not value > 0:
            raise ValueError(f"the TTL of {self.name!r} must be a positive number of seconds")

    @version.default
    def _hash_body(self) -> str:
        if self.ttl is None:
            return content_version(self.body)
        return content_version(self.body + b"\x00ttl=" + repr(float(self.ttl)).encode())

    @classmethod
    def unresolved(cls, type_url: str, alias: str) -> Resource:
        """The answer to a subscription by ``alias`` that names nothing: an entry called
        ``alias``, with ``alias`` as its alias and no body (VHDS: Envoy matches the pending
        request by the alias, and finds no virtual host)."""
        return cls(type_url=type_url, name=alias, body=b"", aliases=(alias,), name_only=True)

    @functools.cached_property
    def any_bytes(self) -> bytes:
        """The encoded ``google.protobuf.Any`` holding the resource."""
        return string_field(1, self.type_url) + bytes_field(2, self.body)

    @functools.cached_property
    def references(self) -> tuple[Reference, ...]:
        """The resources this one refers to by name (see `xdscore.wire._references`)."""
        return references(self.type_url, self.body)

    @functools.cached_property
    def earlier_references(self) -> tuple[Reference, ...]:
        """The references to types a client is sent before this one's (of a lower
        ``rank``): the only ones that can hold this one back."""
        rank = type_info(self.type_url).rank
        return tuple(ref for ref in self.references if type_info(ref.type_url).rank < rank)

    @functools.cached_property
    def vhds_namespace(self) -> str | None:
        """For a route configuration with VHDS, the namespace collection of its virtual
        hosts (``<name>/*``), decoded once; ``None`` otherwise."""
        return vhds_namespace(self.type_url, self.body)

    @functools.cached_property
    def sotw_entry(self) -> bytes:
        """This resource as one ``resources`` entry of a ``DiscoveryResponse``."""
        return bytes_field(2, self.any_bytes)

    @functools.cached_property
    def delta_entry(self) -> bytes:
        """This resource as one ``resources`` entry of a ``DeltaDiscoveryResponse``, with its
        TTL (for clients that support TTLs)."""
        return bytes_field(2, self._wrapper(body=not self.name_only, ttl=True))

    @functools.cached_property
    def delta_entry_without_ttl(self) -> bytes:
        """[`delta_entry`][xdscore.wire.Resource.delta_entry] without the TTL, for clients that do
        not support TTLs."""
        if self.ttl is None:
            return self.delta_entry
        return bytes_field(2, self._wrapper(body=not self.name_only, ttl=False))

    @functools.cached_property
    def delta_heartbeat(self) -> bytes:
        """The Delta heartbeat of this resource: name, version and TTL, no body; a client
        holding this version only restarts the resource's TTL."""
        return bytes_field(2, self._wrapper(body=False, ttl=True))

    @functools.cached_property
    def sotw_wrapped_entry(self) -> bytes:
        """This resource as a SotW ``resources`` entry wrapped in
        ``envoy.service.discovery.v3.Resource`` (name, TTL and body), for clients that read
        wrapped entries (``xds.config.resource-in-sotw``). The wrapper carries no version:
        SotW clients take the response's."""
        wrapper = bytes_field(2, self.any_bytes) + string_field(3, self.name) + self._ttl_field
        return bytes_field(2, string_field(1, RESOURCE_WRAPPER) + bytes_field(2, wrapper))

    @functools.cached_property
    def _ttl_field(self) -> bytes:
        """The wrapper's ``ttl`` (a ``google.protobuf.Duration``), or nothing."""
        if self.ttl is None:
            return b""
        nanos_total = round(self.ttl * 1_000_000_000)
        seconds, nanos = divmod(nanos_total, 1_000_000_000)
        duration = (b"\x08" + varint(seconds) if seconds else b"") + (
            b"\x10" + varint(nanos) if nanos else b""
        )
        return bytes_field(6, duration)

    def _wrapper(self, *, body: bool, ttl: bool) -> bytes:
        """The encoded ``envoy.service.discovery.v3.Resource`` of this resource."""
        return (
            string_field(1, self.version)
            + (bytes_field(2, self.any_bytes) if body else b"")
            + string_field(3, self.name)
            + b"".join(string_field(4, alias) for alias in self.aliases)
            + (self._ttl_field if ttl else b"")
        )
