"""The scoped cache: closure, trimming, one shared view per scope, who wakes."""

from __future__ import annotations

import gc
import weakref

import pytest
from envoy.config.route.v3 import route_components_pb2, route_pb2

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    RUNTIME,
    SECRET,
    Resource,
    builders,
    make_resource,
)
from xdscore.cache import (
    EVERYTHING,
    LinearCache,
    MuxCache,
    NodeSelector,
    Scope,
    ScopedCache,
    Snapshot,
    SnapshotCache,
    Subscription,
    Unselected,
    same_for_all,
)
from xdscore.wire import Node, all_types, make_node

from ..scope_mesh import mesh_resources, mesh_snapshot, route_with_hosts

TYPES = [info.type_url for info in all_types()]
TEAM_A = Scope(name="team-a", nodes=NodeSelector(cluster="a"), egress=("a/*", "shared/*"))
TEAM_B = Scope(name="team-b", nodes=NodeSelector(cluster="b"), egress=("b/*", "shared/*"))
A1, A2 = make_node(id="a-1", cluster="a"), make_node(id="a-2", cluster="a")
B1, OTHER = make_node(id="b-1", cluster="b"), make_node(id="x-1", cluster="x")


def _cache(
    snapshot: Snapshot | None = None, default: Unselected | str = Unselected.NOTHING
) -> tuple[SnapshotCache, ScopedCache]:
    source = SnapshotCache(group=same_for_all)
    source.set_snapshot(None, snapshot or mesh_snapshot(["a", "b", "shared"], tls=["a", "b"]))
    return source, ScopedCache(source, [TEAM_A, TEAM_B], default=default)


def _names(cache: ScopedCache, node: Node, type_url: str) -> list[str]:
    view = cache.view(node)
    assert view is not None
    return sorted(view.resources(type_url) or {})


def _hosts(resource: Resource) -> list[str]:
    return [h.name for h in route_pb2.RouteConfiguration.FromString(resource.body).virtual_hosts]


def test_closure_and_trimming() -> None:
    _, cache = _cache()
    assert _names(cache, A1, CLUSTER) == ["a/svc-0", "a/svc-1", "shared/svc-0", "shared/svc-1"]
    assert _names(cache, A1, ENDPOINT) == _names(cache, A1, CLUSTER)
    assert _names(cache, A1, SECRET) == ["a-cert"]
    assert _names(cache, A1, LISTENER) == ["ingress"]
    view = cache.view(A1)
    assert view is not None
    route = (view.resources(ROUTE) or {})["mesh"]
    assert _hosts(route) == ["svc-0.a", "svc-1.a", "svc-0.shared", "svc-1.shared"]
    assert {ref.name for ref in route.references} <= set(_names(cache, A1, CLUSTER))


def test_a_node_no_scope_selects_gets_nothing_by_default() -> None:
    _, cache = _cache()
    assert cache.default is Unselected.NOTHING
    assert cache.scope_of(OTHER) is None
    view = cache.view(OTHER)
    assert view is not None
    # Every registered type is answered, and empty: a client is told it has nothing.
    for type_url in TYPES:
        assert view.resources(type_url) == {}, type_url
    named = Subscription(frozenset({"a-cert", "b-cert"}))
    selection = view.select(SECRET, named)
    assert selection is not None
    assert len(selection) == 0
    # The empty view lives as long as the process: it keeps no subscription a client sent
    # (nor its selection) once no stream holds it.
    gone = weakref.ref(named)
    del named, selection
    gc.collect()
    assert gone() is None


def test_with_default_everything_an_unscoped_node_sees_the_source() -> None:
    source, cache = _cache(default=Unselected.EVERYTHING)
    assert cache.scope_of(OTHER) is None
    assert cache.view(OTHER) is source.view(OTHER)


def test_the_default_may_name_a_scope() -> None:
    _, cache = _cache(default="team-b")
    assert cache.scope_of(OTHER) == "team-b"
    assert cache.view(OTHER) is cache.view(B1)
    assert _names(cache, OTHER, SECRET) == ["b-cert"]
    with pytest.raises(ValueError, match="'team-c' is not one of the scopes"):
        cache.set_scopes([TEAM_A, TEAM_B], default="team-c")
    with pytest.raises(ValueError, match="'team-b' is not one of the scopes"):
        cache.set_scopes([TEAM_A])  # the default stays, and must still name a scope
    assert cache.scope_of(OTHER) == "team-b"


