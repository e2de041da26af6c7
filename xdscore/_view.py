"""The read-only view of the resources a stream's client should have."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ._resource import Resource, Selection
from ._subscription import Subscription

__all__ = ["ResourceView"]


class ResourceView(Protocol):
    """What the state machines read from a cache: immutable for as long as it is held.

    ``select`` should return the same :class:`Selection` object for equal arguments on the
    same view, so that every stream with the same subscription shares one encoded body.
    """

    def select(self, type_url: str, subscription: Subscription) -> Selection:
        """The resources of ``type_url`` that ``subscription`` asks for."""
        ...

    def resources(self, type_url: str) -> Mapping[str, Resource]:
        """Every resource of ``type_url``, by name."""
        ...
