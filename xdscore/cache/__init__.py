"""Caches: what each client should have, read synchronously and watched level-triggered.

A cache of your own implements [`Cache`][xdscore.cache.Cache] (two methods) and hands out immutable
[`ResourceView`][xdscore.cache.ResourceView] values; `xdscore.testing.cache_contract` checks it.
"""

from ..protocol._subscription import EVERYTHING, WILDCARD, Subscription
from ..protocol._view import ResourceView, Selection
from ._interface import Adopted, Cache, Cancel, Notify
from ._linear import LinearCache
from ._mux import MuxCache
from ._scoped import NodeSelector, Scope, ScopedCache, ScopedView, Unselected, first_match
from ._snapshot import Inconsistency, Snapshot, SnapshotError, content_revision
from ._snapshot_cache import NodeGroup, SnapshotCache, by_node_id, same_for_all

__all__ = [
    "EVERYTHING",
    "WILDCARD",
    "Adopted",
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
    "content_revision",
    "first_match",
    "same_for_all",
]