def test_changing_the_default_wakes_the_unselected_nodes_alone() -> None:
    _, cache = _cache()
    wakes = _counting(cache, A1, B1, OTHER)
    cache.set_scopes([TEAM_A, TEAM_B], default=Unselected.EVERYTHING)
    assert wakes == {"a-1": 0, "b-1": 0, "x-1": 1}
    assert len(_names(cache, OTHER, CLUSTER)) == 6
    cache.set_scopes([TEAM_A, TEAM_B], default="team-a")
    assert wakes == {"a-1": 0, "b-1": 0, "x-1": 2}
    cache.set_scopes([TEAM_A, TEAM_B], default="team-a")
    assert wakes == {"a-1": 0, "b-1": 0, "x-1": 2}
    cache.set_scopes([TEAM_A, TEAM_B], default=Unselected.NOTHING)
    assert wakes == {"a-1": 0, "b-1": 0, "x-1": 3}
    assert _names(cache, OTHER, CLUSTER) == []


def test_one_view_per_scope_shared_with_its_selections() -> None:
    _, cache = _cache()
    first, second = cache.view(A1), cache.view(A2)
    assert first is second
    assert first is not cache.view(B1)
    assert first is not None
    assert first.select(CLUSTER, EVERYTHING) is first.select(CLUSTER, EVERYTHING)
    assert cache.computations == 2


def test_trimmed_routes_are_shared_and_deterministic() -> None:
    _, cache = _cache()
    _source, again = _cache()
    for each in (cache, again):
        view = each.view(A1)
        assert view is not None
    first = (cache.view(A1).resources(ROUTE) or {})["mesh"]  # type: ignore[union-attr]
    other = (again.view(A1).resources(ROUTE) or {})["mesh"]  # type: ignore[union-attr]
    assert first.body == other.body
    assert first.version == other.version


def test_a_host_is_kept_only_when_all_its_clusters_are_visible() -> None:
    config = route_pb2.RouteConfiguration(name="mesh")
    direct = route_components_pb2.VirtualHost(name="static", domains=["static"])
    direct.routes.add().direct_response.status = 200
    config.virtual_hosts.append(direct)
    resources = [r for r in mesh_resources(["a", "b"], 1) if r.type_url != ROUTE]
    mixed = route_with_hosts("unused", [("mixed", ["a/svc-0", "b/svc-0"])])
    mixed_config = route_pb2.RouteConfiguration.FromString(mixed.body)
    config.virtual_hosts.extend(mixed_config.virtual_hosts)
    alone = route_with_hosts("unused", [("alone", ["a/svc-0"])])
    config.virtual_hosts.extend(route_pb2.RouteConfiguration.FromString(alone.body).virtual_hosts)
    _, cache = _cache(Snapshot([*resources, make_resource(config)], types=TYPES))
    view = cache.view(A1)
    assert view is not None
    assert _hosts((view.resources(ROUTE) or {})["mesh"]) == ["static", "alone"]


def _counting(cache: ScopedCache, *nodes: Node) -> dict[str, int]:
    wakes = {node.id: 0 for node in nodes}
    for node in nodes:

        def woken(node_id: str = node.id) -> None:
            wakes[node_id] += 1

        cache.watch(node, woken)
    return wakes


def _move_endpoint(namespace: str, port: int) -> Snapshot:
    resources = []
    for resource in mesh_resources(["a", "b", "shared"], tls=["a", "b"]):
        if resource.type_url == ENDPOINT and resource.name == f"{namespace}/svc-0":
            resource = make_resource(builders.load_assignment(resource.name, [("127.0.0.1", port)]))
        resources.append(resource)
    return Snapshot(resources, types=TYPES)


