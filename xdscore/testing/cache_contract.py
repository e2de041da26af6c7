"""A stateful contract any [`Cache`][xdscore.Cache] implementation can run against itself.

`cache_contract` builds a hypothesis ``RuleBasedStateMachine`` (returned as a
``unittest.TestCase`` class, which pytest collects) that writes to a fresh cache in random
ways, takes views, reads them, watches and cancels, and checks after every step that:

* a view reflects every write made before it was taken, and types the cache is not
  authoritative for give ``None`` (from ``resources`` and ``select`` alike);
* a view never changes once taken, whatever is written later;
* ``select`` agrees with ``resources``, returns the same object for equal arguments on one
  view, and versions name contents: equal contents, equal versions; different, different;
* ``resources`` returns the same mapping each time on one view, and ``changed_since``
  (when the view has it) names at least every name that differs from an earlier view;
* ``watch`` callbacks run synchronously during a write that changes what their node sees,
  see the new state when they read the cache, and never run for a write that touches only
  other groups of nodes or for a read; a cancelled watch never runs again, and cancelling
  twice is harmless to every other watch (the same callable may be registered twice);
* a raising callback neither stops the other callbacks nor the write.

The cache under test is described by *write operations*: each names itself, draws its
arguments from a strategy, writes them to the cache, and tells an `Expected` what
every group of nodes should now see. Example::

    def set_snapshot(cache: SnapshotCache, args: tuple[str, Snapshot], expected: Expected):
        key, snapshot = args
        cache.set_snapshot(key, snapshot)
        expected.set_view(key, {t: snapshot.resources(t) or {} for t in snapshot.type_urls})

    TestMyCache = cache_contract(
        lambda: SnapshotCache(),
        [WriteOp("set_snapshot", st.tuples(st.sampled_from(["a", "b"]), snapshots()),
                 set_snapshot)],
        nodes=[make_node(id="a"), make_node(id="b")],
        group=lambda node: node.id,
    )
"""

from __future__ import annotations

import unittest
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

import attrs
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ..cache._interface import Cache, Cancel
from ..protocol._subscription import EVERYTHING, WILDCARD, Subscription
from ..protocol._view import ResourceView, Selection
from ..wire._node import make_node
from ..wire._records import Node
from ..wire._resource import Resource
from ..wire._typeurls import all_types
from .strategies import THING

__all__ = ["Expected", "TypeState", "WriteOp", "cache_contract"]

C = TypeVar("C")
A = TypeVar("A")

TypeState = dict[str, dict[str, Resource]]
"""What one group should see: resources by type URL and name, for every type served."""


class Expected:
    """What each group of nodes should see, as the write operations say.

    A group's state is ``None`` while the cache has no view for it; otherwise it lists every
    type the cache is authoritative for (possibly with no resources).
    """

    def __init__(
        self, groups: Iterable[Hashable], initial: Mapping[str, Mapping[str, Resource]] | None
    ):
        self.groups: tuple[Hashable, ...] = tuple(dict.fromkeys(groups))
        """The groups of the contract's nodes (writes may name other groups too)."""
        self._initial = _copy(initial)
        self._state: dict[Hashable, TypeState | None] = {
            group: _copy(initial) for group in self.groups
        }
        self.touched: set[Hashable] = set()
        """Groups a write operation said something about since the write began."""

    def state(self, group: Hashable) -> TypeState | None:
        """A copy of what ``group`` should see (``None``: no view)."""
        return _copy(self._state.get(group, self._initial))

    def set_view(self, group: Hashable, types: Mapping[str, Mapping[str, Resource]] | None) -> None:
        """``group`` now sees exactly ``types`` (``None``: the cache has no view for it)."""
        self.touched.add(group)
        self._state[group] = _copy(types)

    def set_type(
        self, group: Hashable, type_url: str, resources: Mapping[str, Resource] | None
    ) -> None:
        """``group`` now sees ``resources`` of ``type_url`` (``None``: not served)."""
        state = self._own(group)
        if state is None:
            state = self._state[group] = {}
        if resources is None:
            state.pop(type_url, None)
        else:
            state[type_url] = dict(resources)

    def put(self, group: Hashable, resource: Resource) -> None:
        """``group`` now sees ``resource`` (added or replacing the one of that name)."""
        state = self._own(group)
        if state is None:
            state = self._state[group] = {}
        state.setdefault(resource.type_url, {})[resource.name] = resource

    def delete(self, group: Hashable, type_url: str, name: str) -> None:
        """``group`` no longer sees ``name`` of ``type_url``."""
        state = self._own(group)
        if state is not None and type_url in state:
            state[type_url].pop(name, None)

    def _own(self, group: Hashable) -> TypeState | None:
        self.touched.add(group)
        if group not in self._state:
            self._state[group] = _copy(self._initial)
        return self._state[group]


