"""A cache of snapshots keyed by a node-grouping function."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

from ..wire._records import Node
from ..wire._resource import Resource
from ._interface import Adopted, Cache, Cancel, Notify
from ._snapshot import Snapshot, SnapshotError, same_resources
from ._watchers import Adoptions, Updates, Watchers

__all__ = ["NodeGroup", "SnapshotCache", "by_node_id", "same_for_all"]

NodeGroup = Callable[[Node], Hashable]
"""Maps a node to the key of its group of clients."""


def by_node_id(node: Node) -> Hashable:
    """Group clients by ``node.id``: each proxy gets the snapshot set for its id."""
    return node.id


def same_for_all(node: Node) -> Hashable:
    """Put every client in one group: all get the snapshot set for key ``None``."""
    return None


class SnapshotCache(Cache):
    """Snapshots per group of clients; ``group`` maps a node to its group's key.

    A client whose group has no snapshot is sent nothing until one is set.
    ``set_snapshot`` replaces the group's snapshot atomically and tells that group's streams
    to look again; it never waits for them. Call it from the event loop's thread.
    """

    def __init__(self, *, group: NodeGroup = by_node_id, check_consistency: bool = False):
        self._group = group
        self._check = check_consistency
        self._snapshots: dict[Hashable, Snapshot] = {}
        self._watchers = Watchers()
        self._updates = Updates()
        self._adoptions = Adoptions()

    def key(self, node: Node) -> Hashable:
        """The group key of ``node``."""
        return self._group(node)

    def set_snapshot(self, key: Hashable, snapshot: Snapshot) -> None:
        """Serve ``snapshot`` to the group ``key``.

        With ``check_consistency`` a snapshot with dangling references is refused
        ([`SnapshotError`][xdscore.cache.SnapshotError]) and the previous one stays.
        """
        if self._check:
            problems = snapshot.inconsistencies()
            if problems:
                raise SnapshotError("; ".join(str(problem) for problem in problems))
        previous = self._snapshots.get(key)
        changed = _changed_types(previous, snapshot)
        if previous is not None and previous is not snapshot:
            # The types this write leaves as they were keep their mappings (see `_share`).
            snapshot._share(previous, snapshot.type_urls.difference(changed))
        self._snapshots[key] = snapshot
        self._watchers.notify(key)
        self._updates.tell(changed)
        self._adoptions.tell(key, snapshot)

    def clear_snapshot(self, key: Hashable) -> None:
        """Forget the group's snapshot; its clients keep what they have and get nothing new."""
        self._snapshots.pop(key, None)
        self._watchers.notify(key)

    def snapshot(self, key: Hashable) -> Snapshot | None:
        """The snapshot served to group ``key``, if any."""
        return self._snapshots.get(key)

    @property
    def ready(self) -> bool:
        """Whether any group has a snapshot (until then no client gets anything)."""
        return bool(self._snapshots)

    def keys(self) -> list[Hashable]:
        """Every group key that has a snapshot."""
        return list(self._snapshots)

    def view(self, node: Node) -> Snapshot | None:
        """The snapshot for ``node``'s group."""
        return self._snapshots.get(self._group(node))

    def watch(self, node: Node, notify: Notify) -> Cancel:
        """Call ``notify`` when ``node``'s group gets a new snapshot."""
        return self._watchers.add(self._group(node), notify)

    def on_update(self, callback: Callable[[str], None]) -> Cancel:
        """Call ``callback(type_url)`` for each type a new snapshot changes (for metrics)."""
        return self._updates.add(callback)

    def on_snapshot(self, callback: Adopted) -> Cancel:
        """Call ``callback(key, snapshot)`` after each ``set_snapshot``, once the group's
        watchers were told (the server makes each a revision)."""
        return self._adoptions.add(callback)

    def watcher_count(self) -> int:
        """How many streams are watching (for status pages and tests)."""
        return self._watchers.count()


def _changed_types(previous: Snapshot | None, snapshot: Snapshot) -> list[str]:
    """The types whose content differs between two snapshots of one group.

    Compared resource by resource (the same object, or the same version and aliases), not
    through the types' content versions: hashing every resource of a type on each write
    would cost O(all resources) even when one endpoint moved and no stream asks for the
    whole type.
    """
    if previous is None:
        return sorted(snapshot.type_urls)
    return sorted(
        type_url
        for type_url in previous.type_urls | snapshot.type_urls
        if _differ(previous.resources(type_url), snapshot.resources(type_url))
    )


def _differ(old: Mapping[str, Resource] | None, new: Mapping[str, Resource] | None) -> bool:
    if old is new:
        return False
    return old is None or new is None or not same_resources(old, new)
