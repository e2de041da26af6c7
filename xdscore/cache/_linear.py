"""A cache for one high-churn type with per-resource versions: the EDS fast path."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from ..protocol._subscription import Subscription
from ..protocol._view import Selection
from ..wire._messages import make_resource
from ..wire._names import canonical_name
from ..wire._records import Node
from ..wire._resource import Resource
from ._interface import Cache, Cancel, Notify
from ._selections import SelectionMemo
from ._watchers import Updates, Watchers

__all__ = ["LinearCache"]

_HISTORY = 64
"""Earlier generations a stream can still get a difference against, at most..."""
_HISTORY_NAMES = 1_000_000
"""...and at most this many changed names in all."""

_Step = tuple["weakref.ref[Generation]", frozenset[str]]
"""An earlier generation (weakly held) and the names changed between it and the next."""


class Generation(dict[str, Resource]):
    """One generation's resources, by name: a dict that refuses changes.

    The history refers to generations weakly, so an old one lives only while a stream
    still holds it (a Delta stream that last reconciled against it).
    """

    __slots__ = ("__weakref__",)

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a cache generation cannot change")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse


class _LinearView:
    """An immutable view of a :class:`LinearCache` at one generation.

    ``history`` lists, oldest first, earlier generations (weakly) with the names that
    changed between each and the next, so a stream that last saw one of them can ask for
    just the difference.
    """

    __slots__ = (
        "__weakref__",
        "_history",
        "_memo",
        "_resources",
        "generation",
        "type_url",
    )

    def __init__(
        self,
        type_url: str,
        resources: Generation,
        generation: int,
        history: tuple[_Step, ...],
    ) -> None:
        self.type_url = type_url
        self.generation = generation
        self._resources = resources
        self._history = history
        self._memo = SelectionMemo()

    def resources(self, type_url: str) -> Mapping[str, Resource] | None:
        return self._resources if type_url == self.type_url else None

    def changed_since(
        self, type_url: str, previous: Mapping[str, Resource]
    ) -> frozenset[str] | None:
        if type_url != self.type_url:
            return None
        if previous is self._resources:
            return frozenset()
        for index in range(len(self._history) - 1, -1, -1):
            if self._history[index][0]() is previous:
                return frozenset().union(*(names for _, names in self._history[index:]))
        return None

    def select(self, type_url: str, subscription: Subscription) -> Selection | None:
        if type_url != self.type_url:
            return None
        return self._memo.select(type_url, self._resources, subscription)


class LinearCache(Cache):
    """Resources of one type, each set, updated or deleted on its own, served to every node.

    Updating one resource costs O(1) at write time; the immutable view streams read is
    rebuilt once per burst of writes, on first read. Delta streams receive only the
    resources whose versions changed; SotW streams receive their subscribed set. Writes
    never wait for readers; call them from the event loop's thread.
    """

    def __init__(self, type_url: str, resources: Iterable[Resource | Any] = ()) -> None:
        self.type_url = type_url
        self._resources: dict[str, Resource] = {}
        self._generation = 0
        self._view: _LinearView | None = None
        self._pending: set[str] = set()
        self._history: tuple[_Step, ...] = ()
        self._last: weakref.ref[Generation] | None = None
        self._watchers = Watchers()
        self._updates = Updates()
        self.update(put=resources)

    @property
    def ready(self) -> bool:
        """Always: an empty linear cache is a valid state (no resources of its type)."""
        return True

    @property
    def generation(self) -> int:
        """Incremented by every write that changed something."""
        return self._generation

    def __len__(self) -> int:
        return len(self._resources)

    def get(self, name: str) -> Resource | None:
        """The resource called ``name``, if any."""
        return self._resources.get(canonical_name(name))

    def set_resource(
        self, resource: Resource | Any, *, name: str | None = None, ttl: float | None = None
    ) -> None:
        """Add or replace one resource (a Resource, protobuf/betterproto2 message or bytes);
        ``ttl`` gives a message or bytes a TTL in seconds (a Resource carries its own)."""
        self.update(put=[self._coerce(resource, name, ttl)])

    def delete_resource(self, name: str) -> None:
        """Remove one resource; removing an absent name does nothing."""
        self.update(delete=[name])

    def set_resources(self, resources: Iterable[Resource | Any]) -> None:
        """Replace the whole set: names not given are deleted."""
        incoming = [self._coerce(item, None) for item in resources]
        keep = {resource.name for resource in incoming}
        self.update(put=incoming, delete=[name for name in self._resources if name not in keep])

    def update(
        self,
        *,
        put: Iterable[Resource | Any] = (),
        delete: Iterable[str] = (),
    ) -> None:
        """Apply several writes at once; watchers are told once, if anything changed.

        Every item is checked before anything is stored: a bad item leaves the cache as it was.
        """
        changed = False
        incoming = [self._coerce(item, None) for item in put]
        for resource in incoming:
            current = self._resources.get(resource.name)
            if current is None or current.version != resource.version:
                self._resources[resource.name] = resource
                self._pending.add(resource.name)
                changed = True
        for name in map(canonical_name, delete):
            if self._resources.pop(name, None) is not None:
                self._pending.add(name)
                changed = True
        if changed:
            self._generation += 1
            self._view = None
            self._watchers.notify_all()
            self._updates.tell((self.type_url,))

    def _coerce(self, item: Resource | Any, name: str | None, ttl: float | None = None) -> Resource:
        resource = (
            item
            if isinstance(item, Resource)
            else make_resource(item, type_url=self.type_url, name=name, ttl=ttl)
        )
        if resource.type_url != self.type_url:
            raise TypeError(f"this linear cache holds {self.type_url}, not {resource.type_url}")
        return resource

    def view(self, node: Node | None = None) -> _LinearView:
        """The current immutable view (the same for every node)."""
        if self._view is None:
            current = Generation(self._resources)
            if self._last is not None:
                self._history = _bounded((*self._history, (self._last, frozenset(self._pending))))
            self._pending.clear()
            self._last = weakref.ref(current)
            self._view = _LinearView(self.type_url, current, self._generation, self._history)
        return self._view

    def on_update(self, callback: Callable[[str], None]) -> Cancel:
        """Call ``callback(type_url)`` after every write that changed something."""
        return self._updates.add(callback)

    def watch(self, node: Node, notify: Notify) -> Cancel:
        """Call ``notify`` after every write that changed something."""
        return self._watchers.add(None, notify)


def _bounded(history: tuple[_Step, ...]) -> tuple[_Step, ...]:
    """``history`` without what no stream can use: leading generations nobody holds any
    more, and the oldest steps past the bounds."""
    start = 0
    while start < len(history) and history[start][0]() is None:
        start += 1
    history = history[start:][-_HISTORY:]
    names = sum(len(changed) for _, changed in history)
    while history and names > _HISTORY_NAMES:
        names -= len(history[0][1])
        history = history[1:]
    return history