def _copy(state: Mapping[str, Mapping[str, Resource]] | None) -> TypeState | None:
    return None if state is None else {t: dict(names) for t, names in state.items()}


@attrs.frozen(repr=False)
class WriteOp(Generic[C, A]):
    """One way to write to the cache: ``apply(cache, arguments, expected)`` writes the
    ``arguments`` drawn from ``arguments`` and records in ``expected`` what each group sees."""

    name: str
    arguments: st.SearchStrategy[A]
    apply: Callable[[C, A, Expected], None]

    def __repr__(self) -> str:
        return self.name

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.name)


@attrs.define(eq=False)
class _Callback:
    """One watcher callable, which may be registered several times."""

    node: Node
    raising: bool
    function: Callable[[], None] = lambda: None
    registrations: list[_Registration] = attrs.Factory(list)
    calls: int = 0
    seen: list[TypeState | None] = attrs.Factory(list)

    @property
    def active(self) -> bool:
        return any(not r.cancelled for r in self.registrations)


@attrs.define(eq=False)
class _Registration:
    cancel: Cancel
    cancelled: bool = False


@attrs.define
class _Taken:
    """A view as it was read when taken."""

    node: Node
    view: ResourceView | None
    contents: TypeState | None
    selections: dict[tuple[str, Subscription], tuple[str, dict[str, str]] | None]


class _WatcherFailed(Exception):
    """Raised on purpose by a contract watcher."""


def _read(view: ResourceView | None, type_urls: Sequence[str]) -> TypeState | None:
    if view is None:
        return None
    found: TypeState = {}
    for type_url in type_urls:
        resources = view.resources(type_url)
        if resources is not None:
            found[type_url] = dict(resources)
    return found


def _versions(state: TypeState | None) -> dict[str, dict[str, str]] | None:
    if state is None:
        return None
    return {t: {n: r.version for n, r in names.items()} for t, names in state.items()}


_DEFAULT_NODES = (
    make_node(id="node-a"),
    make_node(id="node-a", cluster="other-cluster"),
    make_node(id="node-b"),
)


