"""LinearCache (per-resource writes) and MuxCache (types routed to caches), alone and as the
views the SotW and Delta state machines read."""

from __future__ import annotations

import gc
import weakref

import pytest

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    LinearCache,
    MuxCache,
    Resource,
    Snapshot,
    SnapshotCache,
    make_resource,
    same_for_all,
)
from xdscore._memos import SELECTIONS
from xdscore.builders import load_assignment
from xdscore.protocol import DeltaServer, SotwServer, Subscription
from xdscore.protocol._subscription import EVERYTHING

from ..factories import (
    CL_A,
    CL_A2,
    EP_A,
    EP_A2,
    EP_B,
    EP_B2,
    EP_C,
    LS_1,
    NODE,
    OTHER_NODE,
    delta_ack,
    delta_request,
    nonce_source,
    sotw_ack,
    sotw_request,
)

EP_C2 = load_assignment("c", [("10.0.2.2", 80)])


class Counter:
    """A watch callback that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def endpoints(count: int, *, port: int = 80) -> list[object]:
    return [
        load_assignment(f"svc-{i:03d}", [(f"10.1.{i // 250}.{i % 250}", port)])
        for i in range(count)
    ]


# --- LinearCache: writes ---------------------------------------------------------------------


def test_linear_set_resource_replaces_one_and_leaves_the_others_identical() -> None:
    cache = LinearCache(ENDPOINT, [EP_A, EP_B, EP_C])
    before = cache.view().resources(ENDPOINT)
    assert before is not None
    cache.set_resource(EP_A2)
    after = cache.view().resources(ENDPOINT)
    assert after is not None
    assert after["a"].version == make_resource(EP_A2).version
    assert after["b"] is before["b"]
    assert after["c"] is before["c"]
    assert cache.get("b") is before["b"]
    assert len(cache) == 3


def test_linear_set_resource_adds_a_new_name() -> None:
    cache = LinearCache(ENDPOINT, [EP_A])
    before = cache.view().resources(ENDPOINT)
    assert before is not None
    cache.set_resource(EP_B)
    after = cache.view().resources(ENDPOINT)
    assert after is not None
    assert sorted(after) == ["a", "b"]
    assert after["a"] is before["a"]


def test_linear_set_resource_from_bytes_with_explicit_name() -> None:
    cache = LinearCache(ENDPOINT)
    cache.set_resource(EP_A.SerializeToString(deterministic=True), name="renamed")
    resource = cache.get("renamed")
    assert resource is not None
    assert resource.version == make_resource(EP_A).version
    assert cache.get("a") is None


def test_linear_delete_resource_removes_only_that_one() -> None:
    cache = LinearCache(ENDPOINT, [EP_A, EP_B, EP_C])
    before = cache.view().resources(ENDPOINT)
    assert before is not None
    cache.delete_resource("b")
    after = cache.view().resources(ENDPOINT)
    assert after is not None
    assert sorted(after) == ["a", "c"]
    assert after["a"] is before["a"]
    assert after["c"] is before["c"]
    assert cache.get("b") is None


def test_linear_deleting_an_absent_name_changes_nothing() -> None:
    cache = LinearCache(ENDPOINT, [EP_A])
    seen = Counter()
    cache.watch(NODE, seen)
    view = cache.view()
    generation = cache.generation
    cache.delete_resource("missing")
    assert cache.generation == generation
    assert seen.calls == 0
    assert cache.view() is view


def test_linear_write_with_identical_version_notifies_nobody() -> None:
    cache = LinearCache(ENDPOINT, [EP_A, EP_B])
    seen = Counter()
    cache.watch(NODE, seen)
    view = cache.view()
    generation = cache.generation
    original = cache.get("a")
    # A newly built message with the same content: same content-hash version.
    cache.set_resource(load_assignment("a", [("10.0.0.1", 80)]))
    cache.update(put=[EP_A, EP_B])
    cache.set_resources([EP_B, EP_A])
    assert seen.calls == 0
    assert cache.generation == generation
    assert cache.view() is view
    assert cache.get("a") is original


def test_linear_generation_counts_changing_writes() -> None:
    cache = LinearCache(ENDPOINT)
    assert cache.generation == 0
    cache.set_resource(EP_A)
    assert cache.generation == 1
    cache.set_resource(EP_A2)
    cache.delete_resource("a")
    assert cache.generation == 3
    assert cache.view().generation == 3


def test_linear_watchers_notified_once_per_update_batch() -> None:
    cache = LinearCache(ENDPOINT, [EP_A, EP_B])
    first, second = Counter(), Counter()
    cache.watch(NODE, first)
    cache.watch(OTHER_NODE, second)
    generation = cache.generation
    cache.update(put=[EP_A2, EP_B2, EP_C], delete=["missing"])
    assert (first.calls, second.calls) == (1, 1)
    assert cache.generation == generation + 1
    cache.update(put=[EP_C2], delete=["a", "b"])
    assert (first.calls, second.calls) == (2, 2)
    assert sorted(cache.view().resources(ENDPOINT) or {}) == ["c"]


def test_linear_cancelled_watch_is_not_notified() -> None:
    cache = LinearCache(ENDPOINT)
    kept, cancelled = Counter(), Counter()
    cache.watch(NODE, kept)
    cancel = cache.watch(NODE, cancelled)
    cancel()
    cancel()
    cache.set_resource(EP_A)
    assert (kept.calls, cancelled.calls) == (1, 0)


def test_linear_set_resources_replaces_the_whole_set() -> None:
    cache = LinearCache(ENDPOINT, [EP_A, EP_B, EP_C])
    seen = Counter()
    cache.watch(NODE, seen)
    kept = cache.get("b")
    cache.set_resources([EP_B, load_assignment("d", [("10.0.3.1", 80)])])
    assert sorted(cache.view().resources(ENDPOINT) or {}) == ["b", "d"]
    assert cache.get("b") is kept  # unchanged version: the same object
    assert seen.calls == 1
    cache.set_resources([])
    assert len(cache) == 0
    assert seen.calls == 2


# --- LinearCache: views ----------------------------------------------------------------------


def test_linear_view_is_immutable() -> None:
    cache = LinearCache(ENDPOINT, [EP_A, EP_B])
    view = cache.view()
    resources = view.resources(ENDPOINT)
    assert resources is not None
    selection = view.select(ENDPOINT, EVERYTHING)
    assert selection is not None
    generation = view.generation
    cache.update(put=[EP_A2, EP_C], delete=["b"])
    assert sorted(resources) == ["a", "b"]
    assert resources["a"].version == make_resource(EP_A).version
    assert view.generation == generation
    assert view.select(ENDPOINT, EVERYTHING) is selection
    assert sorted(selection.resources) == ["a", "b"]
    with pytest.raises(TypeError):
        resources["z"] = resources["a"]  # type: ignore[index]
    assert cache.view() is not view


def test_linear_same_view_until_the_next_write() -> None:
    cache = LinearCache(ENDPOINT, [EP_A])
    view = cache.view()
    assert cache.view() is view
    assert cache.view(NODE) is view
    assert cache.view(OTHER_NODE) is view
    assert view.resources(ENDPOINT) is cache.view().resources(ENDPOINT)
    cache.set_resource(EP_B)
    newer = cache.view()
    assert newer is not view
    assert cache.view() is newer


def test_linear_select_is_memoised_per_view() -> None:
    cache = LinearCache(ENDPOINT, [EP_A, EP_B, EP_C])
    view = cache.view()
    held = Subscription(frozenset({"a", "c", "missing"}))  # (a stream holds it)
    named = view.select(ENDPOINT, held)
    assert named is not None
    assert list(named.resources) == ["a", "c"]
    assert view.select(ENDPOINT, Subscription(frozenset({"c", "a", "missing"}))) is named
    assert view.select(ENDPOINT, EVERYTHING) is view.select(ENDPOINT, EVERYTHING)
    cache.set_resource(EP_B2)
    again = cache.view().select(ENDPOINT, Subscription(frozenset({"a", "c", "missing"})))
    assert again is not named
    assert again is not None
    assert again.version == named.version  # a and c did not change


def test_a_memoised_selection_goes_with_the_last_holder_of_its_subscription() -> None:
    cache = LinearCache(ENDPOINT, [EP_A, EP_B, EP_C])
    view = cache.view()
    gc.collect()  # (what earlier tests left behind goes first)
    before = SELECTIONS.bytes
    held = Subscription(frozenset({"a", "b"}))
    first = view.select(ENDPOINT, held)
    assert SELECTIONS.bytes > before
    assert view.select(ENDPOINT, held) is first
    del held, first
    gc.collect()
    assert SELECTIONS.bytes == before  # no stream holds it: nothing kept for it
    del view
    gc.collect()
    assert SELECTIONS.bytes == before


def test_linear_view_is_not_authoritative_for_other_types() -> None:
    view = LinearCache(ENDPOINT, [EP_A]).view()
    assert view.resources(CLUSTER) is None
    assert view.select(CLUSTER, EVERYTHING) is None


def test_linear_versions_match_a_snapshot_of_the_same_resources() -> None:
    cache = LinearCache(ENDPOINT, [EP_B, EP_A])
    selection = cache.view().select(ENDPOINT, EVERYTHING)
    assert selection is not None
    assert selection.version == Snapshot([EP_A, EP_B]).version(ENDPOINT)


def test_linear_rejects_a_resource_of_another_type() -> None:
    cache = LinearCache(ENDPOINT, [EP_A])
    seen = Counter()
    cache.watch(NODE, seen)
    generation = cache.generation
    with pytest.raises(TypeError):
        cache.set_resource(CL_A)
    with pytest.raises(TypeError):
        cache.set_resource(make_resource(CL_A))
    with pytest.raises(TypeError):
        cache.set_resources([EP_B, CL_A])
    with pytest.raises(TypeError):
        LinearCache(ENDPOINT, [CL_A])
    assert sorted(cache.view().resources(ENDPOINT) or {}) == ["a"]
    assert cache.generation == generation
    assert seen.calls == 0


def test_linear_rejected_batch_leaves_the_cache_unchanged() -> None:
    cache = LinearCache(ENDPOINT, [EP_A, EP_B])
    seen = Counter()
    cache.watch(NODE, seen)
    view = cache.view()
    generation = cache.generation
    with pytest.raises(TypeError):
        cache.update(put=[EP_A2, EP_C, CL_A], delete=["b"])
    stored = cache.get("a")
    assert stored is not None
    assert stored.version == make_resource(EP_A).version
    assert cache.get("b") is not None
    assert cache.get("c") is None
    assert cache.generation == generation
    assert cache.view() is view
    assert (view.resources(ENDPOINT) or {})["a"] is stored
    assert seen.calls == 0


# --- LinearCache feeding the state machines ----------------------------------------------------


def test_linear_cache_delta_stream_sends_exactly_the_changed_assignment() -> None:
    cache = LinearCache(ENDPOINT, endpoints(300))
    names = sorted(cache.view().resources(ENDPOINT) or {})
    machine = DeltaServer(nonce_source=nonce_source(), type_url=ENDPOINT)
    machine.receive(delta_request(ENDPOINT, names, node=NODE))
    (first,) = machine.poll(cache.view())
    assert len(first.resources) == 300
    machine.receive(delta_ack(first))
    assert machine.poll(cache.view()) == []

    cache.set_resource(load_assignment("svc-123", [("10.9.9.9", 8080)]))
    (update,) = machine.poll(cache.view())
    assert [r.name for r in update.resources] == ["svc-123"]
    assert update.resources[0] is cache.get("svc-123")
    assert update.removed == ()
    everything = cache.view().select(ENDPOINT, EVERYTHING)
    assert everything is not None
    assert update.system_version_info == everything.version
    machine.receive(delta_ack(update))

    cache.delete_resource("svc-007")
    (removal,) = machine.poll(cache.view())
    assert removal.resources == ()
    assert removal.removed == ("svc-007",)
    machine.receive(delta_ack(removal))
    assert machine.poll(cache.view()) == []


def test_linear_cache_delta_wildcard_stream_sends_new_and_changed_only() -> None:
    cache = LinearCache(ENDPOINT, endpoints(50))
    machine = DeltaServer(nonce_source=nonce_source())
    machine.receive(delta_request(ENDPOINT, ["*"], node=NODE))
    (first,) = machine.poll(cache.view())
    assert len(first.resources) == 50
    machine.receive(delta_ack(first))
    cache.update(put=[EP_A, load_assignment("svc-010", [("10.8.8.8", 80)])])
    (update,) = machine.poll(cache.view())
    assert [r.name for r in update.resources] == ["a", "svc-010"]


def test_linear_cache_sotw_stream_sends_the_subscribed_set() -> None:
    cache = LinearCache(ENDPOINT, [EP_A, EP_B, EP_C])
    machine = SotwServer(nonce_source=nonce_source(), type_url=ENDPOINT)
    machine.receive(sotw_request(ENDPOINT, ["a", "b"], node=NODE))
    (first,) = machine.poll(cache.view())
    assert list(first.selection.resources) == ["a", "b"]

    machine.receive(sotw_ack(first, ["a", "b"]))
    cache.set_resource(EP_C2)  # not subscribed
    assert machine.poll(cache.view()) == []
    cache.set_resource(EP_A2)
    (second,) = machine.poll(cache.view())
    assert list(second.selection.resources) == ["a", "b"]
    assert second.selection.resources["a"] is cache.get("a")
    assert second.selection.resources["b"] is first.selection.resources["b"]
    # The client changes its subscription: the new subscribed set is sent.
    machine.receive(sotw_ack(second, ["b", "c"]))
    (third,) = machine.poll(cache.view())
    assert list(third.selection.resources) == ["b", "c"]
    assert third.selection.resources["c"].version == make_resource(EP_C2).version


# --- MuxCache ------------------------------------------------------------------------------


def mux_setup() -> tuple[MuxCache, LinearCache, SnapshotCache]:
    linear = LinearCache(ENDPOINT, [EP_A, EP_B])
    snapshots = SnapshotCache(group=same_for_all)
    snapshots.set_snapshot(None, Snapshot([CL_A, LS_1, EP_C]))
    return MuxCache({ENDPOINT: linear}, default=snapshots), linear, snapshots


def test_mux_routes_each_type_to_its_cache() -> None:
    mux, linear, snapshots = mux_setup()
    view = mux.view(NODE)
    assert view is not None
    # Endpoints come from the linear cache, not from the snapshot (which also has some).
    assert view.resources(ENDPOINT) is linear.view().resources(ENDPOINT)
    assert sorted(view.resources(ENDPOINT) or {}) == ["a", "b"]
    assert view.select(ENDPOINT, EVERYTHING) is linear.view().select(ENDPOINT, EVERYTHING)
    snapshot = snapshots.snapshot(None)
    assert snapshot is not None
    assert view.resources(CLUSTER) is snapshot.resources(CLUSTER)
    assert view.select(LISTENER, EVERYTHING) is snapshot.select(LISTENER, EVERYTHING)


def test_mux_joins_the_same_views_once_and_new_ones_anew() -> None:
    mux, linear, snapshots = mux_setup()
    first = mux.view(NODE)
    assert first is not None
    assert mux.view(NODE) is first  # the caches gave the same views
    linear.set_resource(load_assignment("c", [("10.0.0.9", 80)]))
    after_linear = mux.view(NODE)
    assert after_linear is not None
    assert after_linear is not first
    assert sorted(after_linear.resources(ENDPOINT) or {}) == ["a", "b", "c"]
    snapshots.set_snapshot(None, Snapshot([CL_A, EP_C]))
    after_snapshot = mux.view(NODE)
    assert after_snapshot is not None
    assert after_snapshot is not after_linear
    assert after_snapshot.resources(LISTENER) is None  # the new snapshot has none
    assert sorted(first.resources(ENDPOINT) or {}) == ["a", "b"]  # unchanged


def test_mux_keeps_no_old_generation_of_a_cache_alive() -> None:
    mux, linear, _ = mux_setup()
    assert mux.view(NODE) is not None
    old = weakref.ref(linear.view())
    for port in range(20):  # pushes, each viewed by a stream
        linear.set_resource(load_assignment("a", [("10.0.0.1", port)]))
        assert mux.view(NODE) is not None
    gc.collect()
    assert old() is None


def test_mux_unrouted_types_go_to_the_default_or_get_none() -> None:
    mux, linear, _ = mux_setup()
    view = mux.view(NODE)
    assert view is not None
    assert sorted(view.resources(CLUSTER) or {}) == ["a"]
    # A type the default snapshot is not authoritative for: None, not empty.
    assert view.resources(ROUTE) is None
    no_default = MuxCache({ENDPOINT: linear})
    view = no_default.view(NODE)
    assert view is not None
    assert view.resources(CLUSTER) is None
    assert view.select(CLUSTER, EVERYTHING) is None
    assert view.resources(ENDPOINT) is not None


def test_mux_routed_cache_without_a_view_gives_none_not_the_default() -> None:
    routed = SnapshotCache()  # grouped by node id; nothing for NODE
    routed.set_snapshot(OTHER_NODE.id, Snapshot([CL_A2]))
    default = SnapshotCache(group=same_for_all)
    default.set_snapshot(None, Snapshot([CL_A, LS_1]))
    mux = MuxCache({CLUSTER: routed}, default=default)
    view = mux.view(NODE)
    assert view is not None
    assert view.resources(CLUSTER) is None
    assert view.select(CLUSTER, EVERYTHING) is None
    assert sorted(view.resources(LISTENER) or {}) == ["l1"]
    other = mux.view(OTHER_NODE)
    assert other is not None
    clusters = other.resources(CLUSTER)
    assert clusters is not None
    assert clusters["a"].version == make_resource(CL_A2).version


def test_mux_view_is_none_only_when_no_cache_has_a_view() -> None:
    routed = SnapshotCache()
    default = SnapshotCache()
    mux = MuxCache({CLUSTER: routed}, default=default)
    assert mux.view(NODE) is None
    default.set_snapshot(NODE.id, Snapshot([LS_1]))
    view = mux.view(NODE)
    assert view is not None
    assert view.resources(CLUSTER) is None
    assert view.resources(LISTENER) is not None
    assert mux.view(OTHER_NODE) is None
    default.clear_snapshot(NODE.id)
    routed.set_snapshot(NODE.id, Snapshot([CL_A]))
    view = mux.view(NODE)
    assert view is not None
    assert view.resources(CLUSTER) is not None
    assert view.resources(LISTENER) is None


def test_mux_watch_registers_once_on_every_distinct_cache_and_cancel_cancels_all() -> None:
    linear = LinearCache(ENDPOINT, [EP_A])
    snapshots = SnapshotCache(group=same_for_all)
    other = SnapshotCache(group=same_for_all)
    mux = MuxCache(
        {ENDPOINT: linear, CLUSTER: snapshots, LISTENER: snapshots, ROUTE: other},
        default=snapshots,
    )
    seen = Counter()
    cancel = mux.watch(NODE, seen)
    assert snapshots.watcher_count() == 1
    assert other.watcher_count() == 1
    linear.set_resource(EP_A2)
    assert seen.calls == 1
    snapshots.set_snapshot(None, Snapshot([CL_A]))
    assert seen.calls == 2
    other.set_snapshot(None, Snapshot([], types=[ROUTE]))
    assert seen.calls == 3
    cancel()
    assert snapshots.watcher_count() == 0
    assert other.watcher_count() == 0
    linear.set_resource(EP_B)
    snapshots.set_snapshot(None, Snapshot([CL_A2]))
    other.set_snapshot(None, Snapshot([], types=[ROUTE]))
    assert seen.calls == 3


def test_mux_feeds_a_delta_ads_stream_from_both_caches() -> None:
    linear = LinearCache(ENDPOINT, [EP_A, EP_B])
    snapshots = SnapshotCache(group=same_for_all)
    snapshots.set_snapshot(None, Snapshot([CL_A]))
    mux = MuxCache({ENDPOINT: linear}, default=snapshots)
    machine = DeltaServer(nonce_source=nonce_source())
    machine.receive(delta_request(CLUSTER, node=NODE))
    machine.receive(delta_request(ENDPOINT, ["a", "b"]))

    def settle() -> list[tuple[str, list[str]]]:
        out = []
        for response in machine.poll(mux.view(NODE)):
            out.append((response.type_url, [r.name for r in response.resources]))
            machine.receive(delta_ack(response))
        return out

    assert settle() == [(CLUSTER, ["a"]), (ENDPOINT, ["a", "b"])]
    assert settle() == []
    linear.set_resource(EP_B2)
    assert settle() == [(ENDPOINT, ["b"])]
    snapshots.set_snapshot(None, Snapshot([CL_A2]))
    # The updated cluster warms: its unchanged endpoints (from the linear cache) are re-sent.
    assert settle() == [(CLUSTER, ["a"]), (ENDPOINT, ["a"])]
    assert settle() == []


def test_mux_resources_identity_is_stable_while_unchanged() -> None:
    mux, linear, _ = mux_setup()
    first, second = mux.view(NODE), mux.view(NODE)
    assert first is not None
    assert second is not None
    assert first.resources(ENDPOINT) is second.resources(ENDPOINT)
    assert first.resources(CLUSTER) is second.resources(CLUSTER)
    linear.set_resource(EP_A2)
    third = mux.view(NODE)
    assert third is not None
    assert third.resources(ENDPOINT) is not first.resources(ENDPOINT)
    assert third.resources(CLUSTER) is first.resources(CLUSTER)
    assert isinstance((third.resources(ENDPOINT) or {})["a"], Resource)
