"""A cache that routes each type URL to another cache."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping

from mypy_extensions import mypyc_attr

from ..protocol._subscription import Subscription
from ..protocol._view import ResourceView, Selection
from ..wire._records import Node
from ..wire._resource import Resource
from ._interface import Cache, Cancel, Notify

__all__ = ["MuxCache"]


class _MuxView:
    """The views of every routed cache for one node, taken at the same moment."""

    __slots__ = ("_default", "_routes")

    def __init__(
        self, routes: Mapping[str, ResourceView | None], default: ResourceView | None
    ) -> None:
        self._routes = routes
        self._default = default

    def _view(self, type_url: str) -> ResourceView | None:
        return self._routes.get(type_url, self._default)

    def resources(self, type_url: str) -> Mapping[str, Resource] | None:
        view = self._view(type_url)
        return view.resources(type_url) if view is not None else None

    def changed_since(
        self, type_url: str, previous: Mapping[str, Resource]
    ) -> frozenset[str] | None:
        view = self._view(type_url)
        return view.changed_since(type_url, previous) if view is not None else None

    def select(self, type_url: str, subscription: Subscription) -> Selection | None:
        view = self._view(type_url)
        return view.select(type_url, subscription) if view is not None else None


@mypyc_attr(allow_interpreted_subclasses=True)
class MuxCache(Cache):
    """Serves each type URL in ``routes`` from its cache, and others from ``default``.

    For example endpoints from a :class:`LinearCache` and everything else from a
    :class:`SnapshotCache`. A type with no route and no default is not answered.
    """

    def __init__(self, routes: Mapping[str, Cache], *, default: Cache | None = None) -> None:
        self._routes = dict(routes)
        self._default = default
        caches: list[Cache] = list(self._routes.values())
        if default is not None:
            caches.append(default)
        self._caches: list[Cache] = []
        for cache in caches:
            if all(cache is not known for known in self._caches):
                self._caches.append(cache)
        self._last: tuple[list[ResourceView | None], _MuxView] | None = None
        """The views last joined, and the joined view (only the last: a memo of more would
        keep old generations of the caches alive)."""

    @property
    def ready(self) -> bool:
        """Whether every routed cache that can tell is ready."""
        return all(cache.ready for cache in self._caches)

    def view(self, node: Node) -> _MuxView | None:
        """Every routed cache's view for ``node``; ``None`` if none of them has one.

        The same views as the last call give the same joined view (every stream polls its
        view for each response; most share their caches' views)."""
        views = [cache.view(node) for cache in self._caches]
        last = self._last
        if last is not None and all(map(operator.is_, last[0], views)):
            return last[1]
        if all(view is None for view in views):
            return None
        by_cache = {id(cache): view for cache, view in zip(self._caches, views, strict=True)}
        routes = {url: by_cache[id(cache)] for url, cache in self._routes.items()}
        default = by_cache[id(self._default)] if self._default is not None else None
        joined = _MuxView(routes, default)
        self._last = (views, joined)
        return joined

    def on_update(self, callback: Callable[[str], None]) -> Cancel:
        """Forward ``callback`` to every routed cache that reports its updates."""
        cancels = [cache.on_update(callback) for cache in self._caches]

        def cancel() -> None:
            for each in cancels:
                each()

        return cancel

    def watch(self, node: Node, notify: Notify) -> Cancel:
        """Watch every routed cache; the returned callable cancels them all."""
        cancels = [cache.watch(node, notify) for cache in self._caches]

        def cancel() -> None:
            for each in cancels:
                each()

        return cancel
