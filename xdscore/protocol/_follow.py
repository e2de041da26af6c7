"""What an Envoy-like client asks for next: the names its resources refer to.

Envoy and gRPC discover what to subscribe to from what they hold: a cluster's endpoints, a
listener's route configuration, the secrets its TLS contexts name, a route's clusters
(proxyless gRPC, which watches nothing with a wildcard). `Follower` records, per
type, the names each other type's held resources refer to, and says when the followed set
of a type changes. It is pure bookkeeping; the client driver turns its answers into
subscriptions, skipping types the client already watches with a wildcard.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..wire._references import has_references
from ..wire._resource import Resource

__all__ = ["Follower"]


class Follower:
    """Names referred to by what a client holds, per target type and referring type."""

    def __init__(self) -> None:
        self._by_target: dict[str, dict[str, frozenset[str]]] = {}

    def followed(self, type_url: str) -> frozenset[str]:
        """Every name of ``type_url`` that something the client holds refers to."""
        return frozenset().union(*self._by_target.get(type_url, {}).values())

    def refers(self, type_url: str) -> bool:
        """Whether what the client holds of ``type_url`` can refer to anything, or did: if
        not, `update` would find nothing changed (callers may skip gathering what is
        held)."""
        return has_references(type_url) or any(type_url in by for by in self._by_target.values())

    def update(self, type_url: str, held: Mapping[str, Resource]) -> dict[str, frozenset[str]]:
        """Record that the client holds exactly ``held`` of ``type_url``; return the new
        followed set of every type whose set changed."""
        found: dict[str, set[str]] = {}
        if has_references(type_url):
            for resource in held.values():
                for ref in resource.references:
                    found.setdefault(ref.type_url, set()).add(ref.name)
        targets = set(found)
        targets.update(t for t, by in self._by_target.items() if type_url in by)
        changed: dict[str, frozenset[str]] = {}
        for target in targets:
            before = self.followed(target)
            by = self._by_target.setdefault(target, {})
            names = frozenset(found.get(target, ()))
            if names:
                by[type_url] = names
            else:
                by.pop(type_url, None)
            after = self.followed(target)
            if after != before:
                changed[target] = after
        return changed