def test_a_change_wakes_only_the_scopes_that_see_it() -> None:
    source, cache = _cache()
    wakes = _counting(cache, A1, A2, B1, OTHER)
    source.set_snapshot(None, _move_endpoint("b", 9000))
    # A node that gets nothing is never woken.
    assert wakes == {"a-1": 0, "a-2": 0, "b-1": 1, "x-1": 0}
    source.set_snapshot(None, _move_endpoint("shared", 9001))
    assert wakes == {"a-1": 1, "a-2": 1, "b-1": 2, "x-1": 0}
    assert cache.watcher_count() == 4
    assert source.watcher_count() == 3  # one per scope and source group


def test_widening_a_scope_wakes_it_alone() -> None:
    _, cache = _cache()
    wakes = _counting(cache, A1, B1, OTHER)
    wider = Scope(
        name="team-a", nodes=NodeSelector(cluster="a"), egress=("a/*", "shared/*", "b/svc-0")
    )
    cache.set_scopes([wider, TEAM_B])
    assert wakes == {"a-1": 1, "b-1": 0, "x-1": 0}
    assert "b/svc-0" in _names(cache, A1, CLUSTER)
    cache.set_scopes([wider, TEAM_B])
    assert wakes == {"a-1": 1, "b-1": 0, "x-1": 0}
    cache.set_scopes([TEAM_B])  # team-a's nodes are in no scope now: they get nothing
    assert wakes == {"a-1": 2, "b-1": 0, "x-1": 0}
    assert _names(cache, A1, CLUSTER) == []


def test_listener_globs_and_other_types() -> None:
    runtime = make_resource(b"\n\x05layer", type_url=RUNTIME, name="layer")
    snapshot = Snapshot([*mesh_resources(["a"]), runtime], types=TYPES)
    source = SnapshotCache(group=same_for_all)
    source.set_snapshot(None, snapshot)
    hidden = Scope(name="none", listeners=(), egress=())
    cache = ScopedCache(source, [hidden], scope_of=lambda node: "none")
    assert _names(cache, A1, LISTENER) == []
    assert _names(cache, A1, ROUTE) == []
    assert _names(cache, A1, RUNTIME) == ["layer"]  # outside the graph: passed through
    restricted = Scope(name="none", listeners=(), visible={RUNTIME: ("other",)})
    cache.set_scopes([restricted])
    assert _names(cache, A1, RUNTIME) == []


def test_over_a_mux_with_a_linear_cache() -> None:
    resources = mesh_resources(["a", "b"])
    linear = LinearCache(ENDPOINT, [r for r in resources if r.type_url == ENDPOINT])
    snapshots = SnapshotCache(group=same_for_all)
    snapshots.set_snapshot(None, Snapshot([r for r in resources if r.type_url != ENDPOINT]))
    cache = ScopedCache(
        MuxCache({ENDPOINT: linear}, default=snapshots),
        [Scope(name="team-a", nodes={"cluster": "a"}, egress="a/*")],
        group=lambda node: None,
        default=Unselected.EVERYTHING,
    )
    wakes = _counting(cache, A1, B1)
    assert _names(cache, A1, ENDPOINT) == ["a/svc-0", "a/svc-1"]
    linear.set_resource(builders.load_assignment("b/svc-1", [("127.0.0.1", 9)]))
    assert wakes == {"a-1": 0, "b-1": 1}
    linear.set_resource(builders.load_assignment("a/svc-1", [("127.0.0.1", 9)]))
    assert wakes == {"a-1": 1, "b-1": 2}
    assert cache.view(A1) is cache.view(A2)


def test_cancel_ends_the_source_watch() -> None:
    source, cache = _cache()
    cancels = [cache.watch(node, lambda: None) for node in (A1, A2)]
    assert source.watcher_count() == 1
    for cancel in cancels:
        cancel()
        cancel()
    assert source.watcher_count() == 0
    assert cache.watcher_count() == 0


def test_selectors() -> None:
    selector = NodeSelector(cluster="a", id="a-*", metadata={"team": "x"})
    assert selector.matches(Node(id="a-1", cluster="a", metadata={"team": "x"}))
    assert not selector.matches(Node(id="a-1", cluster="a", metadata={"team": "y"}))
    assert not selector.matches(Node(id="b-1", cluster="a", metadata={"team": "x"}))
    assert NodeSelector().matches(Node(id="anything"))
    assert NodeSelector(cluster="a").covers(selector)
    assert not selector.covers(NodeSelector(cluster="a"))
