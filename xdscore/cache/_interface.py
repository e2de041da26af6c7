"""The interface between caches and the server runtime: all the runtime ever asks of one."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Protocol

from ..protocol._view import ResourceView
from ..wire._records import Node

if TYPE_CHECKING:
    from ._snapshot import Snapshot

__all__ = ["Adopted", "Cache", "Cancel", "Notify"]

Notify = Callable[[], None]
"""Called, synchronously and without arguments, when what a watcher sees may have changed."""

Cancel = Callable[[], None]
"""Stops a watch; calling it twice is harmless."""

Adopted = Callable[[Hashable, "Snapshot"], None]
"""Called with a group's key and the snapshot it now serves, once its watchers were told."""


class Cache(Protocol):
    """What the server runtime needs from a cache. Subclass it to inherit the defaults.

    Reads are synchronous and return immutable views. Watching is level-triggered: ``notify``
    only says "look again"; a watcher that is slow to look sees the latest state, never a
    backlog. Writers call ``notify`` callbacks synchronously and never wait for a reader.
    [`view`][xdscore.cache.Cache.view] and [`watch`][xdscore.cache.Cache.watch] are the whole of it;
    the runtime calls the others too, and a cache overrides them where it can tell more than the
    defaults say.
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

    def on_snapshot(self, callback: Adopted) -> Cancel:
        """Call ``callback(key, snapshot)`` each time a group is given a snapshot to serve,
        after the group's watchers were told, until cancelled: each call is a revision the
        server tracks (see `xdscore.server._revisions`). By default the cache has no
        snapshots to tell of: nothing is called."""
        return _nothing

    def scope_of(self, node: Node) -> str | None:
        """The scope ``node`` is served from, for status pages (``None``: no scopes)."""
        return None


def _nothing() -> None:
    """A cancel that has nothing to cancel."""
