"""Scopes: each proxy sees only the part of a source cache its scope makes visible.

A :class:`ScopedCache` sits in front of any :class:`~xdscore.cache.Cache`. A function of the
node names its scope; a node it names none for gets what the cache's ``default`` says: no
resource at all (:attr:`Unselected.NOTHING`, the default), the source as it is
(:attr:`Unselected.EVERYTHING`), or a scope's view. A :class:`Scope` says,
per type, which names are visible as *roots* (globs such as ``team-a/*``); everything a
visible resource refers to (wire/_references.py) is visible too, except that a route
configuration does not make clusters visible: it is *trimmed* to the virtual hosts whose
every cluster is visible. Types outside the reference graph (RTDS, VHDS, LEDS) are passed
through whole unless a scope lists them.

What a scope sees is computed once per scope and source state, and shared: every stream of
the scope reads the same view, so they share its memoised selections and their encoded
bodies. A change of the source is compared, per scope, against what the scope saw before
(per-type content versions); a scope whose view did not change wakes none of its streams.
"""

from __future__ import annotations

import enum
import fnmatch
import re
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from types import MappingProxyType

import attrs

from ..protocol._subscription import Subscription
from ..protocol._view import ResourceView, Selection
from ..wire._records import Node
from ..wire._references import trim_route_configuration
from ..wire._resource import Resource
from ..wire._typeurls import (
    CLUSTER,
    ENDPOINT,
    EXTENSION_CONFIG,
    LISTENER,
    ROUTE,
    SCOPED_ROUTE,
    SECRET,
    all_types,
)
from ._interface import Cache, Cancel, Notify
from ._selections import SelectionMemo
from ._watchers import _call

__all__ = [
    "NodeSelector",
    "Scope",
    "ScopedCache",
    "ScopedView",
    "Unselected",
    "first_match",
    "node_field",
]

GRAPH_TYPES = frozenset(
    {LISTENER, ROUTE, SCOPED_ROUTE, CLUSTER, ENDPOINT, SECRET, EXTENSION_CONFIG}
)
"""The types references connect: hidden from a scope unless roots or reached by closure."""

_VIEWS_PER_SCOPE = 4
"""Source states a scope keeps its view of (more than one only for per-node sources)."""
_TRIMMED_LIMIT = 65536
"""Trimmed route configurations kept for reuse, across scopes."""


class Unselected(enum.Enum):
    """What a node sees that no scope selects, unless the cache's ``default`` names a scope."""

    NOTHING = "nothing"
    """No resource: every registered type is answered as empty."""
    EVERYTHING = "everything"
    """The source as it is, as if there were no scopes."""


def node_field(node: Node, field: str) -> str | None:
    """The value of one of the node fields a selector or a binding reads: ``id``,
    ``cluster`` or ``metadata.KEY`` (a metadata value as a string; ``None`` when absent).
    Raises :class:`ValueError` for another name."""
    if field == "id":
        return node.id
    if field == "cluster":
        return node.cluster
    key = field.removeprefix("metadata.")
    if key == field or not key:
        raise ValueError(f"a node field is id, cluster or metadata.KEY, not {field!r}")
    value = node.metadata.get(key)
    return None if value is None else str(value)


