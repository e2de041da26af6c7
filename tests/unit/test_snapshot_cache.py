"""Snapshots, the snapshot cache and its watchers, and make_resource."""

from __future__ import annotations

import datetime
import logging

import pytest
from envoy.config.cluster.v3 import cluster_pb2

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    Node,
    Resource,
    Snapshot,
    SnapshotCache,
    SnapshotError,
    by_node_id,
    make_resource,
    same_for_all,
)
from xdscore.builders import eds_cluster, http_listener, load_assignment, route_configuration
from xdscore.protocol import Subscription
from xdscore.wire._messages import decode_resource
from xdscore.wire._resource import content_version

NODE_A = Node(id="a", cluster="edge", raw=b"a")
NODE_A_OTHER = Node(id="a", cluster="core", raw=b"a2")
NODE_B = Node(id="b", cluster="edge", raw=b"b")


def full_snapshot(timeout: float = 1.0) -> Snapshot:
    return Snapshot(
        [
            eds_cluster("a", connect_timeout=timeout),
            eds_cluster("b"),
            load_assignment("a", [("10.0.0.1", 80)]),
            load_assignment("b", [("10.0.0.2", 80)]),
            http_listener("l", 10000, "r"),
            route_configuration("r", [("/", "a"), ("/b", "b")]),
        ]
    )


def selected(snapshot: Snapshot, type_url: str, subscription: Subscription) -> list[str]:
    selection = snapshot.select(type_url, subscription)
    assert selection is not None
    return list(selection.resources)


# --- Snapshot -------------------------------------------------------------------------------


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(SnapshotError, match="duplicate cds resource 'a'"):
        Snapshot([eds_cluster("a"), eds_cluster("a", connect_timeout=2.0)])


def test_same_name_in_different_types_is_fine() -> None:
    snapshot = Snapshot([eds_cluster("a"), load_assignment("a", [("10.0.0.1", 80)])])
    assert set(snapshot.resources(CLUSTER) or ()) == {"a"}
    assert set(snapshot.resources(ENDPOINT) or ()) == {"a"}
    assert len(snapshot) == 2


def test_snapshot_accepts_resources_and_messages() -> None:
    resource = make_resource(eds_cluster("a"))
    snapshot = Snapshot([resource, eds_cluster("b")])
    clusters = snapshot.resources(CLUSTER)
    assert clusters is not None
    assert clusters["a"] is resource
    assert clusters["b"].name == "b"
    assert {r.name for r in snapshot} == {"a", "b"}


def test_declared_types_without_resources() -> None:
    snapshot = Snapshot([eds_cluster("a")], types=[LISTENER])
    assert snapshot.type_urls == frozenset({CLUSTER, LISTENER})
    declared = snapshot.resources(LISTENER)
    assert declared is not None
    assert dict(declared) == {}
    listeners = snapshot.select(LISTENER, Subscription(frozenset(), wildcard=True))
    assert listeners is not None
    assert len(listeners) == 0
    assert snapshot.version(LISTENER) == listeners.version != ""


def test_types_neither_held_nor_declared_are_not_served() -> None:
    snapshot = Snapshot([eds_cluster("a")], types=[LISTENER])
    assert ROUTE not in snapshot.type_urls
    assert snapshot.resources(ROUTE) is None
    assert snapshot.select(ROUTE, Subscription(frozenset({"r"}))) is None
    assert snapshot.select(ROUTE, Subscription(frozenset(), wildcard=True)) is None
    assert snapshot.version(ROUTE) == ""


def test_snapshot_resources_are_read_only() -> None:
    clusters = Snapshot([eds_cluster("a")]).resources(CLUSTER)
    assert clusters is not None
    with pytest.raises(TypeError):
        clusters["b"] = make_resource(eds_cluster("b"))  # type: ignore[index]


def test_select_memoises_equal_subscriptions() -> None:
    snapshot = full_snapshot()
    held = Subscription(frozenset({"a", "b"}))  # (a stream holds it)
    one = snapshot.select(ENDPOINT, held)
    two = snapshot.select(ENDPOINT, Subscription(frozenset(["b", "a"])))
    assert one is not None
    assert one is two
    legacy = Subscription(frozenset(), wildcard=True, legacy=True)
    wildcard = snapshot.select(CLUSTER, legacy)
    assert snapshot.select(CLUSTER, Subscription(frozenset(), wildcard=True, legacy=True)) is (
        wildcard
    )
    # Different subscriptions give different selections.
    assert snapshot.select(ENDPOINT, Subscription(frozenset({"a"}))) is not one


