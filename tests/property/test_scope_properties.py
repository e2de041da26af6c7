"""Properties of the scoped cache, over random namespaced meshes and random scopes.

A mesh is drawn as a table: per namespace, its services (each a cluster ``ns/svc-i`` with
endpoints on some port), whether its clusters use TLS (a secret per namespace), and extra
virtual hosts routing to one or two clusters of any namespace. Scopes are lists of egress
globs. The stateful suite changes the mesh and the scopes and watches one node per scope;
after every step its ``@invariant`` methods check, against a model of visibility written
here from the issue (not from the cache):

* ``scope01_never_shows_an_invisible_resource``: a scoped view holds exactly the model's
  visible names, of the source's content (a route configuration: trimmed);
* ``scope02_closure_is_complete``: everything a visible resource refers to is visible;
* ``scope03_invisible_change_wakes_nobody``: a step that left a scope's view as it was
  woke none of its watchers, and one that changed it woke them;
* ``scope05_an_unselected_node_gets_nothing``: a node no scope selects holds an empty
  (authoritative) view of every registered type, whatever the mesh and the scopes, and is
  never woken;

and ``test_scope04_scoped_and_unscoped_streams_agree`` runs an Envoy-like client in a scope
and one outside any scope against one source, and checks that what the scoped one holds is
what the unscoped one holds, restricted to the scope.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence

import attrs
from envoy.config.route.v3 import route_pb2
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    SECRET,
    Node,
    Resource,
    Snapshot,
    builders,
    make_resource,
)
from xdscore.cache import Scope, ScopedCache, SnapshotCache, Unselected, by_node_id, same_for_all
from xdscore.testing import SotwPair
from xdscore.testing.cache_contract import cache_contract
from xdscore.wire import all_types, make_node

from ..factories import secret, tls_cluster
from ..scope_mesh import route_with_hosts
from ._model import STATEFUL
from .test_cache_contract import GROUPS, snapshot_ops

NAMESPACES = ("a", "b", "c", "shared")
TYPES = [info.type_url for info in all_types()]


@attrs.frozen
class Mesh:
    """Services per namespace (their endpoint ports), TLS namespaces, extra virtual hosts."""

    services: Mapping[str, tuple[int, ...]]
    tls: frozenset[str] = frozenset()
    extra: tuple[tuple[str, ...], ...] = ()

    def clusters(self) -> list[str]:
        return [f"{ns}/svc-{i}" for ns, ports in self.services.items() for i in range(len(ports))]

    def resources(self) -> list[Resource]:
        out: list[Resource] = []
        hosts: list[tuple[str, Sequence[str]]] = []
        for ns, ports in self.services.items():
            if ns in self.tls and ports:
                out.append(_resource(("secret", ns)))
            for index, port in enumerate(ports):
                name = f"{ns}/svc-{index}"
                out.append(_resource(("cluster", name, ns in self.tls)))
                out.append(_resource(("endpoints", name, port)))
                hosts.append((f"svc-{index}.{ns}", [name]))
        known = set(self.clusters())
        for index, clusters in enumerate(self.extra):
            if clusters and set(clusters) <= known:
                hosts.append((f"extra-{index}", clusters))
        out.append(route_with_hosts("mesh", hosts))
        out.append(_resource(("listener",)))
        return out

    def snapshot(self) -> Snapshot:
        return Snapshot(self.resources(), types=TYPES)


_BUILT: dict[tuple[object, ...], Resource] = {}


def _resource(key: tuple[object, ...]) -> Resource:
    """Resources built once per content, so that equal content is one object."""
    found = _BUILT.get(key)
    if found is None:
        kind = key[0]
        if kind == "secret":
            found = make_resource(secret(f"{key[1]}-cert"))
        elif kind == "cluster":
            name = str(key[1])
            message = (
                tls_cluster(name, certificates=[f"{name.split('/')[0]}-cert"])
                if key[2]
                else builders.eds_cluster(name)
            )
            found = make_resource(message)
        elif kind == "endpoints":
            found = make_resource(builders.load_assignment(str(key[1]), [("127.0.0.1", key[2])]))  # type: ignore[list-item]
        else:
            found = make_resource(builders.http_listener("ingress", 10000, "mesh"))
        _BUILT[key] = found
    return found


PORTS = st.integers(8000, 8003)
CLUSTER_NAMES = st.sampled_from([f"{ns}/svc-{i}" for ns in NAMESPACES for i in range(3)])


@st.composite
def meshes(draw: st.DrawFn) -> Mesh:
    services = {
        ns: tuple(draw(st.lists(PORTS, max_size=3)))
        for ns in draw(st.lists(st.sampled_from(NAMESPACES), unique=True, max_size=4))
    }
    tls = frozenset(draw(st.lists(st.sampled_from(NAMESPACES), max_size=2)))
    extra = tuple(
        tuple(draw(st.lists(CLUSTER_NAMES, min_size=1, max_size=2, unique=True)))
        for _ in range(draw(st.integers(0, 3)))
    )
    return Mesh(services, tls, extra)


GLOBS = st.sampled_from(
    ["a/*", "b/*", "c/*", "shared/*", "a/svc-0", "b/svc-1", "*", "nowhere/*", "*/svc-2"]
)
EGRESS = st.lists(GLOBS, max_size=3)


# -- the model -------------------------------------------------------------------------------


def model_visible(mesh: Mesh, egress: Sequence[str]) -> dict[str, set[str]]:
    """What a scope with ``egress`` sees of ``mesh``, from the rules of the issue: every
    listener, the clusters the egress globs match, their endpoints and secrets, and the
    route configurations the listeners name."""
    clusters = {c for c in mesh.clusters() if any(fnmatch.fnmatchcase(c, g) for g in egress)}
    secrets = {f"{c.split('/')[0]}-cert" for c in clusters if c.split("/")[0] in mesh.tls}
    return {
        LISTENER: {"ingress"},
        ROUTE: {"mesh"},
        CLUSTER: clusters,
        ENDPOINT: set(clusters),
        SECRET: secrets,
    }


def trimmed_hosts(mesh: Mesh, visible_clusters: set[str]) -> list[str]:
    """The virtual hosts of ``mesh`` whose every cluster is visible, in order."""
    config = route_pb2.RouteConfiguration.FromString(
        next(r for r in mesh.resources() if r.type_url == ROUTE).body
    )
    return [
        host.name
        for host in config.virtual_hosts
        if all(route.route.cluster in visible_clusters for route in host.routes)
    ]


def host_names(resource: Resource) -> list[str]:
    return [h.name for h in route_pb2.RouteConfiguration.FromString(resource.body).virtual_hosts]


# -- the stateful suite ----------------------------------------------------------------------


class ScopedCacheMachine(RuleBasedStateMachine):
    """One source snapshot cache, a scoped cache over it with three scopes (and the
    default for a node none selects: nothing), one watched node per scope and one outside
    any."""

    @initialize(mesh=meshes(), egress=st.lists(EGRESS, min_size=3, max_size=3))
    def start(self, mesh: Mesh, egress: list[list[str]]) -> None:
        self.mesh = mesh
        self.egress = {f"s{i}": list(globs) for i, globs in enumerate(egress)}
        self.source = SnapshotCache(group=same_for_all)
        self.source.set_snapshot(None, mesh.snapshot())
        self.cache = ScopedCache(self.source, self._scopes())
        self.nodes = {name: Node(id=f"{name}-1", cluster=name) for name in self.egress}
        self.wakes = dict.fromkeys(self.egress, 0)
        for name, node in self.nodes.items():
            self.cache.watch(node, lambda name=name: self._woken(name))  # type: ignore[misc]
        self.outside = Node(id="outside-1", cluster="outside")
        self.outside_wakes = 0
        self.cache.watch(self.outside, self._outside_woken)
        self.before = self._contents()
        self.after = self.before

    def _scopes(self) -> list[Scope]:
        return [
            Scope(name=name, nodes={"cluster": name}, egress=globs)
            for name, globs in self.egress.items()
        ]

    def _woken(self, name: str) -> None:
        self.wakes[name] += 1

    def _outside_woken(self) -> None:
        self.outside_wakes += 1

    def _contents(self) -> dict[str, dict[str, dict[str, str]]]:
        out = {}
        for name, node in self.nodes.items():
            view = self.cache.view(node)
            assert view is not None
            out[name] = {
                t: {n: r.version for n, r in (view.resources(t) or {}).items()} for t in TYPES
            }
        return out

    def _step(self) -> None:
        self.before = self.after
        self.wakes = dict.fromkeys(self.egress, 0)

    @rule(mesh=meshes())
    def replace_mesh(self, mesh: Mesh) -> None:
        self._step()
        self.mesh = mesh
        self.source.set_snapshot(None, mesh.snapshot())
        self.after = self._contents()

    @rule(data=st.data())
    def move_an_endpoint(self, data: st.DataObject) -> None:
        choices = [(ns, i) for ns, ports in self.mesh.services.items() for i in range(len(ports))]
        if not choices:
            return
        ns, index = data.draw(st.sampled_from(choices))
        ports = list(self.mesh.services[ns])
        ports[index] = data.draw(PORTS)
        self._step()
        self.mesh = attrs.evolve(self.mesh, services={**self.mesh.services, ns: tuple(ports)})
        self.source.set_snapshot(None, self.mesh.snapshot())
        self.after = self._contents()

    @rule(scope=st.sampled_from(["s0", "s1", "s2"]), globs=EGRESS)
    def change_egress(self, scope: str, globs: list[str]) -> None:
        self._step()
        self.egress[scope] = list(globs)
        self.cache.set_scopes(self._scopes())
        self.after = self._contents()

    @invariant()
    def scope01_never_shows_an_invisible_resource(self) -> None:
        for name, node in self.nodes.items():
            view = self.cache.view(node)
            assert view is not None
            wanted = model_visible(self.mesh, self.egress[name])
            for type_url in TYPES:
                held = set(view.resources(type_url) or {})
                assert held == wanted.get(type_url, set()), (name, type_url)
            route = (view.resources(ROUTE) or {})["mesh"]
            assert host_names(route) == trimmed_hosts(self.mesh, wanted[CLUSTER])

    @invariant()
    def scope02_closure_is_complete(self) -> None:
        for node in self.nodes.values():
            view = self.cache.view(node)
            assert view is not None
            for type_url in TYPES:
                for resource in (view.resources(type_url) or {}).values():
                    for ref in resource.references:
                        assert ref.name in (view.resources(ref.type_url) or {}), (
                            resource.name,
                            ref,
                        )

    @invariant()
    def scope03_invisible_change_wakes_nobody(self) -> None:
        for name in self.nodes:
            if self.before[name] == self.after[name]:
                assert self.wakes[name] == 0, name
            else:
                assert self.wakes[name] >= 1, name

    @invariant()
    def scope05_an_unselected_node_gets_nothing(self) -> None:
        assert self.cache.scope_of(self.outside) is None
        view = self.cache.view(self.outside)
        assert view is not None
        for type_url in TYPES:
            assert view.resources(type_url) == {}, type_url
        assert self.outside_wakes == 0


TestScopedCache = ScopedCacheMachine.TestCase
TestScopedCache.settings = STATEFUL


# -- scoped and unscoped streams -------------------------------------------------------------


def _converge(pair: SotwPair) -> None:
    """Subscribe like Envoy (wildcard LDS and CDS, then what they refer to) until settled."""
    for type_url in (LISTENER, CLUSTER):
        pair.send(pair.client.watch(type_url, None))
    watched: dict[str, frozenset[str]] = {}
    for _ in range(10):
        pair.settle()
        wanted: dict[str, set[str]] = {}
        for type_url in pair.client.type_urls():
            for resource in pair.client.holds(type_url).values():
                for ref in resource.references:
                    wanted.setdefault(ref.type_url, set()).add(ref.name)
        changed = False
        for type_url in set(watched) - set(wanted):
            wanted[type_url] = set()
        for type_url, names in wanted.items():
            if type_url in (LISTENER, CLUSTER) or watched.get(type_url) == names:
                continue
            watched[type_url] = frozenset(names)
            pair.send(pair.client.watch(type_url, sorted(names)))
            changed = True
        if not changed:
            return
    raise AssertionError("the client did not converge")


def _followed(pair: SotwPair, type_url: str) -> dict[str, Resource]:
    """What the client holds of ``type_url`` and uses: all of a wildcard type, else the
    names something it holds refers to (as Envoy keeps them)."""
    held = pair.client.holds(type_url)
    if type_url in (LISTENER, CLUSTER):
        return dict(held)
    used = {
        ref.name
        for other in pair.client.type_urls()
        for resource in pair.client.holds(other).values()
        for ref in resource.references
        if ref.type_url == type_url
    }
    return {name: resource for name, resource in held.items() if name in used}


@settings(max_examples=40, deadline=None)
@given(mesh=meshes(), egress=EGRESS, change=st.none() | meshes())
def test_scope04_scoped_and_unscoped_streams_agree(
    mesh: Mesh, egress: list[str], change: Mesh | None
) -> None:
    source = SnapshotCache(group=same_for_all)
    source.set_snapshot(None, mesh.snapshot())
    cache = ScopedCache(
        source,
        [Scope(name="in", nodes={"cluster": "in"}, egress=egress)],
        default=Unselected.EVERYTHING,
    )
    inside, outside = make_node(id="1", cluster="in"), make_node(id="2", cluster="out")
    scoped = SotwPair(lambda: cache.view(inside), node=inside)
    unscoped = SotwPair(lambda: cache.view(outside), node=outside)
    _converge(scoped)
    _converge(unscoped)
    if change is not None:
        mesh = change
        source.set_snapshot(None, mesh.snapshot())
        _converge(scoped)
        _converge(unscoped)
    visible = model_visible(mesh, egress)
    for type_url in (LISTENER, ROUTE, CLUSTER, ENDPOINT, SECRET):
        mine = _followed(scoped, type_url)
        theirs = _followed(unscoped, type_url)
        assert set(mine) == visible[type_url] & set(theirs), type_url
        for name, resource in mine.items():
            if type_url == ROUTE:
                assert host_names(resource) == [
                    h
                    for h in host_names(theirs[name])
                    if h in trimmed_hosts(mesh, visible[CLUSTER])
                ]
            else:
                assert resource.body == theirs[name].body, (type_url, name)


# -- the cache contract, for nodes outside every scope ----------------------------------------

TestScopedCachePassThrough = cache_contract(
    lambda: SnapshotCache(group=by_node_id),
    snapshot_ops(GROUPS),
    group=by_node_id,
    as_cache=lambda source: ScopedCache(
        source, [Scope(name="x", nodes={"cluster": "nobody"})], default=Unselected.EVERYTHING
    ),
)
"""With ``default=EVERYTHING``, a node no scope selects sees the source as it is: the
contract of the source holds."""
