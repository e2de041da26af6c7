"""Work that streams in the same state would each repeat, done once for all of them.

A fleet's Delta streams mostly ask for the same things and hold the same things: after a
change, each would walk the same changed names against the same holdings and reach the same
answer, and on its ACK build the same new holdings. The machines are pure functions of
their state, so when two streams' states are made of the very same objects (the view's
mappings, the holdings, the interned subscription), the answer computed for one is the
answer for the other. :class:`SharedWork` keeps the last few such answers, keyed by the
identity of the objects they were computed from. An entry refers to those objects weakly
where they allow it, and goes when one of them goes (so an entry never keeps an earlier
generation of a cache alive, and an identity cannot be reused while its entry exists);
objects that take no weak reference are kept alive by the entry instead. Holdings shared
this way are never modified in place (the machines replace them), which is what makes
sharing them safe. A stream whose state differs (a reconnect's versions, a NACK) misses.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["SharedWork"]

_Value = TypeVar("_Value")


class SharedWork(Generic[_Value]):
    """The last ``limit`` answers kept, by the identity of ``objects`` and the value of
    ``extra``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, tuple[tuple[object, ...], _Value]] = OrderedDict()

    def get(self, objects: tuple[object, ...], extra: Hashable) -> _Value | None:
        """The answer computed from these very ``objects`` and an equal ``extra``, if kept."""
        found = self._entries.get((tuple(map(id, objects)), extra))
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        return found[1]

    def put(self, objects: tuple[object, ...], extra: Hashable, value: _Value) -> _Value:
        """Keep ``value`` as the answer for ``objects`` and ``extra``; returns it."""
        key = (tuple(map(id, objects)), extra)
        forget = self._forgetting(key)
        self._entries[key] = (tuple(_hold(each, forget) for each in objects), value)
        self._entries.move_to_end(key)
        if len(self._entries) > self.limit:
            self._entries.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def _forgetting(self, key: Hashable) -> Callable[[object], None]:
        entries = weakref.ref(self._entries)

        def forget(_: object) -> None:
            alive = entries()
            if alive is not None:
                alive.pop(key, None)

        return forget


def _hold(each: object, forget: Callable[[object], None]) -> object:
    """A weak reference to ``each`` that forgets the entry when it goes, or ``each``."""
    try:
        return weakref.ref(each, forget)
    except TypeError:
        return each