def test_select_by_subscription() -> None:
    snapshot = full_snapshot()
    assert selected(snapshot, CLUSTER, Subscription(frozenset(), wildcard=True)) == ["a", "b"]
    assert selected(snapshot, ENDPOINT, Subscription(frozenset({"b", "missing"}))) == ["b"]
    assert selected(snapshot, ENDPOINT, Subscription()) == []
    plus = Subscription(frozenset({"missing"}), wildcard=True)
    assert selected(snapshot, CLUSTER, plus) == ["a", "b"]


def test_content_version_is_stable_across_equal_snapshots() -> None:
    one = full_snapshot()
    two = full_snapshot()
    reordered = Snapshot(list(reversed(list(full_snapshot()))))
    for type_url in (CLUSTER, ENDPOINT, LISTENER, ROUTE):
        assert one.version(type_url) == two.version(type_url)
        assert one.version(type_url) == reordered.version(type_url)
    subscription = Subscription(frozenset({"a"}))
    first, second = one.select(ENDPOINT, subscription), two.select(ENDPOINT, subscription)
    assert first is not None
    assert second is not None
    assert first.version == second.version


def test_content_version_changes_when_any_resource_changes() -> None:
    base = full_snapshot()
    changed = full_snapshot(timeout=3.0)
    assert base.version(CLUSTER) != changed.version(CLUSTER)
    # Only the changed type's version moves.
    assert base.version(ENDPOINT) == changed.version(ENDPOINT)
    assert base.version(LISTENER) == changed.version(LISTENER)
    added = Snapshot([*base, make_resource(eds_cluster("c"))])
    assert added.version(CLUSTER) != base.version(CLUSTER)
    removed = Snapshot([r for r in base if r.name != "b" or r.type_url != CLUSTER])
    assert removed.version(CLUSTER) != base.version(CLUSTER)
    renamed = Snapshot(
        [make_resource(eds_cluster("a")), make_resource(eds_cluster("b"), name="b2")]
    )
    assert renamed.version(CLUSTER) != Snapshot([eds_cluster("a"), eds_cluster("b")]).version(
        CLUSTER
    )


def test_empty_selections_of_different_types_have_different_versions() -> None:
    snapshot = Snapshot([], types=[CLUSTER, LISTENER])
    assert snapshot.version(CLUSTER) != snapshot.version(LISTENER)


def test_consistent_snapshot_has_no_inconsistencies() -> None:
    assert full_snapshot().inconsistencies() == []


def test_inconsistencies_find_listener_without_route_configuration() -> None:
    snapshot = Snapshot([http_listener("l", 10000, "missing-routes")], types=[ROUTE])
    problems = snapshot.inconsistencies()
    assert len(problems) == 1
    problem = problems[0]
    assert (problem.type_url, problem.name) == (LISTENER, "l")
    assert (problem.missing_type_url, problem.missing_name) == (ROUTE, "missing-routes")
    assert "rds" in problem.field
    assert "missing-routes" in str(problem)


def test_inconsistencies_find_cluster_without_endpoints() -> None:
    snapshot = Snapshot(
        [
            eds_cluster("a"),
            eds_cluster("b", service_name="b-endpoints"),
            load_assignment("a", [("10.0.0.1", 80)]),
            load_assignment("b", [("10.0.0.2", 80)]),
        ]
    )
    problems = snapshot.inconsistencies()
    assert [(p.type_url, p.name, p.missing_type_url, p.missing_name) for p in problems] == [
        (CLUSTER, "b", ENDPOINT, "b-endpoints")
    ]


def test_inconsistencies_find_route_to_missing_cluster() -> None:
    snapshot = Snapshot([route_configuration("r", [("/", "nope")])], types=[CLUSTER])
    problems = snapshot.inconsistencies()
    assert [(p.missing_type_url, p.missing_name) for p in problems] == [(CLUSTER, "nope")]


def test_inconsistencies_ignore_types_the_snapshot_does_not_declare() -> None:
    # Listeners refer to routes and clusters to endpoints, but neither type is declared:
    # they may come from elsewhere.
    snapshot = Snapshot([http_listener("l", 10000, "r"), eds_cluster("a")])
    assert snapshot.inconsistencies() == []
    declared = Snapshot([http_listener("l", 10000, "r"), eds_cluster("a")], types=[ENDPOINT])
    assert [(p.missing_type_url, p.missing_name) for p in declared.inconsistencies()] == [
        (ENDPOINT, "a")
    ]


# --- SnapshotCache ----------------------------------------------------------------------------


def test_groups_by_node_id_by_default() -> None:
    cache = SnapshotCache()
    snapshot = full_snapshot()
    cache.set_snapshot("a", snapshot)
    assert cache.key(NODE_A) == "a"
    assert cache.view(NODE_A) is snapshot
    assert cache.view(NODE_A_OTHER) is snapshot
    assert cache.view(NODE_B) is None
    assert cache.snapshot("a") is snapshot
    assert cache.keys() == ["a"]
    assert by_node_id(NODE_B) == "b"


