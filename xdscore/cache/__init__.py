"""Caches: what each client should have, read synchronously and watched level-triggered.

A cache of your own implements :class:`Cache` (two methods) and hands out immutable
:class:`ResourceView` values; :mod:`xdscore.testing.cache_contract` checks it.
"""

from ..protocol._subscription import EVERYTHING, WILDCARD, Subscription
from ..protocol._view import ResourceView, Selection
from ._interface import Cache, Cancel, Notify
from ._linear import LinearCache
from ._mux import MuxCache
from ._scoped import NodeSelector, Scope, ScopedCache, ScopedView, Unselected, first_match
from ._snapshot import Inconsistency, Snapshot, SnapshotError
from ._snapshot_cache import NodeGroup, SnapshotCache, by_node_id, same_for_all

__all__ = [
    "EVERYTHING",
    "WILDCARD",
    "Cache",
    "Cancel",
    "Inconsistency",
    "LinearCache",
    "MuxCache",
    "NodeGroup",
    "NodeSelector",
    "Notify",
    "ResourceView",
    "Scope",
    "ScopedCache",
    "ScopedView",
    "Selection",
    "Snapshot",
    "SnapshotCache",
    "SnapshotError",
    "Subscription",
    "Unselected",
    "by_node_id",
    "first_match",
    "same_for_all",
]
