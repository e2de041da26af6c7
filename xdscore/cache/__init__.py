"""Caches: what each client should have, read synchronously and watched level-triggered."""

from ._interface import Cache, Cancel, Notify
from ._linear import LinearCache
from ._mux import MuxCache
from ._snapshot import Inconsistency, Snapshot, SnapshotError
from ._snapshot_cache import SnapshotCache, by_node_id, same_for_all

__all__ = [
    "Cache",
    "Cancel",
    "Inconsistency",
    "LinearCache",
    "MuxCache",
    "Notify",
    "Snapshot",
    "SnapshotCache",
    "SnapshotError",
    "by_node_id",
    "same_for_all",
]
