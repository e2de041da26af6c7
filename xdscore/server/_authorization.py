"""Who may connect as which node: the peer's verified identity and the authorization hook.

A transport that verified a client certificate passes its :class:`PeerIdentity` to the
runtime, which shows it in :class:`~xdscore.StreamInfo` and status. An :data:`Authorizer`
runs once per stream (and per unary fetch), when the first request names the node and
before anything is sent: it returns ``None`` to allow the stream, or the reason it is
denied, which ends the stream with PERMISSION_DENIED. :class:`SpiffeNodePolicy` is the
built-in one: the node id, its cluster or a metadata value (one or several of them) must be
what templates make of the certificate's SPIFFE ID. A :data:`ResourceAuthorizer` decides,
within an allowed stream, resource by resource. An :data:`OperatorCheck`, such as
:class:`SpiffeOperators`, says which identities may read every node's status over CSDS.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

import attrs

from ..cache._scoped import node_field
from ..wire._records import Node

if TYPE_CHECKING:
    from ._callbacks import StreamInfo

__all__ = [
    "Authorizer",
    "OperatorCheck",
    "PeerIdentity",
    "ResourceAuthorizer",
    "SpiffeNodePolicy",
    "SpiffeOperators",
]


@attrs.frozen(kw_only=True)
class PeerIdentity:
    """What a verified client certificate says about its holder."""

    uri_sans: tuple[str, ...] = ()
    """URI subject alternative names: SPIFFE IDs (``spiffe://trust-domain/path``)."""
    dns_sans: tuple[str, ...] = ()
    subject: str = ""
    """The subject distinguished name, as ``CN=...,O=...``."""

    @property
    def spiffe_ids(self) -> tuple[str, ...]:
        """The URI SANs that are SPIFFE IDs."""
        return tuple(uri for uri in self.uri_sans if uri.startswith("spiffe://"))


Authorizer = Callable[["StreamInfo", Node], "str | None"]
"""Given the stream (``identity`` set when TLS verified a client certificate) and the node
its first request names: ``None`` to allow, or why the stream is denied."""

ResourceAuthorizer = Callable[["StreamInfo", str, str], "str | None"]
"""Given the stream (its node known), a type URL and a resource name: ``None`` if the
stream's client may have that resource, or why not. The resource is then withheld, and a
client that reads ``resource_errors`` and asked for it by name is told PERMISSION_DENIED
with the reason. Called once per name and selection; it must answer the same for the same
name for as long as the stream lasts (a changed answer takes effect only with the next
change to what the cache selects)."""

OperatorCheck = Callable[["PeerIdentity | None"], bool]
"""Given a CSDS client's verified identity (``None`` without a client certificate): whether
it may read every node's status. Others are told about their own nodes only."""

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _pattern(template: str) -> re.Pattern[str]:
    parts: list[str] = []
    position = 0
    for match in _PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[position : match.start()]))
        parts.append(f"(?P<{match.group(1)}>[^/]+)")
        position = match.end()
    parts.append(re.escape(template[position:]))
    return re.compile("".join(parts))


def _check_field(field: str) -> None:
    node_field(Node(), field)  # raises ValueError for a name that is no node field


def _templates(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@attrs.frozen
class SpiffeNodePolicy:
    """Allow a stream only if its node matches the client certificate's SPIFFE ID.

    ``spiffe_id`` is a template over the SPIFFE ID whose ``{placeholders}`` each match one
    path segment; ``node`` is what the placeholders make of the node's ``field`` (``id``,
    ``cluster`` or ``metadata.KEY``). ``also`` binds more fields the same way, each to its
    own template: ``{"cluster": "{namespace}"}``. With the defaults,
    ``spiffe://example.org/ns/shop/sa/cart`` may only claim node id ``cart.shop``. A stream
    without a verified certificate is denied.
    """

    spiffe_id: str = "spiffe://{trust_domain}/ns/{namespace}/sa/{account}"
    node: str = "{account}.{namespace}"
    field: str = "id"
    also: Mapping[str, str] = attrs.field(
        factory=dict, converter=_templates, kw_only=True, hash=False
    )
    _compiled: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        pattern = _pattern(self.spiffe_id)
        if self.field in self.also:
            raise ValueError(f"node field {self.field!r} is bound twice")
        for field, template in self.templates.items():
            _check_field(field)
            unknown = set(_PLACEHOLDER.findall(template)) - set(pattern.groupindex)
            if unknown:
                raise ValueError(
                    f"the template of node {field} {template!r} uses {sorted(unknown)}, which "
                    f"the SPIFFE ID template {self.spiffe_id!r} does not define"
                )
        object.__setattr__(self, "_compiled", pattern)

    @property
    def templates(self) -> dict[str, str]:
        """Each bound node field and the template of the value it must have."""
        return {self.field: self.node, **self.also}

    @property
    def bound_fields(self) -> frozenset[str]:
        """The node fields a certificate decides: a client cannot choose their values."""
        return frozenset(self.templates)

    def __call__(self, stream: StreamInfo, node: Node) -> str | None:
        claimed = node_field(node, self.field)
        identity = stream.identity
        if identity is None:
            return (
                f"node {self.field} {claimed!r}: no verified client certificate; this "
                "server binds nodes to SPIFFE IDs"
            )
        mismatches = []
        for spiffe_id in identity.spiffe_ids:
            match = self._compiled.fullmatch(spiffe_id)
            if match is None:
                continue
            values = match.groupdict()
            for field, template in self.templates.items():
                expected = template.format(**values)
                found = node_field(node, field)
                if found != expected:
                    mismatches.append(
                        f"node {field} {found!r} does not match the certificate: "
                        f"{spiffe_id} allows {expected!r}"
                    )
                    break
            else:
                return None
        if not mismatches:
            found_ids = ", ".join(identity.spiffe_ids) or "none"
            return (
                f"node {self.field} {claimed!r}: the client certificate has no SPIFFE ID "
                f"of the form {self.spiffe_id} (it has {found_ids})"
            )
        return "; ".join(mismatches)


@attrs.frozen
class SpiffeOperators:
    """The identities that may read every node's status over CSDS: a client certificate
    with a SPIFFE ID that one of ``patterns`` matches, where ``*`` stands for any run of
    characters within one path segment (``spiffe://example.org/ns/ops/sa/*``)."""

    patterns: tuple[str, ...] = attrs.field(converter=tuple)
    _compiled: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        if not self.patterns:
            raise ValueError("give at least one SPIFFE ID pattern")
        for pattern in self.patterns:
            if not pattern.startswith("spiffe://"):
                raise ValueError(f"{pattern!r} is not a SPIFFE ID pattern (spiffe://...)")
        alternatives = "|".join(re.escape(p).replace(r"\*", "[^/]*") for p in self.patterns)
        object.__setattr__(self, "_compiled", re.compile(alternatives))

    def __call__(self, identity: PeerIdentity | None) -> bool:
        if identity is None:
            return False
        return any(self._compiled.fullmatch(spiffe_id) for spiffe_id in identity.spiffe_ids)