def test_custom_group_function() -> None:
    cache = SnapshotCache(group=lambda node: node.cluster)
    edge = full_snapshot()
    core = full_snapshot(timeout=2.0)
    cache.set_snapshot("edge", edge)
    cache.set_snapshot("core", core)
    assert cache.view(NODE_A) is edge
    assert cache.view(NODE_B) is edge
    assert cache.view(NODE_A_OTHER) is core


def test_same_for_all_groups_every_node_together() -> None:
    cache = SnapshotCache(group=same_for_all)
    snapshot = full_snapshot()
    cache.set_snapshot(None, snapshot)
    assert cache.view(NODE_A) is snapshot
    assert cache.view(NODE_B) is snapshot


def test_set_snapshot_notifies_watchers_of_that_group_synchronously() -> None:
    cache = SnapshotCache()
    calls: list[str] = []
    cache.watch(NODE_A, lambda: calls.append("a1"))
    cache.watch(NODE_A_OTHER, lambda: calls.append("a2"))
    cache.watch(NODE_B, lambda: calls.append("b"))
    assert cache.watcher_count() == 3
    cache.set_snapshot("a", full_snapshot())
    assert sorted(calls) == ["a1", "a2"]
    calls.clear()
    cache.set_snapshot("b", full_snapshot())
    assert calls == ["b"]
    calls.clear()
    cache.set_snapshot("nobody", full_snapshot())
    assert calls == []


def test_watchers_see_the_new_snapshot_when_notified() -> None:
    cache = SnapshotCache()
    new = full_snapshot(timeout=4.0)
    seen: list[object] = []
    cache.watch(NODE_A, lambda: seen.append(cache.view(NODE_A)))
    cache.set_snapshot("a", new)
    assert seen == [new]


def test_clear_snapshot_notifies_and_forgets() -> None:
    cache = SnapshotCache()
    cache.set_snapshot("a", full_snapshot())
    calls: list[int] = []
    cache.watch(NODE_A, lambda: calls.append(1))
    cache.clear_snapshot("a")
    assert calls == [1]
    assert cache.view(NODE_A) is None
    assert cache.keys() == []
    cache.clear_snapshot("a")  # clearing twice is harmless
    assert calls == [1, 1]


def test_cancel_stops_notifications_and_is_idempotent() -> None:
    cache = SnapshotCache()
    calls: list[str] = []
    cancel_one = cache.watch(NODE_A, lambda: calls.append("one"))
    cache.watch(NODE_A, lambda: calls.append("two"))
    cancel_one()
    assert cache.watcher_count() == 1
    cache.set_snapshot("a", full_snapshot())
    assert calls == ["two"]
    cancel_one()
    assert cache.watcher_count() == 1
    calls.clear()
    cache.set_snapshot("a", full_snapshot())
    assert calls == ["two"]


def test_the_same_callback_may_watch_twice() -> None:
    cache = SnapshotCache()
    calls: list[int] = []

    def notify() -> None:
        calls.append(1)

    cancel_first = cache.watch(NODE_A, notify)
    cache.watch(NODE_A, notify)
    cache.set_snapshot("a", full_snapshot())
    assert calls == [1, 1]
    cancel_first()
    cache.set_snapshot("a", full_snapshot())
    assert calls == [1, 1, 1]


def test_cancelling_twice_does_not_remove_a_later_watch_of_the_same_callback() -> None:
    cache = SnapshotCache()
    calls: list[int] = []

    def notify() -> None:
        calls.append(1)

    cancel_old = cache.watch(NODE_A, notify)
    cancel_old()
    cache.watch(NODE_A, notify)  # e.g. a new stream re-using a bound method
    cancel_old()  # "calling it twice is harmless"
    cache.set_snapshot("a", full_snapshot())
    assert calls == [1]


def test_a_raising_callback_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    cache = SnapshotCache()
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    cache.watch(NODE_A, lambda: calls.append("before"))
    cache.watch(NODE_A, broken)
    cache.watch(NODE_A, lambda: calls.append("after"))
    snapshot = full_snapshot()
    with caplog.at_level(logging.ERROR, logger="xdscore.cache"):
        cache.set_snapshot("a", snapshot)
    assert sorted(calls) == ["after", "before"]
    assert cache.view(NODE_A) is snapshot
    assert any("boom" in (record.exc_text or "") or record.exc_info for record in caplog.records)


