"""Immutable resources, encoded exactly once.

A :class:`Resource` is one named xDS resource: its encoded message and a version that is a
hash of those bytes, so every replica and every restart agrees on it. The protobuf framing a
response needs around it (the ``Any`` and the Delta ``Resource`` wrapper) is built once per
resource, on first use, and then shared by every stream.
"""

from __future__ import annotations

import functools
import hashlib

import attrs

from ._framing import bytes_field, string_field
from ._names import canonical_name
from ._references import Reference, references, vhds_namespace

__all__ = ["VERSION_BYTES", "Resource", "content_version"]

VERSION_BYTES = 12
"""Digest size of every content version."""


def content_version(payload: bytes) -> str:
    """A short, stable hash of ``payload`` used as a version string."""
    return hashlib.blake2b(payload, digest_size=VERSION_BYTES).hexdigest()


@attrs.frozen(kw_only=True)
class Resource:
    """One named xDS resource of type ``type_url``, with its encoded message ``body``.

    ``name`` is kept in canonical form (``xdstp://`` context parameters sorted, see
    :func:`~xdscore.wire.canonical_name`), which is how it is compared and sent; ``body`` is
    not rewritten.
    """

    type_url: str
    name: str = attrs.field(converter=canonical_name)
    body: bytes = attrs.field(repr=False, eq=False)
    version: str = attrs.field()
    aliases: tuple[str, ...] = ()
    message: object = attrs.field(default=None, eq=False, repr=False)
    """The typed message the resource was built from, if any (never used on a hot path)."""
    name_only: bool = False
    """A Delta entry without a body: its name, version and aliases only (see
    :meth:`unresolved`)."""

    @version.default
    def _hash_body(self) -> str:
        return content_version(self.body)

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
        """The resources this one refers to by name (see :mod:`xdscore.wire._references`)."""
        return references(self.type_url, self.body)

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
        """This resource as one ``resources`` entry of a ``DeltaDiscoveryResponse``."""
        wrapper = (
            string_field(1, self.version)
            + (b"" if self.name_only else bytes_field(2, self.any_bytes))
            + string_field(3, self.name)
            + b"".join(string_field(4, alias) for alias in self.aliases)
        )
        return bytes_field(2, wrapper)
