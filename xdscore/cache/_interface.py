"""The narrow interface between caches and the server runtime."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..protocol._view import ResourceView
from ..wire._records import Node

__all__ = ["Cache", "Cancel", "Notify"]

Notify = Callable[[], None]
"""Called, synchronously and without arguments, when what a watcher sees may have changed."""

Cancel = Callable[[], None]
"""Stops a watch; calling it twice is harmless."""


class Cache(Protocol):
    """What the server runtime needs from a cache.

    Reads are synchronous and return immutable views. Watching is level-triggered: ``notify``
    only says "look again"; a watcher that is slow to look sees the latest state, never a
    backlog. Writers call ``notify`` callbacks synchronously and never wait for a reader.
    """

    def view(self, node: Node) -> ResourceView | None:
        """The resources ``node`` should have now, or ``None`` if the cache has none yet."""
        ...

    def watch(self, node: Node, notify: Notify) -> Cancel:
        """Call ``notify`` whenever ``view(node)`` may have changed, until cancelled."""
        ...


# Optional, read with getattr by the runtime when a cache has them (the built-in ones do):
# ``ready: bool`` (a readiness probe waits for it) and
# ``on_update(callback: Callable[[str], None]) -> Cancel`` (each type a write changed).
