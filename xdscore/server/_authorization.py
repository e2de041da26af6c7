"""Who may connect as which node: the peer's verified identity and the authorization hook.

A transport that verified a client certificate passes its :class:`PeerIdentity` to the
runtime, which shows it in :class:`~xdscore.StreamInfo` and status. An :data:`Authorizer`
runs once per stream, when the first request names the node and before anything is sent:
it returns ``None`` to allow the stream, or the reason it is denied, which ends the stream
with PERMISSION_DENIED. :class:`SpiffeNodePolicy` is the built-in one: the node id (or
``node.cluster``) must be what a template makes of the certificate's SPIFFE ID. A
:data:`ResourceAuthorizer` decides, within an allowed stream, resource by resource.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import attrs

from ..wire._records import Node

if TYPE_CHECKING:
    from ._callbacks import StreamInfo

__all__ = ["Authorizer", "PeerIdentity", "ResourceAuthorizer", "SpiffeNodePolicy"]


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


@attrs.frozen
class SpiffeNodePolicy:
    """Allow a stream only if its node matches the client certificate's SPIFFE ID.

    ``spiffe_id`` is a template over the SPIFFE ID whose ``{placeholders}`` each match one
    path segment; ``node`` is what the placeholders make of the node's ``field`` (``id``
    or ``cluster``). With the defaults, ``spiffe://example.org/ns/shop/sa/cart`` may only
    claim node id ``cart.shop``. A stream without a verified certificate is denied.
    """

    spiffe_id: str = "spiffe://{trust_domain}/ns/{namespace}/sa/{account}"
    node: str = "{account}.{namespace}"
    field: Literal["id", "cluster"] = "id"
    _compiled: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        pattern = _pattern(self.spiffe_id)
        unknown = set(_PLACEHOLDER.findall(self.node)) - set(pattern.groupindex)
        if unknown:
            raise ValueError(
                f"node template {self.node!r} uses {sorted(unknown)}, which the SPIFFE ID "
                f"template {self.spiffe_id!r} does not define"
            )
        object.__setattr__(self, "_compiled", pattern)

    def __call__(self, stream: StreamInfo, node: Node) -> str | None:
        claimed = node.id if self.field == "id" else node.cluster
        identity = stream.identity
        if identity is None:
            return (
                f"node {self.field} {claimed!r}: no verified client certificate; this "
                "server binds nodes to SPIFFE IDs"
            )
        allowed = []
        for spiffe_id in identity.spiffe_ids:
            match = self._compiled.fullmatch(spiffe_id)
            if match is None:
                continue
            expected = self.node.format(**match.groupdict())
            if claimed == expected:
                return None
            allowed.append(f"{spiffe_id} allows {expected!r}")
        if not allowed:
            found = ", ".join(identity.spiffe_ids) or "none"
            return (
                f"node {self.field} {claimed!r}: the client certificate has no SPIFFE ID "
                f"of the form {self.spiffe_id} (it has {found})"
            )
        return f"node {self.field} {claimed!r} does not match the certificate: {'; '.join(allowed)}"