def _metadata(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class NodeSelector:
    """Which nodes a scope is for: all given fields must match; an empty selector matches
    every node. ``id`` is a glob; ``metadata`` values are compared as strings."""

    cluster: str | None = None
    id: str | None = None
    metadata: Mapping[str, str] = attrs.field(factory=dict, converter=_metadata, hash=False)

    def matches(self, node: Node) -> bool:
        """Whether ``node`` is one of the nodes this selector picks."""
        if self.cluster is not None and node.cluster != self.cluster:
            return False
        if self.id is not None and not fnmatch.fnmatchcase(node.id, self.id):
            return False
        for key, value in self.metadata.items():
            found = node.metadata.get(key)
            if found is None or str(found) != value:
                return False
        return True

    @property
    def fields(self) -> frozenset[str]:
        """The node fields this selector reads (``id``, ``cluster``, ``metadata.KEY``): a
        client that may choose any of them may choose whether it is selected."""
        fields = {f"metadata.{key}" for key in self.metadata}
        if self.cluster is not None:
            fields.add("cluster")
        if self.id is not None:
            fields.add("id")
        return frozenset(fields)

    def covers(self, other: NodeSelector) -> bool:
        """Whether every node ``other`` matches is matched by this selector too (a sound,
        not complete, check: an id glob covers another only when they are equal or the
        glob is ``*``)."""
        if self.cluster is not None and self.cluster != other.cluster:
            return False
        if self.id is not None and self.id != "*" and self.id != other.id:
            return False
        return all(other.metadata.get(key) == value for key, value in self.metadata.items())


def _selector(value: NodeSelector | Mapping[str, object]) -> NodeSelector:
    if isinstance(value, NodeSelector):
        return value
    return NodeSelector(**value)  # type: ignore[arg-type]


def _globs(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _visible(value: Mapping[str, Iterable[str]]) -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType({type_url: _globs(globs) for type_url, globs in value.items()})


@attrs.frozen(kw_only=True)
class Scope:
    """What the proxies of one scope see.

    ``egress`` globs pick the visible clusters, ``listeners`` globs the visible listeners
    (all by default); ``visible`` adds roots of any type by type URL (a type it lists,
    outside the reference graph, is then restricted to its globs). Closure adds the rest.
    """

    name: str
    nodes: NodeSelector = attrs.field(factory=NodeSelector, converter=_selector)
    """Which nodes the scope is for (a :class:`NodeSelector` or the mapping of its fields)."""
    egress: tuple[str, ...] = attrs.field(default=(), converter=_globs)
    listeners: tuple[str, ...] = attrs.field(default=("*",), converter=_globs)
    visible: Mapping[str, tuple[str, ...]] = attrs.field(
        factory=dict, converter=_visible, hash=False
    )

    def roots(self) -> dict[str, tuple[str, ...]]:
        """The globs of the root names, by type URL."""
        roots = {LISTENER: self.listeners, CLUSTER: self.egress}
        for type_url, globs in self.visible.items():
            roots[type_url] = (*roots.get(type_url, ()), *globs)
        return roots


def first_match(scopes: Iterable[Scope]) -> Callable[[Node], str | None]:
    """The scope function of a list of scopes: the first whose selector matches."""
    ordered = tuple(scopes)

    def scope_of(node: Node) -> str | None:
        for scope in ordered:
            if scope.nodes.matches(node):
                return scope.name
        return None

    return scope_of


class _Rule:
    """A scope compiled: one regular expression per type of roots."""

    __slots__ = ("open_types", "patterns", "scope")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.patterns: dict[str, re.Pattern[str]] = {
            type_url: re.compile("|".join(fnmatch.translate(g) for g in globs) or "(?!)")
            for type_url, globs in scope.roots().items()
        }

    def passes(self, type_url: str) -> bool:
        """Whether ``type_url`` is served whole (outside the graph and not restricted)."""
        return type_url not in GRAPH_TYPES and type_url not in self.patterns


class _TypeView:
    """One type of a scoped view: its resources, content version and selections."""

    __slots__ = ("__weakref__", "_memo", "resources", "versions")

    def __init__(self, resources: Mapping[str, Resource]) -> None:
        self.resources = resources
        self.versions = {name: resource.version for name, resource in resources.items()}
        self._memo = SelectionMemo()

    def select(self, type_url: str, subscription: Subscription) -> Selection:
        return self._memo.select(type_url, self.resources, subscription)


class ScopedView:
    """What one scope sees of one source state; shared by every stream of the scope."""

    __slots__ = ("_types", "scope")

    def __init__(self, scope: str, types: Mapping[str, _TypeView]) -> None:
        self.scope = scope
        self._types = types

    def resources(self, type_url: str) -> Mapping[str, Resource] | None:
        state = self._types.get(type_url)
        return state.resources if state is not None else None

    def select(self, type_url: str, subscription: Subscription) -> Selection | None:
        state = self._types.get(type_url)
        return state.select(type_url, subscription) if state is not None else None

    def changed_since(
        self, type_url: str, previous: Mapping[str, Resource]
    ) -> frozenset[str] | None:
        state = self._types.get(type_url)
        if state is None:
            return None
        return frozenset() if previous is state.resources else None

    def versions(self, type_url: str) -> Mapping[str, str] | None:
        """The version of each visible resource of ``type_url``, by name."""
        state = self._types.get(type_url)
        return state.versions if state is not None else None

    @property
    def type_urls(self) -> frozenset[str]:
        """The types this view answers."""
        return frozenset(self._types)


_Inputs = tuple[int, ...]


@attrs.define(eq=False)
class _Entry:
    """A scope's view of one source state, and the source mappings it was made from (held,
    so that their ids stay theirs)."""

    view: ScopedView
    sources: tuple[Mapping[str, Resource] | None, ...]


class _Audience:
    """The streams of one scope whose nodes share one source view: one source watch."""

    __slots__ = ("cancel", "key", "last", "members", "node")

    def __init__(self, key: tuple[str | None, Hashable], node: Node) -> None:
        self.key = key
        self.node = node
        self.members: dict[int, tuple[Node, Notify]] = {}
        self.cancel: Cancel | None = None
        self.last: ScopedView | None = None


class ScopedCache(Cache):
    """A :class:`~xdscore.cache.Cache` showing each node what its scope makes visible of
    ``source``.

    ``scope_of`` names a node's scope (by default the first scope whose ``nodes`` selector
    matches). A node without one, or whose scope is not listed, gets what ``default`` says:
    nothing (:attr:`Unselected.NOTHING`, the default: every registered type is empty for
    it), the source as it is (:attr:`Unselected.EVERYTHING`), or the view of the scope it
    names. ``group`` says which nodes the source gives the same view (by default the
    source's own ``key`` function, as :class:`~xdscore.cache.SnapshotCache` has, else every
    node on its own); nodes of one scope and one group share one view and one source watch.
    Call it from the event loop's thread.
    """

    def __init__(
        self,
        source: Cache,
        scopes: Iterable[Scope] = (),
        *,
        scope_of: Callable[[Node], str | None] | None = None,
        group: Callable[[Node], Hashable] | None = None,
        default: Unselected | str = Unselected.NOTHING,
    ) -> None:
        self.source = source
        self._default: Unselected | str = Unselected.NOTHING
        self._passes_unselected = False
        """Whether a node no scope selects sees the source as it is (``EVERYTHING``)."""
        if group is None:
            key = getattr(source, "key", None)
            group = key if callable(key) else _each_node
        self._group: Callable[[Node], Hashable] = group
        self._rules: dict[str, _Rule] = {}
        self._scopes: tuple[Scope, ...] = ()
        self._scope_of: Callable[[Node], str | None] = first_match(())
        self._custom_scope_of = scope_of is not None
        self._node_scopes: dict[Node, str | None] = {}
        self._entries: dict[str, OrderedDict[_Inputs, _Entry]] = {}
        self._latest: dict[str, ScopedView] = {}
        self._latest_sources: dict[str, Mapping[str, Mapping[str, Resource] | None]] = {}
        self._wanted: dict[str, dict[str, frozenset[str]]] = {}
        self._differences: dict[
            str, tuple[Mapping[str, Resource], Mapping[str, Resource], frozenset[str]]
        ] = {}
        self._trimmed: OrderedDict[tuple[str, str, frozenset[str]], Resource] = OrderedDict()
        self._audiences: dict[tuple[str | None, Hashable], _Audience] = {}
        self._tokens = 0
        self._generation = 0
        self._name_tokens: dict[str, tuple[Mapping[str, Resource], int]] = {}
        self._root_names: dict[tuple[str, str], tuple[int, tuple[str, ...]]] = {}
        self.computations = 0
        """How many scoped views were computed (for tests and benchmarks)."""
        self.set_scopes(scopes, scope_of=scope_of, default=default)

    # -- rules -------------------------------------------------------------------------------

    @property
    def scopes(self) -> tuple[Scope, ...]:
        """The scopes, in the order given."""
        return self._scopes

    @property
    def default(self) -> Unselected | str:
        """What a node no scope selects gets: nothing, everything, or a scope's name."""
        return self._default

    def set_scopes(
        self,
        scopes: Iterable[Scope],
        *,
        scope_of: Callable[[Node], str | None] | None = None,
        default: Unselected | str | None = None,
    ) -> None:
        """Replace the scopes (and the scope function and the ``default``, if given); the
        streams whose scope or view changed are told to look again, the others are not.
        Raises :class:`ValueError` for scopes with the same name, or a ``default`` that
        names no scope."""
        scopes = tuple(scopes)
        names = [scope.name for scope in scopes]
        if len(set(names)) != len(names):
            raise ValueError(f"scope names must be unique: {names}")
        default = self._default if default is None else default
        if isinstance(default, str) and default not in names:
            raise ValueError(f"the default scope {default!r} is not one of the scopes {names}")
        old_default, self._default = self._default, default
        self._passes_unselected = default is Unselected.EVERYTHING
        self._scopes = scopes
        old_rules = self._rules
        self._rules = {scope.name: _Rule(scope) for scope in self._scopes}
        if scope_of is not None:
            self._scope_of = scope_of
            self._custom_scope_of = True
        elif not self._custom_scope_of:
            self._scope_of = first_match(self._scopes)
        self._node_scopes.clear()
        for name in list(self._entries):
            old = old_rules.get(name)
            if old is None or name not in self._rules or old.scope != self._rules[name].scope:
                del self._entries[name]
                self._latest.pop(name, None)
                self._latest_sources.pop(name, None)
                self._wanted.pop(name, None)
                for type_url in list(old.patterns if old is not None else ()):
                    self._root_names.pop((name, type_url), None)
        old_audiences, self._audiences = self._audiences, {}
        woken: list[Notify] = []
        for old_key, audience in old_audiences.items():
            if audience.cancel is not None:
                audience.cancel()
            for token, (node, notify) in audience.members.items():
                key = self._join(token, node, notify)
                if key != old_key:
                    woken.append(notify)
                elif key[0] is None:
                    if default is not old_default:
                        woken.append(notify)
                elif not _same_or_none(audience.last, self._audiences[key].last):
                    woken.append(notify)
        for notify in woken:
            _call(notify)

    def scope_of(self, node: Node) -> str | None:
        """The scope ``node`` is in (the default scope for a node no scope selects, when
        ``default`` names one), or ``None``: it gets nothing or everything, as ``default``
        says."""
        # Remembered only for nodes read off the wire, whose encoding covers their metadata.
        if node.raw:
            try:
                return self._node_scopes[node]
            except KeyError:
                pass
        name = self._scope_of(node)
        if name is not None and name not in self._rules:
            name = None
        if name is None and isinstance(self._default, str):
            name = self._default
        if node.raw:
            if len(self._node_scopes) >= 65536:
                self._node_scopes.clear()
            self._node_scopes[node] = name
        return name

    # -- the Cache protocol ------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether the source is ready."""
        return bool(getattr(self.source, "ready", True))

    def view(self, node: Node) -> ResourceView | None:
        """What ``node``'s scope sees now; for a node in no scope, nothing (an empty view)
        or the source's own view, as ``default`` says."""
        name = self.scope_of(node)
        source = self.source.view(node)
        if name is None:
            return source if self._passes_unselected or source is None else _NOTHING
        return self._scoped(name, source) if source is not None else None

    def scope_view(self, name: str, node: Node) -> ScopedView | None:
        """What scope ``name`` sees of the source view of ``node`` (for tools and tests)."""
        source = self.source.view(node)
        if source is None or name not in self._rules:
            return None
        return self._scoped(name, source)

    def watch(self, node: Node, notify: Notify) -> Cancel:
        """Call ``notify`` when what ``node`` sees may have changed: for a scoped node, only
        when its scope's view did."""
        self._tokens += 1
        token = self._tokens
        self._join(token, node, notify)

        def cancel() -> None:
            for key, audience in list(self._audiences.items()):
                if audience.members.pop(token, None) is not None:
                    if not audience.members:
                        del self._audiences[key]
                        if audience.cancel is not None:
                            audience.cancel()
                    return

        return cancel

    def on_update(self, callback: Callable[[str], None]) -> Cancel:
        """Forward ``callback`` to the source, when it reports its updates."""
        observe = getattr(self.source, "on_update", None)
        if observe is None:
            return lambda: None
        cancel: Cancel = observe(callback)
        return cancel

    def watcher_count(self) -> int:
        """How many streams are watching."""
        return sum(len(audience.members) for audience in self._audiences.values())

    # -- watching ----------------------------------------------------------------------------

    def _join(self, token: int, node: Node, notify: Notify) -> tuple[str | None, Hashable]:
        key = (self.scope_of(node), self._group(node))
        audience = self._audiences.get(key)
        if audience is None:
            audience = self._audiences[key] = _Audience(key, node)
            audience.last = self._current(audience)
            audience.cancel = self.source.watch(node, lambda: self._changed(key))
        audience.members[token] = (node, notify)
        return key

    def _current(self, audience: _Audience) -> ScopedView | None:
        """The audience's scoped view (or the empty one); ``None`` for nodes that see the
        source as it is, or while the source has no view."""
        name = audience.key[0]
        if name is None and self._passes_unselected:
            return None
        source = self.source.view(audience.node)
        if source is None:
            return None
        return self._scoped(name, source) if name is not None else _NOTHING

    def _refresh(self, audience: _Audience) -> bool:
        """Whether the audience's view changed since it last looked (and remember it)."""
        if audience.key[0] is None and self._passes_unselected:
            return True
        view = self._current(audience)
        before, audience.last = audience.last, view
        if view is before:
            return False
        if view is None or before is None:
            return True
        return not _same(before, view)

    def _changed(self, key: tuple[str | None, Hashable]) -> None:
        audience = self._audiences.get(key)
        if audience is None or not self._refresh(audience):
            return
        for _, notify in list(audience.members.values()):
            _call(notify)

    # -- computing a scope's view ------------------------------------------------------------

    def _types(self, rule: _Rule) -> list[str]:
        extra = [url for url in rule.patterns if url not in _REGISTERED]
        return [*_REGISTERED, *extra]

    def _scoped(self, name: str, source: ResourceView) -> ScopedView:
        rule = self._rules[name]
        types = self._types(rule)
        sources = tuple(source.resources(type_url) for type_url in types)
        inputs = tuple(map(id, sources))
        entries = self._entries.setdefault(name, OrderedDict())
        entry = entries.get(inputs)
        if entry is not None:
            entries.move_to_end(inputs)
            return entry.view
        by_type = dict(zip(types, sources, strict=True))
        view = self._carried(name, rule, by_type)
        if view is None:
            view = self._compute(name, rule, by_type)
        self._latest_sources[name] = by_type
        entries[inputs] = _Entry(view, sources)
        while len(entries) > _VIEWS_PER_SCOPE:
            entries.popitem(last=False)
        return view

    def _carried(
        self, name: str, rule: _Rule, sources: Mapping[str, Mapping[str, Resource] | None]
    ) -> ScopedView | None:
        """The scope's latest view, when nothing that changed in the source since it was
        computed is visible to the scope or could become so: O(what changed), the
        differences of the source being computed once for every scope."""
        view = self._latest.get(name)
        before = self._latest_sources.get(name)
        if view is None or before is None or before.keys() != sources.keys():
            return None
        wanted = self._wanted.get(name)
        if wanted is None:
            return None
        for type_url, held in sources.items():
            old = before[type_url]
            if old is held:
                continue
            if old is None or held is None:
                return None
            if rule.passes(type_url):
                if self._difference(type_url, old, held):
                    return None
                continue
            visible = view._types.get(type_url)
            pattern = rule.patterns.get(type_url)
            refers = wanted.get(type_url, frozenset())
            for changed in self._difference(type_url, old, held):
                if visible is not None and changed in visible.resources:
                    return None
                if changed in refers or (pattern is not None and pattern.fullmatch(changed)):
                    return None
        return view

    def _difference(
        self, type_url: str, old: Mapping[str, Resource], new: Mapping[str, Resource]
    ) -> frozenset[str]:
        """Names added, changed (another object) or removed between two source mappings."""
        last = self._differences.get(type_url)
        if last is not None and last[0] is old and last[1] is new:
            return last[2]
        changed = {name for name, resource in new.items() if old.get(name) is not resource}
        changed.update(name for name in old if name not in new)
        found = frozenset(changed)
        self._differences[type_url] = (old, new, found)
        return found

    def _compute(
        self, name: str, rule: _Rule, sources: Mapping[str, Mapping[str, Resource] | None]
    ) -> ScopedView:
        self.computations += 1
        seen: dict[str, dict[str, Resource]] = {}
        todo: list[Resource] = []

        def reach(resource: Resource) -> None:
            names = seen.setdefault(resource.type_url, {})
            if resource.name not in names:
                names[resource.name] = resource
                todo.append(resource)

        for type_url, pattern in rule.patterns.items():
            held = sources.get(type_url)
            if held is None:
                continue
            for root in self._roots(name, type_url, pattern, held):
                reach(held[root])
        while todo:
            resource = todo.pop()
            for ref in resource.references:
                if resource.type_url == ROUTE and ref.type_url == CLUSTER:
                    continue  # routes are trimmed to the clusters visible otherwise
                target = sources.get(ref.type_url)
                found = target.get(ref.name) if target is not None else None
                if found is not None:
                    reach(found)
        wanted: dict[str, set[str]] = {}
        for names in seen.values():
            for resource in names.values():
                for ref in resource.references:
                    if not (resource.type_url == ROUTE and ref.type_url == CLUSTER):
                        wanted.setdefault(ref.type_url, set()).add(ref.name)
        self._wanted[name] = {t: frozenset(n) for t, n in wanted.items()}
        clusters = frozenset(seen.get(CLUSTER, ()))
        routes = seen.get(ROUTE)
        if routes:
            for route_name, route in list(routes.items()):
                routes[route_name] = self._trim(route, clusters)
        previous = self._latest.get(name)
        types: dict[str, _TypeView] = {}
        for type_url, held in sources.items():
            if held is None:
                continue
            if rule.passes(type_url):
                chosen: Mapping[str, Resource] = held
            else:
                chosen = {n: seen[type_url][n] for n in sorted(seen.get(type_url, ()))}
            before = previous._types.get(type_url) if previous is not None else None
            if before is not None and (
                before.resources is chosen or before.versions == _versions(chosen)
            ):
                types[type_url] = before
            else:
                frozen = chosen if rule.passes(type_url) else MappingProxyType(chosen)
                types[type_url] = _TypeView(frozen)
        if previous is not None and previous._types == types:
            return previous
        view = ScopedView(name, types)
        self._latest[name] = view
        return view

    def _roots(
        self, scope: str, type_url: str, pattern: re.Pattern[str], held: Mapping[str, Resource]
    ) -> tuple[str, ...]:
        """The names of ``held`` that ``pattern`` matches, matched again only when the
        names of the type changed (the token is shared by every scope)."""
        last = self._name_tokens.get(type_url)
        if last is not None and (last[0] is held or last[0].keys() == held.keys()):
            token = last[1]
        else:
            self._generation += 1
            token = self._generation
        self._name_tokens[type_url] = (held, token)
        cached = self._root_names.get((scope, type_url))
        if cached is not None and cached[0] == token:
            return cached[1]
        names = tuple(n for n in held if pattern.fullmatch(n))
        self._root_names[(scope, type_url)] = (token, names)
        return names

    def _trim(self, route: Resource, clusters: frozenset[str]) -> Resource:
        wanted = frozenset(ref.name for ref in route.references if ref.type_url == CLUSTER)
        if wanted <= clusters:
            return route
        key = (route.name, route.version, wanted & clusters)
        trimmed = self._trimmed.get(key)
        if trimmed is None:
            body = trim_route_configuration(route.body, lambda used: used <= clusters)
            trimmed = Resource(type_url=ROUTE, name=route.name, body=body, aliases=route.aliases)
            self._trimmed[key] = trimmed
            while len(self._trimmed) > _TRIMMED_LIMIT:
                self._trimmed.popitem(last=False)
        return trimmed


_REGISTERED = tuple(info.type_url for info in all_types())


_NOTHING = ScopedView("", {type_url: _TypeView(MappingProxyType({})) for type_url in _REGISTERED})
"""What a node gets that no scope selects, by default: every registered type, empty."""


def _each_node(node: Node) -> Hashable:
    return node


def _same_or_none(before: ScopedView | None, after: ScopedView | None) -> bool:
    if before is None or after is None:
        return before is after
    return before is after or _same(before, after)


def _versions(resources: Mapping[str, Resource]) -> dict[str, str]:
    return {name: resource.version for name, resource in resources.items()}


def _same(before: ScopedView, after: ScopedView) -> bool:
    """Whether two views of one scope show the same content (per-type versions)."""
    if before._types.keys() != after._types.keys():
        return False
    for type_url, state in after._types.items():
        old = before._types[type_url]
        if old is not state and old.versions != state.versions:
            return False
    return True