def cache_contract(
    make_cache: Callable[[], C],
    write_ops: Sequence[WriteOp[C, Any]],
    *,
    nodes: Sequence[Node] = _DEFAULT_NODES,
    group: Callable[[Node], Hashable] = lambda node: None,
    initial: Mapping[str, Mapping[str, Resource]] | None = None,
    type_urls: Sequence[str] | None = None,
    as_cache: Callable[[C], Cache] | None = None,
    settings: Settings | None = None,
) -> type[unittest.TestCase]:
    """The contract suite for the cache ``make_cache`` builds, written to by ``write_ops``.

    ``group`` maps a node to the group whose writes it sees (all nodes in one group by
    default); ``initial`` is what every group sees before any write (``None``: no view);
    ``type_urls`` are the types probed (every registered type and one unregistered one by
    default); ``as_cache`` turns what ``make_cache`` returns into the cache under test when
    the write operations need more (for example the caches behind a mux).
    """
    if not write_ops:
        raise ValueError("the contract needs at least one write operation")
    probed: tuple[str, ...] = tuple(type_urls or [*(i.type_url for i in all_types()), THING])
    node_list = list(nodes)
    groups = [group(node) for node in node_list]
    writes = st.one_of([st.tuples(st.just(op), op.arguments) for op in write_ops])
    to_cache: Callable[[C], Cache] = as_cache or (lambda made: cast(Cache, made))

    class CacheContract(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.made: C = make_cache()
            self.cache = to_cache(self.made)
            self.expected = Expected(groups, initial)
            self.taken: list[_Taken] = []
            self.callbacks: list[_Callback] = []
            self.versions: dict[tuple[str, frozenset[tuple[str, str]]], str] = {}
            self.contents: dict[tuple[str, str], frozenset[tuple[str, str]]] = {}

        # --- rules -------------------------------------------------------------------------

        @initialize()
        def nothing_written_yet(self) -> None:
            for node in node_list:
                self._check_view(node, self.cache.view(node))

        @rule(write=writes)
        def write(self, write: tuple[WriteOp[C, Any], Any]) -> None:
            op, arguments = write
            before = {g: _versions(self.expected.state(g)) for g in self.expected.groups}
            for record in self.callbacks:
                record.calls = 0
                record.seen.clear()
            self.expected.touched = set()
            try:
                op.apply(self.made, arguments, self.expected)
            except _WatcherFailed as failure:
                raise AssertionError(
                    f"a watcher's exception escaped {op.name}: a failing watcher must stop "
                    f"neither the other watchers nor the write"
                ) from failure
            for node in node_list:
                self._check_view(node, self.cache.view(node))
            for record in self.callbacks:
                key = group(record.node)
                now = _versions(self.expected.state(key))
                if not record.active:
                    assert record.calls == 0, (
                        f"a cancelled watcher of {record.node.id!r} ran during {op.name}"
                    )
                    continue
                if now != before[key]:
                    assert record.calls >= 1, (
                        f"{op.name} changed what {record.node.id!r} sees; its watcher did "
                        f"not run during the write"
                    )
                    assert _versions(record.seen[-1]) == now, (
                        "a watcher reading the cache while notified saw the old state"
                    )
                if key not in self.expected.touched:
                    assert record.calls == 0, (
                        f"{op.name} touched only {sorted(map(repr, self.expected.touched))}; "
                        f"the watcher of {record.node.id!r} (group {key!r}) ran"
                    )
            for record in self.callbacks:
                record.calls = 0

        @rule(index=st.integers(min_value=0))
        def take_view(self, index: int) -> None:
            node = node_list[index % len(node_list)]
            view = self.cache.view(node)
            self._check_view(node, view)
            self.taken.append(
                _Taken(node=node, view=view, contents=_read(view, probed), selections={})
            )
            self._no_watcher_ran("taking a view")

        @precondition(lambda self: self.taken)
        @rule(data=st.data())
        def select_from_a_view(self, data: st.DataObject) -> None:
            taken = data.draw(st.sampled_from(self.taken), label="view")
            if taken.view is None or taken.contents is None:
                return
            type_url = data.draw(st.sampled_from(probed), label="type_url")
            names = [*sorted(taken.contents.get(type_url, {})), "ghost", WILDCARD]
            listed = data.draw(st.lists(st.sampled_from(names), max_size=3), label="names")
            subscription = Subscription(frozenset(listed) - {WILDCARD}, wildcard=WILDCARD in listed)
            self._check_select(taken, type_url, subscription)
            self._no_watcher_ran("select")

        @rule(index=st.integers(min_value=0), raising=st.booleans(), again=st.booleans())
        def watch(self, index: int, raising: bool, again: bool) -> None:
            node = node_list[index % len(node_list)]
            reusable = [c for c in self.callbacks if c.node == node]
            if again and reusable:
                # The same callable registered once more: every cancel must stay independent.
                record = reusable[-1]
            else:
                record = _Callback(node=node, raising=raising)
                record.function = self._make_callback(record)
                self.callbacks.append(record)
            record.registrations.append(_Registration(self.cache.watch(node, record.function)))
            self._no_watcher_ran("watching")

        def _make_callback(self, record: _Callback) -> Callable[[], None]:
            def callback() -> None:
                record.calls += 1
                record.seen.append(_read(self.cache.view(record.node), probed))
                if record.raising:
                    raise _WatcherFailed("a contract watcher fails on purpose")

            return callback

        @precondition(lambda self: self.callbacks)
        @rule(data=st.data())
        def cancel(self, data: st.DataObject) -> None:
            record = data.draw(st.sampled_from(self.callbacks), label="watcher")
            registration = data.draw(st.sampled_from(record.registrations), label="which")
            registration.cancel()
            registration.cancelled = True
            if data.draw(st.booleans(), label="twice"):
                registration.cancel()  # harmless: it may cancel nothing else
            self._no_watcher_ran("cancelling")

        # --- invariants --------------------------------------------------------------------

        @invariant()
        def views_never_change_once_taken(self) -> None:
            for taken in self.taken:
                now = _read(taken.view, probed)
                assert _versions(now) == _versions(taken.contents), (
                    f"a view of {taken.node.id!r} changed after it was taken"
                )
                assert taken.view is not None or now is None
                for (type_url, subscription), recorded in taken.selections.items():
                    assert taken.view is not None
                    selection = taken.view.select(type_url, subscription)
                    got = None if selection is None else _selection_key(selection)
                    assert got == recorded, f"select({type_url}) on an old view changed"

        # --- helpers -----------------------------------------------------------------------

        def _no_watcher_ran(self, what: str) -> None:
            ran = [c.node.id for c in self.callbacks if c.calls]
            for record in self.callbacks:
                record.calls = 0
            assert not ran, f"{what} ran the watchers of {ran}"

        def _check_view(self, node: Node, view: ResourceView | None) -> None:
            expected = self.expected.state(group(node))
            if expected is None:
                assert view is None, f"no view expected for {node.id!r}, got one"
                return
            assert view is not None, f"{node.id!r} should see {sorted(expected)}, got no view"
            for type_url in probed:
                resources = view.resources(type_url)
                want = expected.get(type_url)
                if want is None:
                    assert resources is None, (
                        f"{type_url} is not served to {node.id!r}, yet resources() gave "
                        f"{sorted(resources or {})}"
                    )
                    assert view.select(type_url, EVERYTHING) is None, (
                        f"{type_url} is not served to {node.id!r}, yet select() answered"
                    )
                    continue
                assert resources is not None, f"{type_url} should be served to {node.id!r}"
                assert view.resources(type_url) is resources, "resources() is not stable"
                got = {n: r.version for n, r in resources.items()}
                assert got == {n: r.version for n, r in want.items()}, (
                    f"{node.id!r} sees {type_url} {sorted(got)}, the writes say {sorted(want)}"
                )
                for name, resource in resources.items():
                    assert resource.name == name
                    assert resource.type_url == type_url

        def _check_select(self, taken: _Taken, type_url: str, subscription: Subscription) -> None:
            view = taken.view
            assert view is not None
            assert taken.contents is not None
            selection = view.select(type_url, subscription)
            twin = Subscription(subscription.names, subscription.wildcard, subscription.legacy)
            resources = view.resources(type_url)
            if resources is None:
                assert selection is None, f"select({type_url}) answered, resources() did not"
                taken.selections[type_url, subscription] = None
                return
            assert selection is not None, f"resources({type_url}) answered, select() did not"
            assert view.select(type_url, twin) is selection, (
                "select() is not memoised: equal subscriptions gave different objects"
            )
            assert selection.type_url == type_url
            chosen = {n: r.version for n, r in resources.items() if subscription.wants(n)}
            got = {n: r.version for n, r in selection.resources.items()}
            assert got == chosen, f"select({type_url}, {subscription}) gave {sorted(got)}"
            key = (type_url, frozenset(got.items()))
            known = self.versions.setdefault(key, selection.version)
            assert known == selection.version, "equal contents got different versions"
            seen = self.contents.setdefault((type_url, selection.version), key[1])
            assert seen == key[1], "one version names two different contents"
            taken.selections[type_url, subscription] = _selection_key(selection)
            self._check_changed_since(taken, type_url, resources)

        def _check_changed_since(
            self, taken: _Taken, type_url: str, resources: Mapping[str, Resource]
        ) -> None:
            view = taken.view
            changed_since = getattr(view, "changed_since", None)
            if changed_since is None:
                return
            assert changed_since(type_url, resources) in (frozenset(), None), (
                "changed_since(its own mapping) must be empty or unknown"
            )
            for earlier in self.taken[: self.taken.index(taken)]:
                if earlier.view is None or earlier.node != taken.node:
                    continue
                before = earlier.view.resources(type_url)
                if before is None:
                    continue
                names = changed_since(type_url, before)
                if names is None:
                    continue
                differ = {
                    n
                    for n in before.keys() | resources.keys()
                    if n not in before
                    or n not in resources
                    or before[n].version != resources[n].version
                }
                missed = differ - set(names)
                assert not missed, f"changed_since missed {sorted(missed)} of {type_url}"

    CacheContract.__name__ = CacheContract.__qualname__ = "CacheContract"
    test_case: type[unittest.TestCase] = CacheContract.TestCase
    if settings is not None:
        test_case.settings = settings  # type: ignore[attr-defined]
    return test_case


def _selection_key(selection: Selection) -> tuple[str, dict[str, str]]:
    return selection.version, {n: r.version for n, r in selection.resources.items()}
