"""The interface between caches and the server runtime: all the runtime ever asks of one."""

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
    """What the server runtime needs from a cache. Subclass it to inherit the defaults.

    Reads are synchronous and return immutable views. Watching is level-triggered: ``notify``
    only says "look again"; a watcher that is slow to look sees the latest state, never a
    backlog. Writers call ``notify`` callbacks synchronously and never wait for a reader.
    :meth:`view` and :meth:`watch` are the whole of it; the runtime calls the others too,
    and a cache overrides them where it can tell more than the defaults say.
    """

    def view(self, node: Node) -> ResourceView | None:
        """The resources ``node`` should have now, or ``None`` if the cache has none yet."""
        ...

    def watch(self, node: Node, notify: Notify) -> Cancel:
        """Call ``notify`` whenever ``view(node)`` may have changed, until cancelled."""
        ...

    @property
    def ready(self) -> bool:
        """Whether the cache has something to serve (a readiness probe waits for it).
        By default, always."""
        return True

    def on_update(self, callback: Callable[[str], None]) -> Cancel:
        """Call ``callback`` with the type URL of each type a write changes, until
        cancelled (debounce then gives each kind its own window). By default the cache
        cannot tell: nothing is called, and every change counts as the slow kind."""
        return _nothing

    def scope_of(self, node: Node) -> str | None:
        """The scope ``node`` is served from, for status pages (``None``: no scopes)."""
        return None


def _nothing() -> None:
    """A cancel that has nothing to cancel."""
