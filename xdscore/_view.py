"""The read-only view of the resources a stream's client should have."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ._resource import Resource, Selection
from ._subscription import Subscription

__all__ = ["ResourceView"]


class ResourceView(Protocol):
    """What the state machines read from a cache: immutable for as long as it is held.

    Both methods return ``None`` for a type the view is not authoritative for: the machines
    then send nothing of that type (rather than an empty state that would delete what the
    client has). ``select`` should return the same :class:`Selection` object for equal
    arguments on the same view, so that every stream with the same subscription shares one
    encoded body; ``resources`` should return the same mapping object while the type is
    unchanged, which lets Delta streams skip unchanged types in O(1).
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
