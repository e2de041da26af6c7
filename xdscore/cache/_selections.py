"""What a subscription selects of a type's resources, and a view's memo of selections.

Views memoise ``select(type_url, subscription)`` so that streams with the same subscription
share one selection and one encoded body. An entry is kept by its subscription, held
weakly (compared by value): it goes as soon as no stream holds that subscription any more,
or with its view. Each entry is charged what it adds (its resources mapping and the bodies
its streams encode from it) to one budget for every view; past it, a selection is computed
for its caller and not kept.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping

from .._memos import SELECTIONS
from ..protocol._subscription import Subscription
from ..protocol._view import Selection
from ..wire._resource import Resource

__all__ = ["SelectionMemo", "select", "selection_size"]


def select(
    type_url: str, resources: Mapping[str, Resource], subscription: Subscription
) -> Selection:
    """The part of ``resources`` that ``subscription`` asks for."""
    if subscription.wildcard:
        return Selection.of(type_url, resources)
    chosen = {name: resources[name] for name in subscription.names if name in resources}
    if subscription.collections:
        chosen.update((n, r) for n, r in resources.items() if subscription.wants(n))
    return Selection.of(type_url, chosen)


_Key = tuple[str, "weakref.ref[Subscription]"]


class SelectionMemo:
    """One view's selections by type URL and subscription."""

    __slots__ = ("__weakref__", "_charged", "_entries")

    def __init__(self) -> None:
        self._entries: dict[_Key, tuple[Selection, int]] = {}
        self._charged = [0, 0]
        """Bytes and entries this memo holds of the budget (given back when it goes)."""
        # (Not at exit: the budget may be gone by then, and nothing needs it.)
        weakref.finalize(self, _give_back, self._charged).atexit = False

    def select(
        self, type_url: str, resources: Mapping[str, Resource], subscription: Subscription
    ) -> Selection:
        """What ``subscription`` selects of ``resources`` (the view's of ``type_url``):
        memoised, and kept if it fits."""
        found = self._entries.get((type_url, weakref.ref(subscription)))
        if found is not None:
            return found[0]
        selection = select(type_url, resources, subscription)
        size = selection_size(selection)
        if SELECTIONS.take(size):
            forget = _Forget(self, type_url)
            self._entries[(type_url, weakref.ref(subscription, forget))] = (selection, size)
            self._charged[0] += size
            self._charged[1] += 1
        return selection

    def _forget(self, key: _Key) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            size = entry[1]
            self._charged[0] -= size
            self._charged[1] -= 1
            SELECTIONS.give_back(size)

    def __len__(self) -> int:
        return len(self._entries)


class _Forget:
    """A subscription's weak-reference callback: its entry goes."""

    __slots__ = ("memo", "type_url")

    def __init__(self, memo: SelectionMemo, type_url: str) -> None:
        self.memo = weakref.ref(memo)
        self.type_url = type_url

    def __call__(self, gone: weakref.ref[Subscription]) -> None:
        memo = self.memo()
        if memo is not None:
            # (A dead reference keeps its hash and equals only itself: the entry's own key.)
            memo._forget((self.type_url, gone))


def _give_back(charged: list[int]) -> None:
    SELECTIONS.bytes -= charged[0]
    SELECTIONS.entries -= charged[1]


def selection_size(selection: Selection) -> int:
    """What a kept selection adds to its view: its mapping of resources (their names and
    the resources are the view's) and the bodies encoded from it (twice over, for the
    body with TTLs wrapped)."""
    body = sum(len(resource.sotw_entry) for resource in selection.resources.values())
    return sys.getsizeof(selection) + sys.getsizeof(selection.resources) + 2 * body
