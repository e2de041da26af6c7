"""A snapshot cache keeps an unchanged type's mapping from one snapshot to the next.

The view protocol promises the same ``resources`` mapping while a type is unchanged: SotW
streams then leave the type unselected and Delta streams skip it in O(1). A new `Snapshot`
builds new mappings, so `SnapshotCache.set_snapshot` hands each type whose resources are the
very ones the group's previous snapshot holds (the same objects, or the same version,
aliases, TTL and bytes) the previous snapshot's mapping; nothing a client can be sent
changes.
"""

from __future__ import annotations

from collections.abc import Mapping

from xdscore import (
    CLUSTER,
    ENDPOINT,
    Resource,
    Snapshot,
    SnapshotCache,
    make_resource,
    same_for_all,
)
from xdscore.protocol import Selection, SotwServer, Subscription

from ..factories import CL_A, CL_A2, CL_B, EP_A, EP_A2, EP_B, NODE
from ._sotw import ack, ads, first


def _cache(*resources: object) -> tuple[SnapshotCache, Snapshot]:
    cache = SnapshotCache(group=same_for_all)
    snapshot = Snapshot(resources)
    cache.set_snapshot(None, snapshot)
    return cache, snapshot


def test_an_unchanged_type_keeps_the_previous_mapping() -> None:
    cache, first_snapshot = _cache(CL_A, CL_B, EP_A, EP_B)
    clusters = first_snapshot.resources(CLUSTER)
    second = Snapshot([CL_A, CL_B, EP_A2, EP_B])  # (rebuilt: new resources, same clusters)
    cache.set_snapshot(None, second)
    assert second.resources(CLUSTER) is clusters
    assert second.resources(ENDPOINT) is not first_snapshot.resources(ENDPOINT)
    assert dict(second.resources(ENDPOINT) or {}) == {
        r.name: r for r in map(make_resource, [EP_A2, EP_B])
    }
    assert second.revision == Snapshot([CL_A, CL_B, EP_A2, EP_B]).revision


def test_a_changed_type_keeps_its_own_mapping() -> None:
    cache, first_snapshot = _cache(CL_A, CL_B)
    second = Snapshot([CL_A2, CL_B])
    cache.set_snapshot(None, second)
    assert second.resources(CLUSTER) is not first_snapshot.resources(CLUSTER)
    assert (second.resources(CLUSTER) or {})["a"] == make_resource(CL_A2)


def test_the_same_version_with_other_bytes_is_not_shared() -> None:
    original = make_resource(CL_A)
    cache, _ = _cache(original)
    impostor = Resource(
        type_url=CLUSTER, name="a", body=make_resource(CL_A2).body, version=original.version
    )
    second = Snapshot([impostor])
    cache.set_snapshot(None, second)
    assert (second.resources(CLUSTER) or {})["a"] is impostor


class _Counting:
    """A view that counts the selections asked of it."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.selects: list[str] = []

    def select(self, type_url: str, subscription: Subscription) -> Selection | None:
        self.selects.append(type_url)
        return self.snapshot.select(type_url, subscription)

    def resources(self, type_url: str) -> Mapping[str, Resource] | None:
        return self.snapshot.resources(type_url)

    def changed_since(
        self, type_url: str, previous: Mapping[str, Resource]
    ) -> frozenset[str] | None:
        return self.snapshot.changed_since(type_url, previous)


def test_a_sotw_stream_selects_only_the_changed_type_after_a_new_snapshot() -> None:
    cache, _ = _cache(CL_A, CL_B, EP_A, EP_B)
    machine: SotwServer = ads()
    first(machine, CLUSTER)
    first(machine, ENDPOINT, ["a", "b"])
    view = cache.view(NODE)
    assert view is not None
    for response in machine.poll(view):
        ack(machine, response, ["a", "b"] if response.type_url == ENDPOINT else ())
    assert machine.poll(view) == []
    cache.set_snapshot(None, Snapshot([CL_A, CL_B, EP_A2, EP_B]))
    new = cache.view(NODE)
    assert new is not None
    counting = _Counting(new)
    sent = machine.poll(counting)
    assert [r.type_url for r in sent] == [ENDPOINT]
    assert counting.selects == [ENDPOINT]
    assert new.changed_since(CLUSTER, view.resources(CLUSTER) or {}) == frozenset()