def test_check_consistency_refuses_and_keeps_the_previous_snapshot() -> None:
    cache = SnapshotCache(check_consistency=True)
    good = full_snapshot()
    cache.set_snapshot("a", good)
    calls: list[int] = []
    cache.watch(NODE_A, lambda: calls.append(1))
    broken = Snapshot([http_listener("l", 10000, "nowhere")], types=[ROUTE])
    with pytest.raises(SnapshotError, match="nowhere"):
        cache.set_snapshot("a", broken)
    assert cache.view(NODE_A) is good
    assert calls == []
    # Without the check the same snapshot is accepted.
    lenient = SnapshotCache()
    lenient.set_snapshot("a", broken)
    assert lenient.view(NODE_A) is broken


# --- make_resource ----------------------------------------------------------------------------


def test_make_resource_from_protobuf_message() -> None:
    message = eds_cluster("a")
    resource = make_resource(message)
    assert resource.type_url == CLUSTER
    assert resource.name == "a"
    assert resource.body == message.SerializeToString(deterministic=True)
    assert resource.version == content_version(resource.body)
    assert resource.message is None  # only the bytes are kept
    assert decode_resource(CLUSTER, resource.body) == message
    assert resource.aliases == ()


def test_make_resource_names_endpoints_by_cluster_name() -> None:
    resource = make_resource(load_assignment("backend", [("10.0.0.1", 80)]))
    assert resource.type_url == ENDPOINT
    assert resource.name == "backend"


def test_make_resource_explicit_name_and_aliases() -> None:
    resource = make_resource(eds_cluster("a"), name="other", aliases=("x", "y"))
    assert resource.name == "other"
    assert resource.aliases == ("x", "y")


def test_make_resource_from_bytes_without_name_decodes_it() -> None:
    body = eds_cluster("from-bytes").SerializeToString()
    resource = make_resource(body, type_url=CLUSTER)
    assert resource.name == "from-bytes"
    assert resource.body == body
    assert resource.version == make_resource(eds_cluster("from-bytes")).version
    assert isinstance(decode_resource(CLUSTER, resource.body), cluster_pb2.Cluster)


def test_make_resource_from_bytes_with_name() -> None:
    body = eds_cluster("inner").SerializeToString()
    resource = make_resource(body, type_url=CLUSTER, name="outer")
    assert resource.name == "outer"
    assert resource.body == body
    assert resource.type_url == CLUSTER


def test_make_resource_from_bytes_needs_a_type_url() -> None:
    with pytest.raises(TypeError, match="type_url"):
        make_resource(b"\x0a\x01a")


def test_make_resource_from_invalid_bytes_without_name() -> None:
    with pytest.raises(ValueError, match="not a valid"):
        make_resource(b"\xff\xff", type_url=CLUSTER)


def test_make_resource_rejects_type_url_mismatch_and_unknown_objects() -> None:
    with pytest.raises(TypeError):
        make_resource(eds_cluster("a"), type_url=LISTENER)
    with pytest.raises(TypeError):
        make_resource({"name": "a"})


def test_make_resource_from_envoy_data_plane_message_matches_protobuf() -> None:
    from envoy_data_plane.envoy.config.cluster.v3 import (
        Cluster,
        ClusterDiscoveryType,
        ClusterEdsClusterConfig,
        ClusterLbPolicy,
    )
    from envoy_data_plane.envoy.config.core.v3 import (
        AggregatedConfigSource,
        ApiVersion,
        ConfigSource,
    )

    message = Cluster(
        name="a",
        type=ClusterDiscoveryType.EDS,
        connect_timeout=datetime.timedelta(seconds=1),
        lb_policy=ClusterLbPolicy.ROUND_ROBIN,
        eds_cluster_config=ClusterEdsClusterConfig(
            eds_config=ConfigSource(
                ads=AggregatedConfigSource(), resource_api_version=ApiVersion.V3
            )
        ),
    )
    resource = make_resource(message)
    expected = make_resource(eds_cluster("a"))
    assert resource.type_url == CLUSTER
    assert resource.name == "a"
    assert resource.version == expected.version
    assert resource.body == expected.body
    assert isinstance(decode_resource(CLUSTER, resource.body), cluster_pb2.Cluster)
    # And it can go straight into a snapshot next to protobuf messages.
    snapshot = Snapshot([message, load_assignment("a", [("10.0.0.1", 80)])])
    assert snapshot.version(CLUSTER) == Snapshot([eds_cluster("a")]).version(CLUSTER)


def test_resource_equality_is_by_identity_and_version() -> None:
    one = make_resource(eds_cluster("a"))
    two = make_resource(eds_cluster("a"))
    assert one == two
    assert one != make_resource(eds_cluster("a", connect_timeout=2.0))
    assert isinstance(one, Resource)
