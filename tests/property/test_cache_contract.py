"""The cache contract (:mod:`xdscore.testing.cache_contract`) run against every cache the
library ships: SnapshotCache (grouped by node id, and one group for all), LinearCache, and
MuxCache (endpoints from a linear cache, the rest from a snapshot cache)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import attrs
from hypothesis import strategies as st

from xdscore import ENDPOINT, Resource
from xdscore.cache import LinearCache, MuxCache, Snapshot, SnapshotCache, by_node_id, same_for_all
from xdscore.testing.cache_contract import Expected, WriteOp, cache_contract
from xdscore.testing.strategies import (
    CONFIG_TYPES,
    resource_names,
    resources,
    snapshot_changes,
    snapshots,
)

GROUPS = ("node-a", "node-b", "node-c")
"""Node ids the contract's default nodes use (node-c has none: a group nobody watches)."""

ENDPOINTS = st.lists(resources(ENDPOINT, resource_names(max_size=8)), max_size=4)
SOME_NAMES = st.lists(resource_names(max_size=8), max_size=3)


def any_snapshots() -> st.SearchStrategy[Snapshot]:
    """Consistent configurations, edits of them, and snapshots declaring types they lack."""
    consistent = snapshots(max_size=3)
    edited = consistent.flatmap(lambda snapshot: snapshot_changes(snapshot))
    declared = st.builds(
        lambda types: Snapshot(types=types),
        st.lists(st.sampled_from(CONFIG_TYPES), max_size=2),
    )
    return st.one_of(consistent, edited, declared)


def _contents(snapshot: Snapshot, hide: Sequence[str] = ()) -> dict[str, Mapping[str, Resource]]:
    return {t: snapshot.resources(t) or {} for t in snapshot.type_urls if t not in hide}


# --- SnapshotCache -------------------------------------------------------------------------


def set_snapshot(cache: SnapshotCache, args: tuple[Hashable, Snapshot], expected: Expected) -> None:
    key, snapshot = args
    cache.set_snapshot(key, snapshot)
    expected.set_view(key, _contents(snapshot))


def clear_snapshot(cache: SnapshotCache, key: Hashable, expected: Expected) -> None:
    cache.clear_snapshot(key)
    expected.set_view(key, None)


def snapshot_ops(keys: Sequence[Hashable]) -> list[WriteOp[SnapshotCache, object]]:
    key = st.sampled_from(keys)
    return [
        WriteOp("set_snapshot", st.tuples(key, any_snapshots()), set_snapshot),  # type: ignore[arg-type]
        WriteOp("clear_snapshot", key, clear_snapshot),  # type: ignore[arg-type]
    ]


TestSnapshotCacheByNodeId = cache_contract(
    lambda: SnapshotCache(group=by_node_id),
    snapshot_ops(GROUPS),
    group=by_node_id,
)

TestSnapshotCacheSameForAll = cache_contract(
    lambda: SnapshotCache(group=same_for_all),
    snapshot_ops([None]),
    group=same_for_all,
)


# --- LinearCache ---------------------------------------------------------------------------


def set_resource(cache: LinearCache, resource: Resource, expected: Expected) -> None:
    cache.set_resource(resource)
    for group in expected.groups:
        expected.put(group, resource)


def delete_resource(cache: LinearCache, name: str, expected: Expected) -> None:
    cache.delete_resource(name)
    for group in expected.groups:
        expected.delete(group, ENDPOINT, name)


def set_resources(cache: LinearCache, items: list[Resource], expected: Expected) -> None:
    cache.set_resources(items)
    for group in expected.groups:
        expected.set_type(group, ENDPOINT, {r.name: r for r in items})


def update(cache: LinearCache, args: tuple[list[Resource], list[str]], expected: Expected) -> None:
    put, delete = args
    cache.update(put=put, delete=delete)
    for group in expected.groups:
        for resource in put:
            expected.put(group, resource)
        for name in delete:
            expected.delete(group, ENDPOINT, name)


def linear_ops() -> list[WriteOp[LinearCache, object]]:
    return [
        WriteOp("set_resource", resources(ENDPOINT, resource_names(max_size=8)), set_resource),  # type: ignore[arg-type]
        WriteOp("delete_resource", resource_names(max_size=8), delete_resource),  # type: ignore[arg-type]
        WriteOp("set_resources", ENDPOINTS, set_resources),  # type: ignore[arg-type]
        WriteOp("update", st.tuples(ENDPOINTS, SOME_NAMES), update),  # type: ignore[arg-type]
    ]


TestLinearCache = cache_contract(
    lambda: LinearCache(ENDPOINT),
    linear_ops(),
    initial={ENDPOINT: {}},
)


# --- MuxCache ------------------------------------------------------------------------------


@attrs.frozen
class Muxed:
    """A mux routing endpoints to a linear cache and the rest to a snapshot cache."""

    linear: LinearCache = attrs.field(factory=lambda: LinearCache(ENDPOINT))
    snapshots: SnapshotCache = attrs.field(factory=lambda: SnapshotCache(group=by_node_id))

    def mux(self) -> MuxCache:
        return MuxCache({ENDPOINT: self.linear}, default=self.snapshots)


def mux_set_snapshot(muxed: Muxed, args: tuple[Hashable, Snapshot], expected: Expected) -> None:
    key, snapshot = args
    muxed.snapshots.set_snapshot(key, snapshot)
    state = expected.state(key) or {}
    # The snapshot's endpoints are hidden: the mux routes endpoints to the linear cache.
    expected.set_view(key, {**_contents(snapshot, hide=[ENDPOINT]), ENDPOINT: state[ENDPOINT]})


def mux_clear_snapshot(muxed: Muxed, key: Hashable, expected: Expected) -> None:
    muxed.snapshots.clear_snapshot(key)
    state = expected.state(key) or {}
    expected.set_view(key, {ENDPOINT: state[ENDPOINT]})


def through_linear(op: WriteOp[LinearCache, object]) -> WriteOp[Muxed, object]:
    return WriteOp(
        f"linear.{op.name}",
        op.arguments,
        lambda muxed, args, expected: op.apply(muxed.linear, args, expected),
    )


def mux_ops() -> list[WriteOp[Muxed, object]]:
    key = st.sampled_from(GROUPS)
    return [
        WriteOp("snapshots.set_snapshot", st.tuples(key, any_snapshots()), mux_set_snapshot),  # type: ignore[arg-type]
        WriteOp("snapshots.clear_snapshot", key, mux_clear_snapshot),  # type: ignore[arg-type]
        *(through_linear(op) for op in linear_ops()),
    ]


TestMuxCache = cache_contract(
    Muxed,
    mux_ops(),
    group=by_node_id,
    initial={ENDPOINT: {}},
    as_cache=Muxed.mux,
)
